"""mkdocs hook: the READMEs of pipelines/ and benchmarks/ as pages of the site.

They live next to the code they describe (and are read there on GitHub); the site shows
them as pipelines.md and benchmarks.md, their ``../docs/X`` links rewritten to ``X``.
"""

from __future__ import annotations

import os
import re

from mkdocs.structure.files import File

PAGES = {"pipelines.md": "pipelines/README.md", "benchmarks.md": "benchmarks/README.md"}
_DOCS_LINK = re.compile(r"\]\(\.\./docs/")


def on_files(files, config):
    root = os.path.dirname(config["config_file_path"])
    for page, readme in PAGES.items():
        path = os.path.join(root, readme)
        files.append(File.generated(config, page, abs_src_path=path))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri in PAGES:
        return _DOCS_LINK.sub("](", markdown)
    return markdown
