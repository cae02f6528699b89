"""YAML plans (wirearrow.config): the reference's format, path resolution, every error.

Errors are checked by their full location: ``file:line: key.path: message``.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pickle
import re
import textwrap
from pathlib import Path

import pytest

import wirearrow as wa
from wirearrow.config import PlanConfig, load_plan
from wirearrow.plan.expressions import FUNCTIONS, Call, Lit, PathRef

ORDER_PROTO = """\
syntax = "proto3";
package bp;
message Item { string id = 1; string name = 2; int64 qty = 3; double price = 4; }
message Order {
  string id = 1;
  string name = 2;
  repeated Item items = 3;
  map<string, string> tags = 4;
  optional int32 seq = 5;
}
"""

# The nested expr of the reference's §4.1 example is upper(name); fall back to a function
# this build has when upper is not there yet.
INNER = "upper" if "upper" in FUNCTIONS else "concat"

# bufarrow-behaviour §4.1, its shape and keys exactly (with a real schema).
REFERENCE_PLAN = f"""\
proto:                    # required
  file: order.proto       # required; resolved THROUGH import_paths
  message: Order          # required
  import_paths: [protos]  # optional
denormalizer:             # required
  columns:                # required, >=1
    - name: out_col       # required, non-empty
      path: items[*].id   # exactly one of path / expr
      strict: false       # optional, path columns only
    - name: computed
      expr:
        func: concat      # required; lowercase names
        sep: "-"          # optional string
        param: 0          # optional int (0 = unset: concat ignores it, as the reference)
        args:             # ordered; each item has exactly one of path / literal / expr
          - path: items[*].id
          - literal: "x"
          - expr: {{func: {INNER}, args: [{{path: name}}]}}
"""


def order_message(cls: type, **kw: object) -> bytes:
    msg = cls(**kw)
    return msg.SerializeToString(deterministic=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/protos/order.proto and tmp/plans/ (plans are written there by the tests)."""
    (tmp_path / "protos").mkdir()
    (tmp_path / "protos" / "order.proto").write_text(ORDER_PROTO)
    (tmp_path / "plans").mkdir()
    return tmp_path


@pytest.fixture
def order_records(project: Path) -> list[bytes]:
    from google.protobuf import message_factory

    schema = wa.Schema.from_proto("order.proto", "Order", import_paths=[project / "protos"])
    cls = message_factory.GetMessageClass(schema.descriptor)
    item = cls.DESCRIPTOR.fields_by_name["items"].message_type
    item_cls = message_factory.GetMessageClass(item)
    return [
        order_message(cls, id="o1", name="alice", items=[item_cls(id="i1"), item_cls(id="i2")]),
        order_message(cls, id="o2", name="bob"),
    ]


def write(directory: Path, text: str, name: str = "plan.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(source: object, **kw: object) -> list[str]:
    with pytest.raises(wa.PlanError) as info:
        load_plan(source, **kw)  # type: ignore[arg-type]
    return info.value.problems


# ---- the reference's format -------------------------------------------------------------


def test_reference_format_loads_unchanged(project: Path, order_records: list[bytes]) -> None:
    plan_path = write(project, REFERENCE_PLAN)
    plan = load_plan(plan_path)
    assert plan.mode == "flat"
    assert plan.proto == wa.config.ProtoSource("order.proto", "Order", (str(project / "protos"),))
    out_col, computed = plan.columns
    assert out_col == wa.Column("items[*].id", name="out_col", strict=False)
    assert computed.name == "computed"
    assert computed.expr == Call(
        "concat",
        (PathRef("items[*].id"), Lit("x"), Call(INNER, (PathRef("name"),))),
        sep="-",
    )
    batch = plan.transcoder().transcode(order_records)
    name = "ALICE" if INNER == "upper" else "alice"
    assert batch.to_pydict() == {
        "out_col": ["i1", "i2", None],
        "computed": [
            f"i1-x-{name}",
            f"i2-x-{name}",
            "-x-" + ("BOB" if INNER == "upper" else "bob"),
        ],
    }
    assert wa.load_plan(plan_path).transcoder().transcode(order_records).equals(batch)


def test_defaults(project: Path) -> None:
    plan = load_plan(write(project, "proto: {file: protos/order.proto, message: Order}\n"))
    assert plan.columns is None and plan.mode == "nested"
    assert plan.options == {
        "on_error": "raise",
        "validate": "plan",
        "timestamp_unit": "us",
        "max_nesting": 100,
        "max_depth": None,
        "enums": "number",
        "keep_unknown": False,
        "well_known_types": True,
        "unvalidated_strings": "utf8",
        "bytes_as_string": (),
        "oneof_case": False,
        "extensions": False,
        "any_types": (),
        "field_ids": True,
    }
    assert plan.settings == ()
    assert plan.output == wa.Output()
    assert plan.input == wa.RecordFormat()
    assert plan.dead_letter_path is None
    assert plan.source.endswith("plan.yaml")


def test_extensions(project: Path) -> None:
    plan = load_plan(
        write(
            project,
            """\
            proto: {file: order.proto, message: bp.Order, import_paths: [protos]}
            errors: {policy: dead_letter, dead_letter_path: out/dead.parquet}
            timestamp_unit: ns
            validate: full
            enums: number
            max_nesting: 7
            output: {path: out/orders.parquet, compression: ZSTD, row_group_size: 1000}
            input: {framing: varint}
            """,
        )
    )
    assert dict(plan.settings) == {
        "on_error": "dead_letter",
        "timestamp_unit": "ns",
        "validate": "full",
        "enums": "number",
        "max_nesting": 7,
    }
    assert plan.spec() == wa.TranscodeSpec(
        plan.schema(),
        None,
        on_error="dead_letter",
        validate="full",
        timestamp_unit="ns",
        max_nesting=7,
    )
    assert plan.dead_letter_path == str(project / "out" / "dead.parquet")
    assert plan.output == wa.Output(
        path=str(project / "out" / "orders.parquet"), compression="zstd", row_group_size=1000
    )
    assert plan.input.framing == "varint"
    tc = plan.transcoder()
    assert tc.arrow_schema.names == ["id", "name", "items", "tags", "seq"]


@pytest.mark.parametrize(
    ("text", "policy", "dead"),
    [
        ("errors: skip", "skip", None),
        ("errors: {policy: raise}", "raise", None),
        ("errors: {dead_letter_path: d.parquet}", "dead_letter", "d.parquet"),
    ],
)
def test_errors_forms(project: Path, text: str, policy: str, dead: str | None) -> None:
    plan = load_plan(
        write(project, f"proto: {{file: protos/order.proto, message: Order}}\n{text}\n")
    )
    assert plan.options["on_error"] == policy
    assert plan.dead_letter_path == (str(project / dead) if dead else None)


def test_column_name_defaults_to_the_path(project: Path, order_records: list[bytes]) -> None:
    plan = load_plan(
        write(
            project,
            """\
            proto: {file: protos/order.proto, message: Order}
            denormalizer:
              columns:
                - path: id
                - path: items[*].id
                  strict: true
            """,
        )
    )
    assert [c.output_name for c in plan.columns] == ["id", "items[*].id"]
    assert plan.columns[1].strict
    assert plan.transcoder().transcode(order_records).num_rows == 3


# ---- sources and path resolution ---------------------------------------------------------


def test_relative_paths_resolve_from_the_plan_directory(
    project: Path,
    order_records: list[bytes],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """file relative to an import path, or to the plan's directory; never to the CWD."""
    via_import = write(
        project / "plans",
        """\
        proto: {file: order.proto, message: Order, import_paths: [../protos]}
        denormalizer: {columns: [{name: id, path: id}]}
        output: {path: ../out/x.parquet}
        """,
        "a.yaml",
    )
    via_dir = write(
        project / "plans",
        """\
        proto: {file: ../protos/order.proto, message: Order}
        denormalizer: {columns: [{name: id, path: id}]}
        """,
        "b.yaml",
    )
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)
    for plan_path in (via_import, via_dir):
        relative = os.path.relpath(plan_path, elsewhere)
        plan = load_plan(relative)
        assert plan.source == relative
        assert plan.transcoder().transcode(order_records).column("id").to_pylist() == ["o1", "o2"]
    assert load_plan(via_import).output.path == str(project / "out" / "x.parquet")
    # An absolute file works with or without import paths.
    absolute = load_plan(
        {
            "proto": {
                "file": str(project / "protos" / "order.proto"),
                "message": "Order",
                "import_paths": [str(project / "protos")],
            }
        }
    )
    assert absolute.schema().message_name == "bp.Order"


def test_text_dict_bytes_and_path_sources(
    project: Path, order_records: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "proto: {file: order.proto, message: Order, import_paths: [protos]}\n" + (
        "denormalizer: {columns: [{name: n, path: name}]}\n"
    )
    data = {
        "proto": {"file": "order.proto", "message": "Order", "import_paths": ["protos"]},
        "denormalizer": {"columns": [{"name": "n", "path": "name"}]},
    }
    file = write(project, text)
    monkeypatch.chdir(project)  # text and dicts resolve against the CWD by default
    plans = [load_plan(text), load_plan(text.encode()), load_plan(data), load_plan(file)]
    plans.append(load_plan(str(file)))
    assert [p.source for p in plans[:3]] == ["<string>", "<string>", "<dict>"]
    assert len({dataclasses.replace(p, source="") for p in plans}) == 1
    assert load_plan(plans[0]) is plans[0]
    for source in (text, data, file):
        batch = wa.load_plan(source).transcoder().transcode(order_records)
        assert batch.column("n").to_pylist() == ["alice", "bob"]
    # base_dir instead of the CWD
    monkeypatch.chdir(project / "plans")
    assert load_plan(text, base_dir=project).proto.import_paths == (str(project / "protos"),)
    with pytest.raises(TypeError, match="a plan is a path, YAML text or a mapping"):
        load_plan(42)  # type: ignore[arg-type]


def test_plan_config_is_frozen_and_picklable(project: Path, order_records: list[bytes]) -> None:
    plan = load_plan(write(project, REFERENCE_PLAN))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.source = "x"  # type: ignore[misc]
    clone = pickle.loads(pickle.dumps(plan))
    assert clone == plan
    assert (
        clone.transcoder()
        .transcode(order_records)
        .equals(plan.transcoder().transcode(order_records))
    )
    assert plan.schema() is plan.schema()  # compiled once
    skip = plan.with_options(on_error="skip")
    assert skip.transcoder().transcode([b"\xff", order_records[0]]).num_rows == 2


def test_missing_plan_file(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path / "nope.yaml")
    assert problem.startswith(f"{tmp_path / 'nope.yaml'}: cannot read the plan: ")
    (problem,) = problems("nope.yml")
    assert problem.startswith("nope.yml: cannot read the plan")


# ---- errors: one per class, located ------------------------------------------------------

HEAD = "proto: {file: protos/order.proto, message: Order}\n"

# (plan text written to plan.yaml, the problems expected: "line: key.path: message" regexes)
ERRORS = {
    "unknown top-level key": (
        HEAD + "denormaliser: {columns: [{path: id}]}\n",
        [
            r"2: denormaliser: unknown key \(did you mean 'denormalizer'\?\); expected one of: proto, "
        ],
    ),
    "unknown column key (the reference's alias example)": (
        HEAD + "denormalizer:\n  columns:\n    - name: a\n      alias: b\n      path: id\n",
        [
            r"5: denormalizer.columns\[0\].alias: unknown key; expected one of: name, path, expr, strict"
        ],
    ),
    "unknown proto key": (
        "proto:\n  file: protos/order.proto\n  message: Order\n  include: [x]\n",
        [r"4: proto.include: unknown key; expected one of: file, descriptor_set, module, message, import_paths"],
    ),
    "unknown expr and arg keys": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: c\n      expr:\n        func: has\n"
        + "        argz: []\n        args:\n          - {path: id, lit: 1}\n",
        [
            r"7: denormalizer.columns\[0\].expr.argz: unknown key \(did you mean 'args'\?\)",
            r"9: denormalizer.columns\[0\].expr.args\[0\].lit: unknown key",
        ],
    ),
    "missing proto": (
        "denormalizer: {columns: [{path: id}]}\n",
        [r"1: proto: required key is missing"],
    ),
    "missing proto.file and proto.message": (
        "proto:\n  import_paths: []\n",
        [r"1: proto.file: required key is missing", r"1: proto.message: required key is missing"],
    ),
    "wrong types": (
        "proto: {file: {a: 3}, message: [Order], import_paths: protos}\n",
        [
            r"1: proto.file: expected a string, got a mapping",
            r"1: proto.message: expected a string, got a list",
            r"1: proto.import_paths: expected a list of directories, got a string",
        ],
    ),
    "proto file not found": (
        "proto:\n  file: missing.proto\n  message: Order\n  import_paths: [protos]\n",
        [
            r"2: proto.file: 'missing.proto' not found; tried: .*protos/missing.proto, .*missing.proto"
        ],
    ),
    "import path not a directory": (
        "proto:\n  file: protos/order.proto\n  message: Order\n  import_paths:\n    - nowhere\n",
        [r"5: proto.import_paths\[0\]: 'nowhere' is not a directory"],
    ),
    "custom_message keys are checked": (
        HEAD + "custom_message:\n  file: protos/order.proto\n  mesage: Item\n",
        [
            r"2: custom_message.message: required key is missing",
            r"4: custom_message.mesage: unknown key \(did you mean 'message'\?\)",
        ],
    ),
    "denormalizer without columns": (
        HEAD + "denormalizer:\n",
        [r"2: denormalizer: is empty: give it columns, or remove the key"],
    ),
    "empty column list": (
        HEAD + "denormalizer:\n  columns: []\n",
        [r"3: denormalizer.columns: needs at least one column"],
    ),
    "columns not a list": (
        HEAD + "denormalizer:\n  columns: id\n",
        [r"3: denormalizer.columns: expected a list of columns, got a string"],
    ),
    "column not a mapping": (
        HEAD + "denormalizer:\n  columns:\n    - id\n",
        [r"4: denormalizer.columns\[0\]: expected a mapping, got a string"],
    ),
    "duplicate names": (
        HEAD
        + "denormalizer:\n  columns:\n    - {name: a, path: id}\n    - {name: a, path: name}\n"
        + "    - {path: id}\n",
        [
            r"5: denormalizer.columns\[1\].name: duplicate column name 'a' \(also denormalizer.columns\[0\], line 4\)",
        ],
    ),
    "duplicate default names": (
        HEAD + "denormalizer:\n  columns:\n    - {path: id}\n    - {path: id}\n",
        [r"5: denormalizer.columns\[1\]: duplicate column name 'id'"],
    ),
    "path and expr both set": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      path: id\n"
        + "      expr: {func: has, args: [{path: id}]}\n",
        [r"4: denormalizer.columns\[0\]: path and expr are mutually exclusive"],
    ),
    "neither path nor expr": (
        HEAD + "denormalizer:\n  columns:\n    - name: a\n",
        [r"4: denormalizer.columns\[0\]: either path or expr must be set"],
    ),
    "empty name and path": (
        HEAD + "denormalizer:\n  columns:\n    - name: ''\n      path: ' '\n",
        [
            r"4: denormalizer.columns\[0\].name: must not be empty",
            r"5: denormalizer.columns\[0\].path: must not be empty",
        ],
    ),
    "expr column without a name": (
        HEAD + "denormalizer:\n  columns:\n    - expr: {func: has, args: [{path: id}]}\n",
        [r"4: denormalizer.columns\[0\].name: an expr column needs a name"],
    ),
    "path syntax": (
        HEAD + "denormalizer:\n  columns:\n    - name: a\n      path: items[*.id\n",
        [
            r"5: denormalizer.columns\[0\].path: expected '\]' after '\*', found '.'\n  items\[\*.id\n {9}\^$"
        ],
    ),
    "path syntax inside an expression": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: has\n"
        + "        args:\n          - path: 'items[?('\n",
        [r"8: denormalizer.columns\[0\].expr.args\[0\].path: expected a field"],
    ),
    "unknown function": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: hass\n"
        + "        args: [{path: id}]\n",
        [
            r"6: denormalizer.columns\[0\].expr.func: unknown function 'hass' \(did you mean 'has'\?\)"
        ],
    ),
    "function names are case sensitive": (
        HEAD
        + "denormalizer:\n  columns:\n    - {name: a, expr: {func: HAS, args: [{path: id}]}}\n",
        [
            r"4: denormalizer.columns\[0\].expr.func: unknown function 'HAS' \(did you mean 'has'\?\)"
        ],
    ),
    "select is Go-only in the reference": (
        HEAD + "denormalizer:\n  columns:\n    - {name: a, expr: {func: select, args: []}}\n",
        [r"4: denormalizer.columns\[0\].expr.func: unknown function 'select'"],
    ),
    "arity": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: cond\n"
        + "        args:\n          - path: id\n    - name: b\n      expr: {func: coalesce, args: [{path: id}]}\n"
        + "    - name: c\n      expr: {func: has}\n",
        [
            r"7: denormalizer.columns\[0\].expr.args: cond takes exactly 3 args, got 1",
            r"10: denormalizer.columns\[1\].expr.args: coalesce takes at least 2 args, got 1",
            r"12: denormalizer.columns\[2\].expr.args: has takes exactly 1 args, got 0",
        ],
    ),
    "arg with two or no values": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: coalesce\n"
        + "        args:\n          - {path: id, literal: x}\n          - {literal: null}\n",
        [
            r"8: denormalizer.columns\[0\].expr.args\[0\]: each arg needs exactly one of: path, literal, expr \(got 2\)",
            r"9: denormalizer.columns\[0\].expr.args\[1\]: each arg needs exactly one of: path, literal, expr \(got 0\)",
        ],
    ),
    "args not a list": (
        HEAD + "denormalizer:\n  columns:\n    - {name: a, expr: {func: has, args: {path: id}}}\n",
        [r"4: denormalizer.columns\[0\].expr.args: expected a list of args, got a mapping"],
    ),
    "literal types": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: coalesce\n"
        + "        args:\n          - literal: [1]\n          - literal: 2024-01-01\n"
        + "          - literal: 99999999999999999999999\n",
        [
            r"8: .*args\[0\].literal: unsupported literal type: a list",
            r"9: .*args\[1\].literal: unsupported literal type: a date \(quote it to get a string\)",
            r"10: .*args\[2\].literal: integer literal 99999999999999999999999 does not fit in 64 bits",
        ],
    ),
    "aux keys": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: concat\n"
        + "        sep: [1]\n        literal: x\n        args: [{path: id}]\n",
        [
            r"7: denormalizer.columns\[0\].expr.sep: expected a string, got a list \(quote it\)",
            r"8: denormalizer.columns\[0\].expr.literal: concat does not take 'literal' \(it takes: sep\)",
        ],
    ),
    "aux keys at their defaults are accepted, others are not": (
        HEAD
        + "denormalizer:\n  columns:\n    - name: a\n      expr:\n        func: has\n"
        + "        sep: ''\n        param: 0\n        literal2: null\n        args: [{path: id}]\n"
        + "    - {name: b, expr: {func: has, param: 3, args: [{path: id}]}}\n",
        [r"11: denormalizer.columns\[1\].expr.param: has does not take 'param' \(it takes: none\)"],
    ),
    "strict": (
        HEAD
        + "denormalizer:\n  columns:\n    - {name: a, path: id, strict: yes please}\n"
        + "    - name: b\n      strict: true\n      expr: {func: has, args: [{path: id}]}\n",
        [
            r"4: denormalizer.columns\[0\].strict: expected true or false, got a string",
            r"6: denormalizer.columns\[1\].strict: strict applies to path columns only",
        ],
    ),
    "option values": (
        HEAD
        + "timestamp_unit: sec\nvalidate: all\nenums: label\nmax_nesting: 0\n"
        + "errors: {policy: ignore}\n",
        [
            r"2: timestamp_unit: unknown value 'sec'; expected one of: s, ms, us, ns",
            r"3: validate: unknown value 'all'; expected one of: plan, full",
            r"4: enums: unknown value 'label'; expected one of: number, name",
            r"5: max_nesting: must be at least 1, got 0",
            r"6: errors.policy: unknown value 'ignore'; expected one of: raise, skip, dead_letter",
        ],
    ),
    "option types": (
        HEAD + "timestamp_unit: 1\nmax_nesting: true\nenums: numbers\nerrors: [skip]\n",
        [
            r"2: timestamp_unit: expected one of s, ms, us, ns, got an integer",
            r"3: max_nesting: expected an integer, got a boolean",
            r"4: enums: unknown value 'numbers' \(did you mean 'number'\?\)",
            r"5: errors: expected a mapping, got a list",
        ],
    ),
    "errors shorthand": (
        HEAD + "errors: skipp\n",
        [r"2: errors: unknown value 'skipp' \(did you mean 'skip'\?\)"],
    ),
    "dead_letter_path needs dead_letter": (
        HEAD + "errors:\n  policy: skip\n  dead_letter_path: d.parquet\n",
        [
            r"4: errors.dead_letter_path: needs policy: dead_letter \(policy 'skip' keeps no dead letters\)"
        ],
    ),
    "output": (
        HEAD + "output:\n  path: 7\n  compression: lzo\n  row_group_size: -1\n  format: csv\n"
        "  shards: 3\n",
        [
            r"3: output.path: expected a string, got an integer",
            r"4: output.compression: unknown value 'lzo'.*; expected one of: none, snappy, gzip, brotli, lz4, zstd",
            r"5: output.row_group_size: must be at least 1, got -1",
            r"6: output.format: unknown value 'csv'; expected one of: parquet, iceberg, delta",
            r"7: output.shards: unknown key; expected one of: format, path, table, catalog, .*",
        ],
    ),
    "output table": (
        HEAD + "output:\n  format: iceberg\n  table: ns.bids\n  partition: [day(ts), 'bucket(id)']\n",
        [
            r"5: output.partition\[1\]: 'bucket\(id\)': bucket takes a width first",
        ],
    ),
    "output combination": (
        HEAD + "output:\n  format: iceberg\n  table: bids\n  path: x.parquet\n",
        [
            r"2: output: path is for parquet output; an iceberg output names its table; table 'bids' must be NAMESPACE.NAME",
        ],
    ),
    "input": (
        HEAD + "input:\n  framing: u32\n",
        [r"3: input.framing: unknown value 'u32' \(did you mean 'u32le'\?\)"],
    ),
    "duplicate YAML keys": (
        HEAD + "validate: plan\nvalidate: full\n",
        [r"3: validate: duplicate key \(YAML keeps the last\)"],
    ),
    "non-string key": (
        HEAD + "1: x\n",
        [r"2: keys are strings, got 1"],
    ),
    "pybufarrow README format": (
        "proto_file: order.proto\nmessage_name: Order\n",
        [
            r"1: proto: required key is missing",
            r"1: proto_file: unknown key \(pybufarrow's README format is not a real format",
            r"2: message_name: unknown key \(pybufarrow's",
        ],
    ),
    "a list instead of a mapping": (
        "- proto\n",
        [r"1: expected a mapping, got a list"],
    ),
    "empty document": (
        "# nothing\n",
        [r"1: the plan is empty; it needs at least proto: \{file, message\}"],
    ),
}


@pytest.mark.parametrize("case", ERRORS, ids=list(ERRORS))
def test_error(case: str, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, expected = ERRORS[case]
    (project / "plans" / "plan.yaml").write_text(text)
    monkeypatch.chdir(project)
    found = problems(os.path.join("..", project.name, "plans", "plan.yaml"), base_dir=project)
    prefix = re.escape(os.path.join("..", project.name, "plans", "plan.yaml")) + ":"
    assert len(found) == len(expected), "\n".join(found)
    for problem, pattern in zip(found, expected, strict=True):
        assert re.match(prefix + pattern, problem, re.S), f"{problem!r} !~ {pattern!r}"


def test_yaml_syntax_error(project: Path) -> None:
    path = write(project, HEAD + "denormalizer:\n  columns: [1, 2\n  x: 3\n")
    (problem,) = problems(path)
    # (libyaml says "did not find expected ...", PyYAML's own parser "expected ...")
    assert problem.startswith(f"{path}:4: YAML: "), problem
    assert "expected ',' or ']'" in problem, problem


def test_flow_style_unquoted_path_hint(project: Path) -> None:
    """The reference's own docs use {path: imps[*].w}; a quoting hint says what is wrong."""
    path = write(project, HEAD + "denormalizer: {columns: [{name: w, path: items[*].id}]}\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:2: YAML: "), problem
    assert "quote paths that contain [ ] or *" in problem


def test_python_tags_are_rejected(project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = (
        HEAD
        + f"validate: !!python/object/apply:os.system ['touch {marker}']\n"
        + "max_nesting: !!python/object:collections.OrderedDict {}\n"
    )
    for source in (write(project, evil), evil):
        (problem,) = problems(source)
        assert re.match(
            r".*:2: YAML: could not determine a constructor for the tag "
            r"'tag:yaml.org,2002:python/object/apply:os.system'",
            problem,
        ), problem
        assert "no Python tags" in problem
    assert not marker.exists()


def test_all_problems_at_once(project: Path) -> None:
    path = write(
        project,
        """\
        proto:
          file: protos/order.proto
          message: Order
          colour: blue
        denormalizer:
          columns:
            - name: a
              path: id
            - name: a
              path: name
            - name: b
              expr:
                func: concatt
                args: [{path: id}]
            - name: c
              expr:
                func: cond
                args: [{path: id}]
        timestamp_unit: minutes
        output: {compression: lzma}
        """,
    )
    with pytest.raises(wa.PlanError) as info:
        load_plan(path)
    err = info.value
    lines = [int(p.split(":")[1]) for p in err.problems]
    assert lines == [4, 9, 13, 18, 19, 20]  # every problem, in file order
    assert str(err) == "\n".join(err.problems)
    assert isinstance(err, ValueError)
    assert "unknown function 'concatt' (did you mean 'concat'?)" in err.problems[2]


def test_dict_source_errors_have_key_paths() -> None:
    found = problems(
        {
            "proto": {"file": "order.proto"},
            "denormalizer": {"columns": [{"name": "x", "expr": {"func": "nope"}}]},
        }
    )
    assert found[0] == "<dict>: proto.message: required key is missing"
    assert found[1].startswith("<dict>: denormalizer.columns[0].expr.func: unknown function 'nope'")
    assert len(found) == 2


def test_text_source_errors_have_lines() -> None:
    found = problems("proto: {file: order.proto, message: Order}\nvalidate: none\n")
    assert found == [
        "<string>:1: proto.file: 'order.proto' not found; tried: "
        + os.path.join(os.getcwd(), "order.proto"),
        "<string>:2: validate: unknown value 'none'; expected one of: plan, full",
    ]


# ---- errors found when the plan is compiled -----------------------------------------------


def test_first_match_and_epoch_times_in_a_yaml_plan(project: Path) -> None:
    """items[?(.name == 'x')][0]: one value per order (no fan-out); to_timestamp's unit as
    param (ticks per second)."""
    from google.protobuf import message_factory

    path = write(
        project,
        """\
        proto: {file: protos/order.proto, message: Order}
        denormalizer:
          columns:
            - {name: id, path: id}
            - {name: first_x, path: "items[?(.name == 'x')][0].id"}
            - {name: last_x, path: "items[?(.name == 'x')][-1].id"}
            - name: at
              expr: {func: to_timestamp, param: 1, args: [{path: "items[?(.name == 'x')][0].qty"}]}
        """,
    )
    UTC = datetime.timezone.utc
    tc = load_plan(path).transcoder()
    cls = message_factory.GetMessageClass(tc.schema.descriptor)
    items = [{"id": "a", "name": "x", "qty": 60}, {"id": "b"}, {"id": "c", "name": "x"}]
    records = [order_message(cls, id="o1", items=items), order_message(cls, id="o2")]
    assert tc.transcode(records).to_pylist() == [
        {"id": "o1", "first_x": "a", "last_x": "c", "at": datetime.datetime(1970, 1, 1, 0, 1, tzinfo=UTC)},
        {"id": "o2", "first_x": None, "last_x": None, "at": None},
    ]


def test_path_errors_at_compile_time_are_located(project: Path) -> None:
    path = write(
        project,
        """\
        proto: {file: protos/order.proto, message: Order}
        denormalizer:
          columns:
            - name: ok
              path: id
            - name: bad
              path: items[*].idd
            - path: nme
            - name: typed
              expr:
                func: coalesce
                args: [{path: id}, {literal: 1}]
        """,
    )
    plan = load_plan(path)  # the paths parse: the schema is needed to see more
    with pytest.raises(wa.PlanError) as info:
        plan.transcoder()
    found = info.value.problems
    assert len(found) == 3, found
    assert found[0].startswith(
        f"{path}:6: denormalizer.columns[1]: field 'idd' not in message bp.Item "
        "(did you mean 'id'?)\n"
    )
    assert found[1].startswith(f"{path}:8: denormalizer.columns[2]: field 'nme' not in message")
    assert found[2].startswith(f"{path}:9: denormalizer.columns[3]: ")
    with pytest.raises(wa.PlanError):
        wa.load_plan(path).transcoder()


def test_schema_errors_are_located(project: Path) -> None:
    path = write(project, "proto:\n  file: protos/order.proto\n  message: Ordr\n")
    plan = load_plan(path)
    with pytest.raises(wa.SchemaError, match=re.escape(f"{path}:3: proto.message: message 'Ordr'")):
        plan.schema()
    (project / "protos" / "broken.proto").write_text('syntax = "proto3";\nmessage X { int32 a }\n')
    path = write(project, "proto:\n  file: protos/broken.proto\n  message: X\n")
    with pytest.raises(wa.SchemaError, match=re.escape(f"{path}:2: proto.file: protoc could not")):
        load_plan(path).transcoder()


def test_whole_message_plan_matches_the_api(project: Path, order_records: list[bytes]) -> None:
    plan = load_plan(write(project, "proto: {file: protos/order.proto, message: Order}\n"))
    direct = wa.Transcoder(plan.schema())
    assert plan.transcoder().transcode(order_records).equals(direct.transcode(order_records))


def test_plan_config_columns_are_api_columns(project: Path, order_records: list[bytes]) -> None:
    plan = load_plan(write(project, REFERENCE_PLAN))
    assert isinstance(plan, PlanConfig)
    direct = wa.Transcoder(plan.schema(), list(plan.columns))
    assert plan.transcoder().transcode(order_records).equals(direct.transcode(order_records))


def test_well_known_types_and_unvalidated_strings_keys(project: Path) -> None:
    text = (
        "proto: {file: protos/order.proto, message: Order}\n"
        "well_known_types: false\nunvalidated_strings: binary\n"
    )
    plan = load_plan(write(project, text))
    assert plan.options["well_known_types"] is False
    assert plan.options["unvalidated_strings"] == "binary"
    tc = plan.transcoder()
    assert tc.spec.well_known_types is False and tc.spec.unvalidated_strings == "binary"
    strict = "proto: {file: protos/order.proto, message: Order}\nunvalidated_strings: reject\n"
    assert load_plan(write(project, strict)).transcoder().spec.unvalidated_strings == "reject"
    bad = "proto: {file: protos/order.proto, message: Order}\nwell_known_types: 1\nunvalidated_strings: latin1\n"
    with pytest.raises(wa.PlanError) as info:
        load_plan(write(project, bad))
    text = str(info.value)
    assert "well_known_types" in text and "unvalidated_strings" in text and "latin1" in text
