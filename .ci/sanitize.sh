#!/usr/bin/env bash
# The Cython core under AddressSanitizer and UBSan with halt_on_error=1 (as docs/fuzzing.md
# runs it): the fuzz reproducers, then a fixed slice of the fuzz harness (about a minute).
# Python itself is not instrumented, so libasan and libubsan are preloaded. Leaves the
# sanitized build in place: the caller builds the optimised one again.
set -euo pipefail
cd "$(dirname "$0")/.."

# The accelerator is not built sanitized (pyarrow is not instrumented): test the pure path.
export WIREARROW_NO_ACCELERATOR=1
WIREARROW_SANITIZE=1 python setup.py build_ext --inplace --force >/dev/null
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export LD_PRELOAD
export ASAN_OPTIONS=detect_leaks=0,abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1,print_stacktrace=1
python -m pytest -n 0 -q -p no:cacheprovider tests/fuzz/test_fuzz.py -k "not slice"
python tests/fuzz/run.py --batches "${WIREARROW_SANITIZE_BATCHES:-28}" --seed 7 --batch 24
