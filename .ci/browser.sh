#!/usr/bin/env bash
# The playground in a real browser: Debian's Chromium and its driver (installed only when
# missing), Selenium from PyPI, then the tests marked `browser`. WIREARROW_REQUIRE_BROWSER
# turns their "no Chromium" skip into a failure: here the test must run.
# The screenshots are left in out/ci-artifacts/ (gitignored) for the CI to keep.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
pip install --quiet --group browser
WIREARROW_REQUIRE_BROWSER=1 python -m pytest -m browser -q -rs
ls out/ci-artifacts/playground.png
