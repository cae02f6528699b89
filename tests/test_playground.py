"""wirearrow playground: its JSON API on a real server (a thread, port 0), and the command.

The oracle for the preview is the public API on the same records (a Transcoder of the same
plan); for errors, ``wirearrow check`` on the same plan text.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import re
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from depth import examples
from wirearrow.cli import main as cli_main
from wirearrow.playground.server import make_server
from wirearrow.playground.session import Limits, SchemaSource, Session

ROOT = Path(__file__).resolve().parent.parent
# Where this process imports wirearrow from (the checkout's plugin/ for the editable install,
# site-packages for the minimal install's wheel): the commands run that one, not the source tree.
IMPORTED_FROM = Path(importlib.util.find_spec("wirearrow").origin).resolve().parents[1]
PLAN = ROOT / "transforms" / "openrtb_flat.yaml"
SCHEMA_DIR = ROOT / "examples" / "schema"
PROTOS = sorted(str(p.relative_to(SCHEMA_DIR)) for p in SCHEMA_DIR.rglob("*.proto"))
N = 40
BAD_RECORD = b"\x0a\xff\x01"  # field 1 (id, a string) with a length past the record's end


class Client:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def request(self, path: str, body: object = None, raw: bytes | None = None):
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST" if data is not None else "GET")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as err:
            with err:
                return err.code, err.headers, err.read()

    def json(self, path: str, body: object = None, status: int = 200) -> dict:
        code, _, data = self.request(path, body)
        assert code == status, data
        return json.loads(data)


def _serve(session: Session):
    server = make_server(session)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, Client(server.server_address[1])


@pytest.fixture(scope="module")
def records_file(tmp_path_factory) -> tuple[Path, list[bytes], list[int]]:
    """N good records with one bad one at index 5, u32le; the frame offset of each."""
    records = corpus.generate(N, seed=3)
    records[5] = BAD_RECORD
    path = tmp_path_factory.mktemp("playground") / "events.u32le"
    offsets, position = [], 0
    with open(path, "wb") as f:
        for r in records:
            offsets.append(position)
            f.write(struct.pack("<I", len(r)) + r)
            position += 4 + len(r)
    return path, records, offsets


@pytest.fixture
def client(records_file):
    session = Session(Limits(preview_rows=30))
    session.open_plan(str(PLAN))
    session.set_records_file(str(records_file[0]), wa.RecordFormat(framing="u32le"))
    server, client = _serve(session)
    yield client
    server.shutdown()
    server.server_close()


def _check_messages(tmp_path: Path, text: str) -> list[str]:
    """What ``wirearrow check`` prints for a plan with this text (next to the bundled plan,
    so that its relative paths hold), with the file name taken out."""
    plan = PLAN.parent / f".playground-test-{os.getpid()}.yaml"
    plan.write_text(text)
    try:
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            assert cli_main(["check", str(plan)]) == 1
        finally:
            sys.stderr = old
    finally:
        plan.unlink()
    out = err.getvalue().replace(str(plan), "PLAN").removeprefix("wirearrow: error: ")
    return [out.strip()]


def test_state_has_the_schema_tree_and_the_sample(client, records_file) -> None:
    state = client.json("/api/state")
    tree = state["schema"]
    assert tree["message"] == "BidRequestEvent"
    fields = {f["name"]: f for f in tree["fields"]}
    assert fields["imp"]["repeated"] and fields["imp"]["path"] == "imp[*]"
    imp = {f["name"]: f for f in fields["imp"]["fields"]}
    banner = {f["name"]: f for f in imp["banner"]["fields"]}
    assert banner["w"]["path"] == "imp[*].banner.w"
    assert fields["ext"]["kind"] == "map" and fields["ext"]["value_path"] == "ext[*]"
    assert fields["auction_type"]["kind"] == "enum"
    assert state["records"]["records"] == N and state["records"]["framing"] == "u32le"
    assert state["mode"] == "yaml" and state["plan"] == PLAN.read_text()


def test_preview_matches_the_transcoder(client, records_file) -> None:
    _, records, offsets = records_file
    result = client.json("/api/preview", {"plan": PLAN.read_text(), "mode": "yaml", "record": 2})
    assert result["problems"] == []
    tc = wa.load_plan(PLAN).transcoder()
    tc_dead = wa.Transcoder(tc.schema, wa.load_plan(PLAN).columns, on_error="dead_letter")
    expected = tc_dead.transcode(records)
    preview = result["preview"]
    assert [(c["name"], c["type"]) for c in preview["columns"]] == [
        (f.name, str(f.type)) for f in tc.arrow_schema
    ]
    assert preview["num_rows"] == expected.num_rows
    assert len(preview["rows"]) == 30
    assert preview["rows"][0][0] == expected.column("request_id")[0].as_py()
    # Rows per record, one record at a time, as the transcoder gives them.
    fanout = preview["rows_per_record"]
    assert fanout == [tc_dead.transcode([r]).num_rows for r in records[: len(fanout)]]
    assert fanout[5] == 0 and sum(fanout) >= 30
    # The bad record is a dead letter, located in the file.
    (dead,) = preview["dead_letters"]
    assert dead["record"] == 5 and dead["frame_offset"] == offsets[5]
    assert "id" in dead["path"] and dead["reason"]
    nested = result["nested"]
    assert nested["record"] == 2 and nested["frame_offset"] == offsets[2]
    whole = wa.Transcoder(tc.schema).transcode([records[2]]).to_pylist()[0]
    assert nested["value"]["id"] == whole["id"]
    assert len(nested["value"]["imp"]) == len(whole["imp"])


def test_the_nested_view_of_a_bad_record_says_why(client) -> None:
    result = client.json("/api/preview", {"plan": PLAN.read_text(), "mode": "yaml", "record": 5})
    assert result["nested"]["value"] is None and result["nested"]["error"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("path: site.domain", "path: site.domainx"),  # a field the message lacks
        ("path: imp[*].id", "path: imp[*.id"),  # a path syntax error
        ("func: coalesce", "func: coalesc"),  # an unknown function
        ("message: BidRequestEvent", "message: NoSuchMessage"),  # the schema
        ("  columns:", "  columns: ["),  # YAML itself
    ],
)
def test_yaml_problems_are_the_ones_check_reports(client, tmp_path, old, new) -> None:
    text = PLAN.read_text().replace(old, new, 1)
    result = client.json("/api/preview", {"plan": text, "mode": "yaml"})
    assert result["preview"] is None and result["problems"]
    page = "\n".join(p["text"] for p in result["problems"]).replace("openrtb_flat.yaml", "PLAN")
    assert [page] == _check_messages(tmp_path, text)
    # On the line of the column (or key) that holds the fault, as check places it.
    line = result["problems"][0]["line"]
    changed = next(i for i, t in enumerate(text.splitlines(), 1) if new.strip() in t)
    assert line is not None and abs(changed - line) < 8


def test_lines_mode(client) -> None:
    plan = "\n".join([
        "id",
        "# a comment, then a blank line",
        "",
        "imp_id = imp[*].id",
        'size = concat(imp[*].banner.w, imp[*].banner.h, sep="x")',
        "cur = default(imp[*].bidfloorcur, literal='USD')",
    ])  # fmt: skip
    result = client.json("/api/preview", {"plan": plan, "mode": "lines"})
    assert result["problems"] == []
    assert [c["name"] for c in result["preview"]["columns"]] == ["id", "imp_id", "size", "cur"]
    row = result["preview"]["rows"][0]
    assert re.fullmatch(r"\d+x\d+", row[2]) and row[3]
    # Problems land on the line typed, with check's wording and caret.
    bad = plan + "\nnope = imp[*].nope"
    (problem,) = client.json("/api/preview", {"plan": bad, "mode": "lines"})["problems"]
    assert problem["line"] == 7
    assert problem["text"] == (
        "plan:7: denormalizer.columns[4]: field 'nope' not in message Imp\n"
        "  imp[*].nope\n         ^"
    )
    (problem,) = client.json("/api/preview", {"plan": "id\nx = upper(id", "mode": "lines"})[
        "problems"
    ]
    assert problem["line"] == 2 and "unclosed '('" in problem["text"]
    (problem,) = client.json("/api/preview", {"plan": "x = upper(id, id)", "mode": "lines"})[
        "problems"
    ]
    assert problem["line"] == 1 and "upper takes exactly 1" in problem["text"]
    # No line: whole messages.
    whole = client.json("/api/preview", {"plan": "", "mode": "lines"})["preview"]
    assert [c["name"] for c in whole["columns"]][:2] == ["id", "imp"]


def test_add_column(client) -> None:
    text = PLAN.read_text()
    added = client.json("/api/add_column", {"plan": text, "mode": "yaml", "path": "imp[*].banner.w"})
    plan = wa.load_plan(added["plan"], base_dir=PLAN.parent)
    assert plan.columns[-1].output_name == "imp_banner_w"
    assert added["plan"].startswith(text.rstrip("\n"))  # comments and all kept
    again = client.json(
        "/api/add_column", {"plan": added["plan"], "mode": "yaml", "path": "imp[*].banner.w"}
    )
    assert wa.load_plan(again["plan"], base_dir=PLAN.parent).columns[-1].output_name == (
        "imp_banner_w_2"
    )
    lines = client.json("/api/add_column", {"plan": "id", "mode": "lines", "path": "ext[*]"})
    assert lines["plan"] == "id\next[*]\n"
    bare = "proto: {file: bidrequest.proto, message: BidRequestEvent, import_paths: [../examples/schema]}\n"
    made = client.json("/api/add_column", {"plan": bare, "mode": "yaml", "path": "id"})
    assert [c.output_name for c in wa.load_plan(made["plan"], base_dir=PLAN.parent).columns] == ["id"]


def test_downloads(client, records_file) -> None:
    text = PLAN.read_text()
    code, headers, data = client.request("/api/download", {"plan": text, "mode": "yaml", "format": "yaml"})
    assert code == 200 and data.decode() == text
    assert 'filename="openrtb_flat.yaml"' in headers["Content-Disposition"]
    preview = client.json("/api/preview", {"plan": text, "mode": "yaml"})["preview"]
    code, headers, data = client.request(
        "/api/download", {"plan": text, "mode": "yaml", "format": "parquet"}
    )
    table = pq.read_table(io.BytesIO(data))
    assert code == 200 and table.num_rows == preview["num_rows"]
    assert table.column_names == [c["name"] for c in preview["columns"]]
    code, _, data = client.request("/api/download", {"plan": text, "mode": "yaml", "format": "csv"})
    lines = data.decode().splitlines()
    assert code == 200 and len(lines) == preview["num_rows"] + 1
    assert lines[0].split(",")[0] == '"request_id"'
    # A lines plan downloads as a YAML plan that loads and reads the same columns.
    code, _, data = client.request(
        "/api/download",
        {"plan": "id\nimp_id = imp[*].id\nn = len(imp[*].pmp.deals)", "mode": "lines", "format": "yaml"},
    )
    plan = wa.load_plan(data.decode())
    assert code == 200 and [c.output_name for c in plan.columns] == ["id", "imp_id", "n"]
    assert plan.transcoder().transcode(records_file[1][:3]).num_rows >= 3
    # A plan with problems cannot be downloaded as data: the error says why.
    code, _, data = client.request(
        "/api/download", {"plan": "nope", "mode": "lines", "format": "parquet"}
    )
    assert code == 400 and "nope" in json.loads(data)["error"]


def test_records_from_a_paste_and_a_file(client, records_file) -> None:
    path, records, _ = records_file
    record = records[7]
    for text in (record.hex(), " ".join(f"{b:02x}" for b in record), base64.b64encode(record).decode()):
        state = client.json("/api/records", {"kind": "paste", "text": text})
        assert state["records"]["records"] == 1
        preview = client.json("/api/preview", {"plan": "id", "mode": "lines"})["preview"]
        assert preview["rows"] == [[wa.Transcoder(
            wa.load_plan(PLAN).schema(), ["id"]).transcode([record]).column(0)[0].as_py()]]
    state = client.json("/api/records", {"kind": "file", "path": str(path), "framing": "u32le"})
    assert state["records"]["records"] == N


def test_sampling_is_bounded(records_file, tmp_path) -> None:
    path, records, offsets = records_file
    session = Session(Limits(max_records=10))
    session.set_records_file(str(path), wa.RecordFormat(framing="u32le"))
    assert len(session.sample.records) == 10 and session.sample.truncated
    assert session.sample.records == records[:10]
    session = Session(Limits(max_bytes=offsets[3] + 2))
    session.set_records_file(str(path), wa.RecordFormat(framing="u32le"))
    assert session.sample.records == records[:3] and "limit" in session.sample.note
    # A file cut inside its last record: the records before it, and why it stopped.
    cut = tmp_path / "cut.u32le"
    cut.write_bytes(path.read_bytes()[: offsets[4] + 9])
    session = Session()
    session.set_records_file(str(cut), wa.RecordFormat(framing="u32le"))
    assert session.sample.records == records[:4]
    assert f"record at byte {offsets[4]}" in session.sample.note
    # The same records read with the other framings.
    for framing in ("varint", "u32be"):
        framed = tmp_path / f"events.{framing}"
        corpus.write_corpus(framed, 12, seed=4, framing=framing)
        session.set_records_file(str(framed), wa.RecordFormat(framing=framing))
        assert session.sample.records == corpus.generate(12, seed=4)


def test_a_sample_reads_every_framing_compression_and_format(tmp_path) -> None:
    # The playground's sample goes through the readers' one splitter and decompressor.
    import gzip
    import json

    from google.protobuf import json_format

    records = corpus.generate(12, seed=4)
    for framing in ("varint", "u32le", "u32be", "tfrecord"):
        framed = bytes(wa.frame_records(pa.array(records, pa.binary()), framing))
        for codec, data, suffix in (("none", framed, ""), ("gzip", gzip.compress(framed), ".gz")):
            path = tmp_path / f"events.{framing}{suffix}"
            path.write_bytes(data)
            session = Session()
            session.set_records_file(str(path), wa.RecordFormat(framing=framing))
            assert session.sample.records == records, (framing, codec)
    _, cls = corpus.load_schema()
    lines = [json_format.MessageToJson(cls.FromString(r), indent=None) for r in records]
    (tmp_path / "events.ndjson").write_text("\n".join(lines) + "\n")
    session = Session()
    session.set_records_file(str(tmp_path / "events.ndjson"), wa.RecordFormat(format="json"))
    assert [json.loads(r) for r in session.sample.records] == [json.loads(t) for t in lines]
    assert session.sample.offsets[1] == len(lines[0]) + 1


def test_schema_from_a_descriptor_set_and_a_module(client, tmp_path, monkeypatch) -> None:
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out = tmp_path / "gen"
    out.mkdir()
    args = [f"-I{SCHEMA_DIR}", f"-I{well_known}", f"--descriptor_set_out={tmp_path / 'set.pb'}", "--include_imports",
            f"--python_out={out}", *PROTOS]  # fmt: skip
    assert protoc.main(["protoc", *args]) == 0
    state = client.json(
        "/api/schema",
        {"kind": "descriptor_set", "value": str(tmp_path / "set.pb"), "message": "BidRequestEvent"},
    )
    assert state["schema"]["message"] == "BidRequestEvent"
    result = client.json("/api/preview", {"plan": "imp_id = imp[*].id", "mode": "lines"})
    assert result["problems"] == [] and result["preview"]["num_rows"] > N
    code, _, data = client.request(
        "/api/download", {"plan": "imp[*].id", "mode": "lines", "format": "yaml"}
    )
    assert code == 200 and b"descriptor set" in data  # the plan says what to point it at
    monkeypatch.syspath_prepend(str(out))
    state = client.json(
        "/api/schema", {"kind": "module", "value": "bidrequest_pb2", "message": "BidRequestEvent"}
    )
    assert state["schema"]["message"] == "BidRequestEvent"
    assert client.json("/api/preview", {"plan": "id", "mode": "lines"})["problems"] == []
    state = client.json(
        "/api/schema",
        {"kind": "proto", "value": "bidrequest.proto", "message": "Imp", "import_paths": str(SCHEMA_DIR)},
    )
    assert state["schema"]["message"] == "Imp"


GARBAGE = [
    ("/api/preview", b"not json"),
    ("/api/preview", b"[1, 2]"),
    ("/api/preview", json.dumps({"plan": 5, "mode": "yaml"}).encode()),
    ("/api/preview", json.dumps({"plan": "id", "mode": "sql"}).encode()),
    ("/api/preview", json.dumps({"plan": "id", "mode": "lines", "record": "x"}).encode()),
    ("/api/preview", json.dumps({"plan": "x" * 300_000, "mode": "yaml"}).encode()),
    ("/api/records", json.dumps({"kind": "file", "path": "/no/such/file", "framing": "u32le"}).encode()),
    ("/api/records", json.dumps({"kind": "file", "path": "/", "framing": "u32le"}).encode()),
    ("/api/records", json.dumps({"kind": "file", "path": "/etc/hostname", "framing": "zip"}).encode()),
    ("/api/records", json.dumps({"kind": "paste", "text": "zz not hex !!"}).encode()),
    ("/api/records", json.dumps({"kind": "paste", "text": ""}).encode()),
    ("/api/schema", json.dumps({"kind": "proto", "value": "/no/such.proto", "message": "M"}).encode()),
    ("/api/schema", json.dumps({"kind": "descriptor_set", "value": "/etc/hostname", "message": "M"}).encode()),
    ("/api/schema", json.dumps({"kind": "module", "value": "no_such_module_xyz", "message": "M"}).encode()),
    ("/api/schema", json.dumps({"kind": "module", "value": "json", "message": "M"}).encode()),
    ("/api/schema", json.dumps({"kind": "fortran", "value": "x", "message": "M"}).encode()),
    ("/api/schema", json.dumps({"kind": "proto", "value": "", "message": ""}).encode()),
    ("/api/schema", json.dumps({"import_paths": {"a": 1}}).encode()),
    ("/api/add_column", json.dumps({"plan": "a: [", "mode": "yaml", "path": "id"}).encode()),
    ("/api/add_column", json.dumps({"plan": "- 1\n- 2", "mode": "yaml", "path": "id"}).encode()),
    ("/api/download", json.dumps({"plan": "id", "mode": "lines", "format": "xlsx"}).encode()),
    ("/api/nothing", b"{}"),
]


def test_garbage_gets_an_error_and_the_server_goes_on(client) -> None:
    for path, raw in GARBAGE:
        code, _headers, data = client.request(path, raw=raw)
        assert 400 <= code < 500, (path, raw[:80], code, data[:200])
        assert json.loads(data)["error"], (path, raw[:80])
        assert client.request("/api/state")[0] == 200
    assert client.request("/no/such/page")[0] == 404
    # A request that claims a huge body is refused without reading it.
    req = urllib.request.Request(client.base + "/api/preview", data=b"{}", method="POST")
    req.add_header("Content-Length", str(1 << 40))
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)
    info.value.close()
    assert info.value.code == 413
    assert client.request("/api/state")[0] == 200


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200), mode=st.sampled_from(["yaml", "lines"]))
def test_any_plan_text_gets_an_answer(client, text, mode) -> None:
    code, _, data = client.request("/api/preview", {"plan": text, "mode": mode})
    result = json.loads(data)
    assert code == 200, result
    assert result["problems"] or result["preview"] is not None


@settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.binary(max_size=64))
def test_any_pasted_record_gets_an_answer(client, record) -> None:
    client.json("/api/records", {"kind": "paste", "text": record.hex() or "00"})
    result = client.json("/api/preview", {"plan": "id\nimp[*].id", "mode": "lines"})
    preview = result["preview"]
    assert preview["num_records"] == 1
    assert preview["failed"] == len(preview["dead_letters"]) <= 1


def test_the_command_prints_its_url_and_serves_the_page(records_file) -> None:
    env = {**os.environ, "PYTHONPATH": str(IMPORTED_FROM)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirearrow", "playground", str(PLAN), str(records_file[0]),
         "--framing", "u32le", "--sample", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        client = Client(int(match.group(1)))
        code, _headers, page = client.request("/")
        assert code == 200 and b'<script src="/static/app.js">' in page
        for asset in ("/static/app.js", "/static/style.css"):
            assert client.request(asset)[0] == 200
        assert client.json("/api/state")["records"]["records"] == 20
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_the_command_reports_bad_arguments(capsys) -> None:
    assert cli_main(["playground", "a.yaml", "b.yaml"]) == 1
    assert "at most one PLAN.yaml" in capsys.readouterr().err
    assert cli_main(["playground", "--proto", "x.proto"]) == 1
    assert "needs --message" in capsys.readouterr().err
    assert cli_main(["playground", "/no/such/plan.yaml"]) == 1
    assert "cannot read /no/such/plan.yaml" in capsys.readouterr().err


def test_a_recursive_schema(tmp_path) -> None:
    """The tree marks recursion; paths into it preview; the whole-message view of a
    recursive message is cut at a depth instead of failing."""
    from google.protobuf import message_factory

    proto = tmp_path / "tree.proto"
    proto.write_text(
        'syntax = "proto3";\npackage demo;\nmessage Node {\n  string name = 1;\n'
        "  repeated Node children = 2;\n  oneof value { int64 i = 3; string s = 4; }\n"
        "  map<string, Node> named = 5;\n}\n"
    )
    session = Session()
    session.set_schema(SchemaSource("proto", str(proto), "demo.Node"))
    cls = message_factory.GetMessageClass(session.schema.descriptor)
    node = cls(name="root", i=5)
    node.children.add(name="kid", s="x").children.add(name="grandkid")
    session.set_records_pasted(node.SerializeToString().hex())
    tree = {f["name"]: f for f in session.state()["schema"]["fields"]}
    assert tree["children"]["recursive"] and tree["children"]["path"] == "children[*]"
    assert tree["i"]["oneof"] == tree["s"]["oneof"] == "value"
    assert tree["named"]["kind"] == "map" and tree["named"]["recursive"]
    result = session.evaluate("name\nkid = children[*].name\nv = coalesce(s, cast_string(i))", "lines")
    assert result["problems"] == []
    assert result["preview"]["rows"] == [["root", "kid", "5"]]
    nested = result["nested"]["value"]
    assert nested["name"] == "root" and nested["children"][0]["name"] == "kid"


# -- every input the command line takes, uploads, broken plans ---------------------------


def test_the_command_takes_the_input_flags_of_transcode() -> None:
    """One definition (wirearrow.arguments): the playground's input flags are transcode's,
    with the same choices."""
    from wirearrow.arguments import INPUT_FLAGS
    from wirearrow.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices

    def flags(command: str) -> dict:
        return {
            s: a.choices
            for a in commands[command]._actions
            for s in a.option_strings
            if s in (*INPUT_FLAGS.values(), "--schema-id")
        }

    assert flags("playground") == flags("transcode")
    assert set(flags("playground")) == {*INPUT_FLAGS.values(), "--schema-id"}
    assert "tfrecord" in flags("playground")["--framing"]
    assert "confluent" in flags("playground")["--framing"]


def _session(argv: list[str]) -> Session:
    from wirearrow.cli import build_parser
    from wirearrow.playground import session_of

    return session_of(build_parser().parse_args(["playground", *argv]))


def test_the_command_reads_every_framing_compression_and_format(tmp_path) -> None:
    import gzip

    from google.protobuf import json_format

    records = corpus.generate(12, seed=4)
    array = pa.array(records, pa.binary())
    tfrecord = tmp_path / "events.tfrecord.gz"
    tfrecord.write_bytes(gzip.compress(bytes(wa.frame_records(array, "tfrecord"))))
    session = _session([str(PLAN), str(tfrecord), "--framing", "tfrecord"])
    assert session.sample.records == records and session.input.framing == "tfrecord"
    # An explicit codec over the suffix's.
    plain = tmp_path / "events.bin"
    plain.write_bytes(gzip.compress(bytes(wa.frame_records(array, "u32be"))))
    session = _session(
        [str(PLAN), str(plain), "--framing", "u32be", "--input-compression", "gzip"]
    )
    assert session.sample.records == records
    # Confluent records in a varint stream: any id is the plan's schema, or those named.
    prefixed = wa.frame_records(array, "confluent", schema_id=7)
    confluent = tmp_path / "events.confluent"
    confluent.write_bytes(bytes(wa.frame_records(prefixed, "varint")))
    for extra in ([], ["--schema-id", "7"]):
        session = _session([str(PLAN), str(confluent), "--framing", "confluent", *extra])
        preview = session.evaluate("request_id = id", "lines")["preview"]
        assert preview["failed"] == 0 and preview["num_records"] == 12, extra
    session = _session(
        [str(PLAN), str(confluent), "--framing", "confluent", "--schema-id", "8",
         "--schema-id-column", "sid"]
    )  # fmt: skip
    preview = session.evaluate(PLAN.read_text(), "yaml")["preview"]
    assert preview["failed"] == 12 and "schema id 7" in preview["dead_letters"][0]["reason"]
    session.schema_ids = {7: None}
    preview = session.evaluate(PLAN.read_text(), "yaml")["preview"]
    assert preview["failed"] == 0 and preview["columns"][-1]["name"] == "sid"
    assert {row[-1] for row in preview["rows"]} == {7}
    # protojson lines.
    _, cls = corpus.load_schema()
    ndjson = tmp_path / "events.ndjson"
    ndjson.write_text(
        "\n".join(json_format.MessageToJson(cls.FromString(r), indent=None) for r in records)
    )
    session = _session([str(PLAN), str(ndjson), "--format", "json"])
    preview = session.evaluate(PLAN.read_text(), "yaml")["preview"]
    assert preview["num_records"] == 12 and preview["failed"] == 0
    # Flags that contradict each other: the command line's words.
    with pytest.raises(ValueError, match="--delimited-by is for --framing confluent"):
        _session([str(PLAN), str(confluent), "--delimited-by", "u32le"])


def _upload(client: Client, name: str, data: bytes, size: int | None = None, **fields) -> tuple[int, dict]:
    from urllib.parse import urlencode

    query = urlencode({"name": name, "size": size or len(data), **fields})
    code, _, body = client.request(f"/api/upload?{query}", raw=data)
    return code, json.loads(body)


def test_records_uploaded_from_the_page(client, tmp_path) -> None:
    import gzip

    records = corpus.generate(30, seed=6)
    framed = bytes(wa.frame_records(pa.array(records, pa.binary()), "tfrecord"))
    code, state = _upload(client, "events.tfrecord", framed, framing="tfrecord")
    assert code == 200, state
    assert state["records"]["records"] == 30 and state["records_from"] == "upload"
    assert state["records"]["source"] == "events.tfrecord (uploaded)"
    assert {f["name"]: f["value"] for f in state["input"]}["framing"] == "tfrecord"
    expected = wa.load_plan(PLAN).transcoder().transcode(records)
    preview = client.json("/api/preview", {"plan": PLAN.read_text(), "mode": "yaml"})["preview"]
    assert preview["num_rows"] == expected.num_rows and preview["failed"] == 0
    # Compressed, by its suffix; the page sends only the first bytes of a large file.
    zipped = gzip.compress(framed)
    code, state = _upload(client, "events.tfrecord.gz", zipped, framing="tfrecord")
    assert state["records"]["records"] == 30, state
    half = len(framed) // 2
    code, state = _upload(client, "big.tfrecord", framed[:half], size=len(framed), framing="tfrecord")
    assert code == 200 and 0 < state["records"]["records"] < 30
    assert "of the uploaded part" in state["records"]["note"]
    assert f"first {half:,} of {len(framed):,} bytes" in state["records"]["source"]
    code, state = _upload(client, "big.tfrecord.gz", zipped[: len(zipped) // 2], size=len(zipped), framing="tfrecord")
    assert code == 200 and 0 < state["records"]["records"] < 30, state
    # The same upload read again with another framing: the page's selects.
    code, state = _upload(client, "events.bin", framed, framing="u32le")
    assert state["records"]["records"] < 30 or state["records"]["note"]
    state = client.json("/api/records", {"kind": "again", "framing": "tfrecord"})
    assert state["records"]["records"] == 30 and state["records"]["source"] == "events.bin (uploaded)"
    # Bad fields and oversize uploads are errors on the page; the server goes on.
    assert _upload(client, "x.bin", b"\x00", framing="zip")[0] == 400
    assert "is for framing" in _upload(client, "x.bin", b"\x00", delimited_by="u32le")[1]["error"]
    req = urllib.request.Request(client.base + "/api/upload?name=x", data=b"\x00", method="POST")
    req.add_header("Content-Length", str(Limits().max_upload + 1))  # refused unread
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)
    info.value.close()
    assert info.value.code == 413
    assert client.json("/api/state")["records"]["records"] == 30


def test_a_pasted_record_in_any_format(client) -> None:
    from google.protobuf import json_format

    record = corpus.generate(3, seed=2)[1]
    _, cls = corpus.load_schema()
    text = json_format.MessageToJson(cls.FromString(record))  # pretty-printed: many lines
    state = client.json("/api/records", {"kind": "paste", "text": text, "format": "json"})
    assert state["records"]["records"] == 1
    rows = client.json("/api/preview", {"plan": "id", "mode": "lines"})["preview"]["rows"]
    assert rows == [[cls.FromString(record).id]]
    prefixed = wa.frame_records(pa.array([record], pa.binary()), "confluent", schema_id=3)
    state = client.json(
        "/api/records", {"kind": "paste", "text": prefixed[0].as_py().hex(), "framing": "confluent"}
    )
    preview = client.json("/api/preview", {"plan": "id", "mode": "lines"})["preview"]
    assert preview["rows"] == rows and preview["failed"] == 0


def test_a_broken_plan_keeps_the_tree_and_the_last_good_preview(tmp_path) -> None:
    text = PLAN.read_text()
    broken = text.replace("path: id", "path: nope", 1)
    assert broken != text
    plan = PLAN.parent / f".playground-broken-{os.getpid()}.yaml"
    plan.write_text(broken)
    records = tmp_path / "events.varint"
    corpus.write_corpus(records, 20, seed=1, framing="varint")
    try:
        session = _session([str(plan), str(records)])
    finally:
        plan.unlink()
    # Opened with a problem in its columns: the tree is the proto section's schema.
    state = session.state()
    assert state["schema"]["message"].endswith("BidRequestEvent")
    result = session.evaluate(broken, "yaml")
    assert "field 'nope' not in message" in result["problems"][0]["text"]
    assert result["preview"] is None  # no plan has compiled yet
    good = session.evaluate(text, "yaml")
    assert good["problems"] == [] and "stale" in good and not good["stale"]
    # Broken again (a bad path, then a proto file that does not exist, then not YAML):
    # the last good preview, marked stale; the tree stays.
    for bad in (
        broken,
        text.replace("bidrequest.proto", "nowhere.proto"),
        text + "\n  - : [",
    ):
        result = session.evaluate(bad, "yaml")
        assert result["problems"] and result["stale"]
        assert result["preview"]["rows"] == good["preview"]["rows"]
        assert "schema" not in result  # unchanged
        assert session.state()["schema"]["message"].endswith("BidRequestEvent")
    # A broken plan naming another (sound) schema: the tree follows it.
    other = tmp_path / "other.proto"
    other.write_text('syntax = "proto3";\npackage o;\nmessage Other { int64 x = 1; }\n')
    result = session.evaluate(
        f"proto: {{file: {other}, message: o.Other}}\ndenormalizer:\n  columns:\n"
        "    - {name: y, path: y}\n",
        "yaml",
    )
    assert result["schema"]["message"] == "o.Other" and result["problems"]
