"""Command-line arguments that several ``wirearrow`` commands share (``transcode``,
``check``, ``schema``, ``bench``, ``playground``): defined once here, below the commands.

The input flags are :class:`~wirearrow.RecordFormat`'s fields, their choices and help taken
from its definition: a flag given overrides the plan's ``input:`` section field by field.
The output flags are :class:`~wirearrow.Output`'s, the same way over the plan's ``output:``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from wirearrow.output import FIELDS as OUTPUT_FIELDS
from wirearrow.output import Output
from wirearrow.sources.format import FIELDS, RecordFormat

__all__ = [
    "INPUT_FLAGS",
    "OUTPUT_FLAGS",
    "add_import_paths",
    "add_input_arguments",
    "add_output_arguments",
    "add_schema_ids",
    "in_flags",
    "input_format",
    "out_flags",
    "output_of",
    "positive",
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


# The flag of each Output field (its metadata's "flag"): --to, -o/--output, --table, ...
OUTPUT_FLAGS = {name: f.metadata["flag"] for name, f in OUTPUT_FIELDS.items() if f.metadata.get("flag")}
_PROPERTY = re.compile(r"^[A-Za-z_][\w.-]*=")  # a catalog property: KEY=VALUE (a URL has "://" first)


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def add_output_arguments(command: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The output flags, one per :class:`~wirearrow.Output` field, each defaulting to the
    plan's ``output:``."""
    for name, flag in OUTPUT_FLAGS.items():
        f = OUTPUT_FIELDS[name]
        kwargs: dict[str, Any] = {"dest": f"output_{name}", "default": None}
        flags = [flag]
        if name == "path":
            flags = ["-o", flag]
            kwargs["metavar"] = "OUT"
        elif name == "partition":
            kwargs |= {"action": "append", "metavar": "FIELD"}
        elif name == "catalog":
            kwargs |= {"action": "append", "metavar": "URL|NAME|KEY=VALUE"}
        elif name in ("row_group_size", "commit_every"):
            kwargs |= {"type": positive, "metavar": "N"}
        elif f.metadata.get("choices"):
            kwargs["choices"] = f.metadata["choices"]
        else:
            kwargs["metavar"] = name.upper().replace("_", "-") if name != "table" else "NS.NAME|DIR"
        doc = f.metadata["doc"].replace("%", "%%").replace("`", "")
        extra = {
            "partition": " (repeat for several)",
            "catalog": "; KEY=VALUE: one property of a catalog's (repeat for several)",
        }.get(name, "")
        command.add_argument(*flags, help=f"{doc}{extra}; default: the plan's output.{name}", **kwargs)


def output_of(args: argparse.Namespace, base: Output) -> Output:
    """``base`` (the plan's output) with the output flags given on the command line over it.

    Another format than the plan's (``--to``, or ``-o`` alone for Parquet) starts from that
    format's defaults: the plan's settings of the other format do not apply. ValueError (in
    the flags' words) when the result is not a valid output."""
    changes = {
        name: getattr(args, f"output_{name}")
        for name in OUTPUT_FLAGS
        if getattr(args, f"output_{name}", None) is not None
    }
    if "catalog" in changes:
        changes["catalog"] = _catalog(changes["catalog"])
    if "partition" in changes:
        changes["partition"] = tuple(changes["partition"])
    fmt = changes.get("format")
    if fmt is None and "path" in changes and base.is_table:
        fmt = changes["format"] = "parquet"  # -o names files
    if fmt is not None and fmt != base.format:
        # the codec and row groups are every format's; the rest belongs to the plan's format
        kept = {"compression": base.compression, "row_group_size": base.row_group_size}
        return Output(**{**kept, **changes})
    return base.replace(**changes) if changes else base


def _catalog(items: list[str]) -> str | dict[str, str]:
    properties = [i for i in items if _PROPERTY.match(i)]
    if not properties:
        if len(items) > 1:
            raise ValueError(f"catalog is one URL or name, not {len(items)}: {', '.join(items)}")
        return items[0]
    if len(properties) != len(items):
        raise ValueError(
            "catalog: give a URL or name, or KEY=VALUE properties (uri=URL among them), not both"
        )
    return dict(i.split("=", 1) for i in properties)


def out_flags(message: str) -> str:
    """An Output error in the command line's words (``table`` -> ``--table``, ``format
    iceberg`` -> ``--to iceberg``)."""
    message = re.sub(r"\(format iceberg or delta\)", "(--to iceberg or --to delta)", message)
    message = re.sub(r"\bformat (must|iceberg|delta|parquet)", r"--to \1", message)
    for name in sorted(OUTPUT_FLAGS, key=len, reverse=True):
        if name == "format":
            continue
        message = re.sub(rf"(?<![-.\w]){name}\b(?! output)", OUTPUT_FLAGS[name], message)
    return message
