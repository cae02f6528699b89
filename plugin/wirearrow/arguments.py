"""Command-line arguments that several ``wirearrow`` commands share (``transcode``,
``check``, ``schema``, ``playground``): defined once here, below the commands that use them."""

from __future__ import annotations

import argparse

__all__ = ["add_import_paths"]


def add_import_paths(
    command: argparse.ArgumentParser | argparse._ArgumentGroup, help: str
) -> None:
    """The repeatable -I/--import-path DIR option (protoc include directories)."""
    command.add_argument(
        "-I",
        "--import-path",
        dest="import_paths",
        action="append",
        default=[],
        metavar="DIR",
        help=help,
    )
