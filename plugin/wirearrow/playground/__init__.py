"""``wirearrow playground``: try a plan on real records in a local web page.

    wirearrow playground [PLAN.yaml] [RECORDS] [--framing F ...] [--proto FILE --message M]

Serves one page on 127.0.0.1 (a free port unless ``--port``; the URL is printed, no
browser is opened): the schema as a tree, a plan editor with the errors of
``wirearrow check``, and a live preview on a sample of the records (docs/playground.md).
Importing this package is cheap (argparse only): the server, pyarrow and the decoder load
when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from wirearrow.arguments import add_import_paths, add_input_arguments, add_schema_ids
from wirearrow.sources.format import RecordFormat

if TYPE_CHECKING:
    from wirearrow.playground.session import Session
    from wirearrow.schema import Schema

__all__ = ["DESCRIPTION", "HELP", "configure", "run", "session_of"]

HELP = "try a plan on a sample of real records in a local web page"
DESCRIPTION = (
    "Serve a page on 127.0.0.1 where a plan is edited and previewed on a sample of RECORDS "
    "(read from the start of the file, at most --sample records and --max-bytes bytes). "
    "The URL is printed; stop with Ctrl-C."
)


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, on the ``playground`` subparser of the ``wirearrow`` CLI."""
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="PLAN.yaml|RECORDS",
        help="a YAML plan (a file ending in .yaml/.yml) and/or a file of framed records",
    )
    # The input flags of `wirearrow transcode`, from the same definitions.
    records = parser.add_argument_group("records (default: the plan's input section)")
    add_input_arguments(records)
    add_schema_ids(records)
    schema = parser.add_argument_group("schema (when there is no plan, or to override it)")
    schema.add_argument("--proto", metavar="FILE", help="a .proto file")
    schema.add_argument("--descriptor-set", metavar="FILE", help="a serialized FileDescriptorSet")
    schema.add_argument("--module", metavar="NAME", help="a generated *_pb2 module to import")
    schema.add_argument("--message", metavar="NAME", help="the message (full name or suffix)")
    add_import_paths(schema, "protoc include directory for --proto (repeatable)")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument(
        "--sample", type=int, default=1000, metavar="N", help="records read (default 1000)"
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=8 << 20,
        metavar="N",
        help="bytes of RECORDS read at most (default 8 MiB)",
    )
    parser.add_argument(
        "--rows", type=int, default=50, metavar="N", help="preview rows shown (default 50)"
    )
    parser.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"wirearrow: error: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    """Set up the session from the arguments, serve until interrupted."""
    from wirearrow.playground.server import make_server
    from wirearrow.playground.session import PlaygroundError

    try:
        session = session_of(args)
    except PlaygroundError as err:
        return _fail(str(err))
    try:
        server = make_server(session, port=args.port)
    except OSError as err:
        return _fail(f"cannot listen on 127.0.0.1:{args.port}: {err.strerror or err}")
    port = server.server_address[1]
    print(f"wirearrow playground: http://127.0.0.1:{port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def session_of(args: argparse.Namespace) -> Session:
    """The session the command's arguments describe: its plan, schema and records, read
    as the input flags say over the plan's input section (PlaygroundError: why not)."""
    from wirearrow.arguments import in_flags, input_format
    from wirearrow.playground.session import Limits, PlaygroundError, SchemaSource, Session

    plans = [p for p in args.inputs if p.lower().endswith((".yaml", ".yml"))]
    records = [p for p in args.inputs if p not in plans]
    if len(plans) > 1 or len(records) > 1:
        raise PlaygroundError("give at most one PLAN.yaml and one RECORDS file")
    if min(args.sample, args.max_bytes, args.rows) < 1:
        raise PlaygroundError("--sample, --max-bytes and --rows must be at least 1")
    limits = Limits(max_records=args.sample, max_bytes=args.max_bytes, preview_rows=args.rows)
    session = Session(limits)
    base = RecordFormat()
    if plans:
        session.open_plan(plans[0])
        base = _plan_input(plans[0])
    sources = [k for k in ("proto", "descriptor_set", "module") if getattr(args, k)]
    if len(sources) > 1:
        raise PlaygroundError("give one of --proto, --descriptor-set, --module")
    if sources:
        if not args.message:
            raise PlaygroundError(f"--{sources[0].replace('_', '-')} needs --message")
        value = getattr(args, sources[0])
        if sources[0] != "module" and os.path.exists(value):
            value = os.path.abspath(value)
        roots = tuple(os.path.abspath(p) for p in args.import_paths)
        session.set_schema(SchemaSource(sources[0], value, args.message, roots))
        if not plans:
            session.mode = "lines"
    # Confluent records: the ids --schema-id names, else the plan's, else any id is the
    # session's schema.
    schemas = {}
    if args.schema_id:
        session.schema_ids = dict(_schema_id(text) for text in args.schema_id)
        schemas["schemas"] = session.schema_of_id
    elif (args.input_framing or base.framing) == "confluent" and base.schemas is None:
        schemas["schemas"] = session.schema_of_id
    try:
        fmt = input_format(args, base, **schemas)
    except (TypeError, ValueError) as err:  # input flags that contradict each other
        raise PlaygroundError(in_flags(str(err))) from None
    session.input = fmt
    if records:
        session.set_records_file(records[0], fmt)
    return session


def _schema_id(text: str) -> tuple[int, Schema | None]:
    """A --schema-id value: (id, None: the session's schema | the Schema it names)."""
    import wirearrow as wa
    from wirearrow.arguments import schema_id_arg
    from wirearrow.errors import WirearrowError
    from wirearrow.playground.session import PlaygroundError

    try:
        sid, file, message = schema_id_arg(text)
        if file is None or message is None:
            return sid, None
        root = os.path.dirname(os.path.abspath(file))
        return sid, wa.Schema.from_proto(file, message, import_paths=[root])
    except (ValueError, WirearrowError, OSError) as err:
        raise PlaygroundError(str(err)) from None


def _plan_input(path: str) -> RecordFormat:
    """The plan's input: section (the defaults when the plan does not load: the page
    shows its problems)."""
    from wirearrow.config import load_plan
    from wirearrow.errors import WirearrowError

    try:
        return load_plan(os.path.abspath(path)).input
    except (WirearrowError, ValueError):
        return RecordFormat()
