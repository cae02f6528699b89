#!/usr/bin/env bash
# What the playground's test in a real browser needs: Debian's Chromium and its driver
# (installed only when missing) and Selenium from PyPI. The test itself is in the release
# tier (`./run test release`, or `python -m pytest -m browser`); WIREARROW_REQUIRE_BROWSER=1
# turns its "no Chromium" skip into a failure. It leaves its screenshots in
# out/ci-artifacts/ (gitignored) for the CI to keep.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
pip install --quiet --group browser
