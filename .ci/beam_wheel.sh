#!/usr/bin/env bash
# The Beam job through Beam's portable job API with the repaired manylinux wheel of
# .ci/wheel.sh (run before this) staged as --extra_package: each SDK worker installs it
# offline and imports wirearrow from it (tests/test_beam_portable.py; the normal suite
# stages a small probe wheel instead). ~40 s.
set -euo pipefail
cd "$(dirname "$0")/.."

WIREARROW_WHEEL=$(ls "$PWD"/out/wheel/repaired/wirearrow-*manylinux*.whl) \
    python -m pytest -q -m engines tests/test_beam_portable.py
