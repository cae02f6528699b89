#!/usr/bin/env bash
# Type checking: mypy over plugin/ (config in pyproject.toml), then stubtest: each compiled
# wirearrow._core module against its .pyi (an allowlist holds only what stubtest cannot
# check, each with why). Needs the extensions built in place (stubtest imports them).
set -euo pipefail
cd "$(dirname "$0")/.."

pip install --quiet --group typecheck
python -m mypy
# Every compiled module, and the layout module the stubs name. A new .pyx must be added here with its .pyi.
# The accelerator is optional (setup.py): checked when this checkout built it.
optional=""
for module in wirearrow._core.accelerator ; do
    python -c "import $module" 2>/dev/null && optional="$optional $module"
done
python -m mypy.stubtest --mypy-config-file pyproject.toml \
    --allowlist .ci/stubtest-allowlist.txt \
    wirearrow._core.buffers wirearrow._core.decoder wirearrow._core.encoder \
    wirearrow._core.framing wirearrow._core.rows wirearrow._core.layout \
    wirearrow._core.jsonwire $optional
