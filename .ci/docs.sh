#!/usr/bin/env bash
# The documentation site: the docs' examples run (tests/test_docs.py), then
# `mkdocs build --strict` (a broken link or anchor, a nav entry without its page, or a
# docstring mkdocstrings cannot read fails it) into site/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

pip install --quiet --group docs
python -m pytest tests/test_docs.py -q
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet
test -f site/index.html && test -f site/api/index.html
