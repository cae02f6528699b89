#!/usr/bin/env bash
# The documentation site: `mkdocs build --strict` into site/ (gitignored). Strict: a broken
# link or anchor, a page left out of the nav, a nav entry without its page or a docstring
# mkdocstrings cannot read fails it. The pages' examples (tests/test_docs.py: pycon blocks
# in the unit or engines tier, console blocks in the release tier) run in .ci/run's tiers
# before; pass --examples to run them all here too.
set -euo pipefail
cd "$(dirname "$0")/.."

pip install --quiet --group docs
if [ "${1:-}" = "--examples" ]; then
    python -m pytest tests/test_docs.py -m "" -q
fi
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet
test -f site/index.html && test -f site/api/index.html && test -f site/playground/index.html
