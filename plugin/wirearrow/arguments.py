"""Command-line arguments that several ``wirearrow`` commands share (``transcode``,
``check``, ``schema``, ``bench``, ``playground``): defined once here, below the commands.

The input flags are :class:`~wirearrow.RecordFormat`'s fields, their choices and help taken
from its definition: a flag given overrides the plan's ``input:`` section field by field.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from wirearrow.sources.format import FIELDS, RecordFormat

__all__ = [
    "INPUT_FLAGS",
    "add_import_paths",
    "add_input_arguments",
    "add_schema_ids",
    "in_flags",
    "input_format",
    "schema_id_arg",
]

# The flag of each RecordFormat field a file of records can need. compression is
# --input-compression: --compression is the Parquet output's codec. schemas is --schema-id
# (ids and their .proto files, resolved by the command); column: files have no columns.
INPUT_FLAGS = {
    "format": "--format",
    "framing": "--framing",
    "delimited_by": "--delimited-by",
    "compression": "--input-compression",
    "ignore_unknown_fields": "--ignore-unknown-fields",
    "schema_id": "--schema-id-column",
}


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


def add_input_arguments(
    command: argparse.ArgumentParser | argparse._ArgumentGroup, fields: tuple[str, ...] = tuple(INPUT_FLAGS)
) -> None:
    """The input flags of ``fields`` (default: all), each defaulting to the plan's input."""
    for name in fields:
        f = FIELDS[name]
        kwargs: dict[str, Any] = {"dest": f"input_{name}", "default": None}
        if name == "ignore_unknown_fields":
            kwargs |= {"action": "store_const", "const": True}
        elif name == "schema_id":
            kwargs |= {"nargs": "?", "const": True, "metavar": "NAME"}
        else:
            kwargs["choices"] = f.metadata["choices"]
        doc = f.metadata["doc"].replace("%", "%%")
        command.add_argument(INPUT_FLAGS[name], help=f"{doc}; default: the plan's input.{name}", **kwargs)


def add_schema_ids(command: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--schema-id ID[=FILE.proto:MESSAGE] (repeatable): the Confluent schema ids accepted."""
    command.add_argument(
        "--schema-id",
        action="append",
        metavar="ID[=FILE.proto:MESSAGE]",
        help="--framing confluent: a schema id to accept (repeat for several): ID alone "
        "names the plan's message, ID=FILE.proto:MESSAGE another schema version; default: "
        "the plan's input.schemas",
    )


def schema_id_arg(text: str) -> tuple[int, str | None, str | None]:
    """A --schema-id value as (id, FILE.proto or None, MESSAGE or None); a ValueError
    saying what is expected."""
    head, sep, source = text.partition("=")
    try:
        sid = int(head)
        if not 0 <= sid < 1 << 31:
            raise ValueError
    except ValueError:
        raise ValueError(f"--schema-id {text!r}: the id is an integer from 0 to 2**31-1") from None
    if not sep:
        return sid, None, None
    file, colon, message = source.rpartition(":")
    if not colon or not file or not message:
        raise ValueError(f"--schema-id {text!r}: expected ID=FILE.proto:MESSAGE")
    return sid, file, message


def input_format(args: argparse.Namespace, base: RecordFormat, **given: Any) -> RecordFormat:
    """``base`` (the plan's input) with the input flags given on the command line, and
    ``given`` (fields the command resolved itself, such as schemas) over it."""
    changes = {
        name: getattr(args, f"input_{name}")
        for name in INPUT_FLAGS
        if getattr(args, f"input_{name}", None) is not None
    }
    changes.update(given)
    # A flag replaces what of the plan's input it contradicts: another framing its Confluent
    # settings, another format its framing or its JSON option.
    if changes.get("format") == "json" and "framing" not in changes:
        changes["framing"] = None
    if changes.get("format") == "binary" and "ignore_unknown_fields" not in changes:
        changes["ignore_unknown_fields"] = False
    confluent = changes.get("framing", base.framing) == "confluent"
    if base.confluent and not confluent:
        changes.update(schemas=None, schema_id=False, delimited_by=None)
    return base.replace(**changes)


def in_flags(message: str) -> str:
    """A RecordFormat error in the command line's words (``schemas=`` -> ``--schema-id``,
    ``framing='confluent'`` -> ``--framing confluent``)."""
    flags = {**INPUT_FLAGS, "schemas": "--schema-id"}
    for name in sorted(flags, key=len, reverse=True):
        message = re.sub(rf"\b{name}='([^']*)'", rf"{flags[name]} \1", message)
        message = re.sub(rf"\b{name}=", flags[name], message)
    return message
