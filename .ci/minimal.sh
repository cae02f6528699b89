#!/usr/bin/env bash
# The minimal install: a fresh virtualenv, `pip install .` with no extras and the newest
# version of every dependency pip resolves (today protobuf 7, which [all] never sees: Beam
# holds protobuf below 7), then the unit tier. Ray and Beam are not installed: no unit test
# may need them (tests/conftest.py fails one that imports them).
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf .venv-minimal
python3 -m venv .venv-minimal
. .venv-minimal/bin/activate
python -m pip install --quiet --upgrade pip
# A regular (not editable) install: the wheel pip builds is what users get.
pip install --quiet --upgrade . --group test
pip list --format=freeze | grep -iE '^(protobuf|grpcio-tools|pyarrow|numpy)=='
if python -c "import ray" 2>/dev/null || python -c "import apache_beam" 2>/dev/null; then
    echo "minimal install pulled in ray or apache_beam" >&2
    exit 1
fi

# Run from a directory outside the checkout, so `import wirearrow` is the installed
# package, not plugin/ (pytest's rootdir and conftest still come from tests/).
cd tests
python -c "import wirearrow, sys; assert '/plugin/' not in wirearrow.__file__, wirearrow.__file__"
python -m pytest -q -p no:cacheprovider -n auto -c ../pyproject.toml --rootdir .. .
deactivate
