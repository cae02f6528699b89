"""The command line, end to end: ``wirearrow ...`` as a shell runs it, files in and out.

Most tests call ``main(argv)`` in this process with its output captured (what
``python -m wirearrow`` runs, minus half a second of interpreter start per command);
``python -m wirearrow`` runs in a subprocess where the process itself is tested: the entry
point and its exit status, and the progress line on a terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import struct
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.cli import build_parser, main
from wirearrow.transcoder import max_depth_limit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "schema"
N = 300
COLUMNS = ["id", "imp[*].id", "imp[*].banner.w"]
SUMMARY = re.compile(
    r"^([\d,]+) records in, ([\d,]+) rows out, ([\d,]+) failed, [\d.,]+ MB in [\d.]+ s "
    r"\([\d.,]+ MB/s\) -> (.+?)(?:; dead letters -> .+)?$"
)

FLAT_PLAN = f"""\
proto:
  file: {EXAMPLES / "bidrequest.proto"}
  message: BidRequestEvent
  import_paths: [{EXAMPLES}]
denormalizer:
  columns:
    - name: id
      path: id
    - name: imp_id
      path: imp[*].id
    - name: w
      path: imp[*].banner.w
input:
  framing: u32le
"""

NESTED_PLAN = f"""\
proto:
  file: {EXAMPLES / "bidrequest.proto"}
  message: BidRequestEvent
  import_paths: [{EXAMPLES}]
errors:
  policy: dead_letter
  dead_letter_path: dead/letters.parquet
output:
  path: nested-out
  row_group_size: 100
"""


def run(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """``wirearrow ARGS`` in ``cwd``: its exit status, stdout and stderr."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_process(cwd: Path, *args: str | Path, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``python -m wirearrow ARGS`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "wirearrow", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=120,
    )


def summary(proc: subprocess.CompletedProcess) -> tuple[int, int, int, str]:
    match = SUMMARY.match(proc.stdout.strip())
    assert match, proc.stdout
    n_in, n_out, failed = (int(g.replace(",", "")) for g in match.groups()[:3])
    return n_in, n_out, failed, match.group(4)


def frames(path: Path) -> list[int]:
    """The byte offset of each u32le frame of a file."""
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 4 + struct.unpack_from("<I", data, pos)[0]
    return offsets


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A directory with the plans and two corpora (u32le), plus a varint copy of one."""
    root = tmp_path_factory.mktemp("cli")
    (root / "plan.yaml").write_text(FLAT_PLAN)
    (root / "nested.yaml").write_text(NESTED_PLAN)
    corpus.write_corpus(root / "a.u32le", N, seed=1, framing="u32le")
    corpus.write_corpus(root / "b.u32le", N, seed=2, framing="u32le")
    corpus.write_corpus(root / "a.varint", N, seed=1, framing="varint")
    return root


@pytest.fixture(scope="module")
def records(work) -> dict[str, list[bytes]]:
    return {name: corpus.read_corpus(work / f"{name}.u32le") for name in ("a", "b")}


def flat(bid_schema: wa.Schema, recs: list[bytes]) -> pa.Table:
    batch = wa.Transcoder(bid_schema, columns=COLUMNS).transcode(recs)
    return pa.Table.from_batches([batch]).rename_columns(["id", "imp_id", "w"])


def corrupt(work: Path, name: str, index: int) -> Path:
    """A copy of a.u32le whose record ``index`` starts with a reserved wire type."""
    data = bytearray((work / "a.u32le").read_bytes())
    data[frames(work / "a.u32le")[index] + 4] = 0x0F  # field 1, wire type 7
    path = work / name
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- check


def test_check_prints_the_schema(work) -> None:
    proc = run(work, "check", "plan.yaml")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "plan.yaml: OK (BidRequestEvent, 3 columns, on_error=raise, framing=u32le)"
    assert lines[1:] == ["id: string", "imp_id: string", "w: uint32"]
    assert proc.stderr == ""


def test_check_reports_a_bad_plan(work) -> None:
    bad = work / "bad.yaml"
    bad.write_text(FLAT_PLAN.replace("path: imp[*].banner.w", "path: imp[*].banner.ww"))
    proc = run(work, "check", "bad.yaml")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("wirearrow: error: bad.yaml:11: denormalizer.columns[2]: ")
    assert "'ww'" in proc.stderr
    typo = work / "typo.yaml"
    typo.write_text(FLAT_PLAN.replace("message:", "mesage:"))
    proc = run(work, "check", "typo.yaml")
    assert proc.returncode == 1
    assert "proto.mesage: unknown key (did you mean 'message'?)" in proc.stderr
    assert run(work, "check", "missing.yaml").returncode == 1


# --------------------------------------------------------------------------- transcode


def test_transcode_a_file_per_input(work, records, bid_schema) -> None:
    # Small reads and batches: records straddle chunk boundaries and the tail is carried.
    out = work / "out"
    proc = run(
        work, "transcode", "plan.yaml", "a.u32le", "b.u32le", "-o", out,
        "--chunk-size", "4K", "--batch-size", "33", "--row-group-size", "100",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # piped: no progress line
    expected = {name: flat(bid_schema, recs) for name, recs in records.items()}
    n_in, n_out, failed, where = summary(proc)
    assert (n_in, failed) == (2 * N, 0)
    assert n_out == sum(t.num_rows for t in expected.values())
    assert where == str(out)
    assert sorted(os.listdir(out)) == ["a.parquet", "b.parquet"]  # no partial files left
    for name, table in expected.items():
        path = out / f"{name}.parquet"
        assert pq.read_table(path).to_pylist() == table.to_pylist()
        assert pq.ParquetFile(path).metadata.num_row_groups == -(-table.num_rows // 100)
        count = duckdb.sql(f"select count(*), count(distinct id) from '{path}'").fetchall()
        assert count == [(table.num_rows, N)]
    both = duckdb.sql(f"select count(*) from '{out}/*.parquet'").fetchall()
    assert both == [(n_out,)]


def test_transcode_nested_into_one_file(work, records, bid_schema) -> None:
    # --framing overrides nothing here (the plan has none); reads smaller than one record.
    proc = run(
        work, "transcode", "nested.yaml", "a.varint", "a.varint", "-o", "all.parquet",
        "--framing", "varint", "--chunk-size", "100",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert summary(proc) == (2 * N, 2 * N, 0, "all.parquet")
    assert proc.stdout.rstrip().endswith("; dead letters -> " + str(work / "dead/letters.parquet"))
    table = pq.read_table(work / "all.parquet")
    assert table.num_rows == 2 * N
    assert pq.ParquetFile(work / "all.parquet").metadata.num_row_groups == 6  # row_group_size 100
    expected = wa.Transcoder(bid_schema).transcode(records["a"])
    assert table.slice(N).to_pylist() == pa.Table.from_batches([expected]).to_pylist()
    assert duckdb.sql(f"select count(*) from '{work / 'all.parquet'}'").fetchall() == [(2 * N,)]
    # policy dead_letter in the plan: the side file exists, with no rows.
    assert pq.read_table(work / "dead/letters.parquet").num_rows == 0


def test_profile_is_written_then_read_back(work, records, bid_schema) -> None:
    profile = work / "profile.json"
    profile.unlink(missing_ok=True)
    first = run(work, "transcode", "nested.yaml", "a.varint", "-o", "p1.parquet",
                "--framing", "varint", "--profile", profile)  # fmt: skip
    assert first.returncode == 0, first.stderr
    doc = json.loads(profile.read_text())
    assert doc["format"] == "wirearrow-profile" and doc["plans"][0]["profile"]["records"] == N
    second = run(work, "transcode", "nested.yaml", "a.varint", "-o", "p2.parquet",
                 "--framing", "varint", "--profile", profile)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert json.loads(profile.read_text())["plans"][0]["profile"]["records"] == 2 * N
    assert pq.read_table(work / "p2.parquet").equals(pq.read_table(work / "p1.parquet"))
    (work / "junk.json").write_text("{}")
    bad = run(work, "transcode", "nested.yaml", "a.varint", "-o", "p3.parquet",
              "--framing", "varint", "--profile", "junk.json")  # fmt: skip
    assert bad.returncode == 1 and "not a wirearrow profile" in bad.stderr


def test_decode_error_under_raise(work) -> None:
    corrupt(work, "bad.u32le", 7)
    offset = frames(work / "bad.u32le")[7]
    proc = run(work, "transcode", "plan.yaml", "bad.u32le", "-o", "raise-out", "--chunk-size", "8K")
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("wirearrow: error: bad.u32le: record 7, byte 0")
    assert "wire type" in lines[0]
    assert f"the record starts at byte {offset} of the file" in lines[0]
    assert os.listdir(work / "raise-out") == []  # the partial output was removed


def test_truncated_stream_under_raise(work) -> None:
    data = (work / "a.u32le").read_bytes()
    (work / "cut.u32le").write_bytes(data[:-10])
    last = frames(work / "a.u32le")[-1]
    proc = run(work, "transcode", "plan.yaml", "cut.u32le", "-o", "cut-out")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"wirearrow: error: cut.u32le: truncated u32le stream: the record at byte {last} "
        f"runs past the end of the file ({len(data) - 10 - last:,} bytes left)"
    )


def test_dead_letters(work, records, bid_schema) -> None:
    bad = corrupt(work, "dl.u32le", 5)
    data = bad.read_bytes()
    bad.write_bytes(data[:-10])  # and a truncated last record
    offsets = frames(work / "a.u32le")
    proc = run(
        work, "transcode", "plan.yaml", "dl.u32le", "-o", "dl-out", "--dead-letters", "dl.parquet"
    )
    assert proc.returncode == 0, proc.stderr
    good = [r for i, r in enumerate(records["a"]) if i not in (5, N - 1)]
    assert summary(proc)[:3] == (N, flat(bid_schema, good).num_rows, 2)
    assert proc.stdout.rstrip().endswith("; dead letters -> dl.parquet")
    assert (
        pq.read_table(work / "dl-out/dl.parquet").to_pylist() == flat(bid_schema, good).to_pylist()
    )

    dead = pq.read_table(work / "dl.parquet").to_pylist()
    assert [(d["index"], d["file"], d["file_offset"]) for d in dead] == [
        (5, "dl.u32le", offsets[5]),
        (N - 1, "dl.u32le", offsets[N - 1]),
    ]
    assert dead[0]["raw"] == data[offsets[5] + 4 : offsets[6]]
    assert "wire type" in dead[0]["reason"]
    assert dead[1]["raw"] == data[offsets[N - 1] : -10]
    assert dead[1]["reason"].startswith(
        f"truncated u32le stream: the record at byte {offsets[N - 1]} runs past the end"
    )
    assert duckdb.sql(f"select count(*) from '{work / 'dl.parquet'}'").fetchall() == [(2,)]


def test_skip_counts_without_a_side_file(work) -> None:
    corrupt(work, "skip.u32le", 0)
    proc = run(work, "transcode", "plan.yaml", "skip.u32le", "-o", "skip-out", "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    n_in, _, failed, _ = summary(proc)
    assert (n_in, failed) == (N, 1)
    assert "dead letters" not in proc.stdout
    assert not (work / "skip-out.dead_letters.parquet").exists()


def test_bad_varint_prefix(work) -> None:
    data = (work / "a.varint").read_bytes()
    (work / "junk.varint").write_bytes(data + b"\xff" * 12 + b"tail")
    proc = run(work, "transcode", "plan.yaml", "junk.varint", "--framing", "varint", "-o", "j")
    assert proc.returncode == 1
    assert f"varint length prefix longer than 10 bytes at byte {len(data)}" in proc.stderr


def test_bad_invocations(work) -> None:
    proc = run(work, "transcode", "plan.yaml", "nothere.u32le", "-o", "x")
    assert (proc.returncode, proc.stderr.strip()) == (
        1,
        "wirearrow: error: cannot read nothere.u32le: No such file or directory",
    )
    proc = run(work, "transcode", "plan.yaml", work, "-o", "x")
    assert proc.returncode == 1 and "is a directory" in proc.stderr
    proc = run(work, "transcode", "plan.yaml", "a.u32le")  # no -o, no output.path
    assert proc.returncode == 2 and "no output" in proc.stderr
    proc = run(work, "transcode", "plan.yaml", "a.u32le", "-o", "x", "--framing", "u64")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = run(work, "transcode", "plan.yaml", "a.u32le", "a.u32le", "-o", "dup")
    assert proc.returncode == 2 and "would both be written" in proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a pty")
def test_progress_line_on_a_terminal(work) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        proc = run_process(work, "transcode", "plan.yaml", "a.u32le", "-o", "tty-out", stderr=follower)
    finally:
        os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.returncode == 0
    text = shown.decode()
    assert re.search(r"\ra\.u32le: +[\d.]+% [\d,]+ records, [\d.]+ MB, [\d.,]+ MB/s", text)
    assert text.endswith("\r")  # the line is cleared before the summary
    assert summary(proc)[0] == N


# --------------------------------------------------------------------------- schema / bench


def test_schema_prints_the_nested_schema(work) -> None:
    proc = run(work, "schema", EXAMPLES / "bidrequest.proto", "BidRequestEvent", "-I", EXAMPLES)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:6] == [
        "id: string",
        "imp: list<struct>",
        "  id: string",
        "  banner: struct",
        "    w: uint32",
        "    h: uint32",
    ]
    assert "ext: map<string, string>" in lines
    assert "timestamp: timestamp[us, tz=UTC]" in lines
    proc = run(work, "schema", EXAMPLES / "bidrequest.proto", "NoSuchMessage")
    assert proc.returncode == 1
    assert "NoSuchMessage" in proc.stderr and "not found" in proc.stderr


RECURSIVE = """
syntax = "proto3";
package rec;
message Leaf { int32 v = 1; }
message Node { string name = 1; repeated Node children = 2; Leaf leaf = 3; }
message Expr { oneof k { Bin bin = 1; int64 lit = 2; } }
message Bin { Expr l = 1; Expr r = 2; Expr third = 3; }  // three ways down: exponential
message Tree { Node root = 1; Expr e = 2; map<string, Node> named = 3; }
"""


def test_check_a_proto_names_recursive_types_and_their_max_depth(tmp_path, capsys) -> None:
    (tmp_path / "rec.proto").write_text(RECURSIVE)
    assert main(["check", str(tmp_path / "rec.proto")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path / 'rec.proto'}: OK (5 messages)",
        "rec.Bin: recursive rec.Bin, rec.Expr; read whole with max_depth 1..17",
        "rec.Expr: recursive rec.Bin, rec.Expr; read whole with max_depth 1..18",
        "rec.Leaf",
        "rec.Node: recursive rec.Node; read whole with max_depth 1..100",
        "rec.Tree: holds recursive types rec.Bin, rec.Expr, rec.Node; read whole with "
        "max_depth 1..19",
    ]
    # one level more than the range is the Transcoder's plan-size error
    schema = wa.Schema.from_proto(tmp_path / "rec.proto", "rec.Expr")
    with pytest.raises(wa.PlanError, match="read whole with max_depth=19 has"):
        wa.Transcoder(schema, max_depth=19)
    assert main(["check", str(tmp_path / "missing.proto")]) == 1
    assert "missing.proto" in capsys.readouterr().err


@pytest.mark.slow
def test_the_top_of_the_max_depth_range_compiles(tmp_path) -> None:
    """The range check gives is counted without building the plan: at its top, the
    Transcoder builds it (about 100,000 fields, seconds)."""
    (tmp_path / "rec.proto").write_text(RECURSIVE)
    schema = wa.Schema.from_proto(tmp_path / "rec.proto", "rec.Expr")
    assert max_depth_limit(schema) == 18
    tc = wa.Transcoder(schema, max_depth=18)
    assert tc.arrow_schema.names == ["bin", "lit"]


def test_schema_of_a_recursive_message_needs_max_depth(tmp_path, capsys) -> None:
    proto = str(tmp_path / "rec.proto")
    (tmp_path / "rec.proto").write_text(RECURSIVE)
    assert main(["schema", proto, "rec.Node"]) == 1
    err = capsys.readouterr().err
    assert "rec.Node holds recursive types (rec.Node): pass --max-depth N" in err
    assert "max_depth=N" not in err  # the option this command has, not the API's
    assert main(["schema", proto, "rec.Node", "--max-depth", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "name: string",
        "children: list<struct>",
        "  name: string",
        "  children: list<binary>",
        "  leaf: struct",
        "    v: int32",
        "leaf: struct",
        "  v: int32",
    ]
    assert main(["schema", proto, "rec.Expr", "--max-depth", "50"]) == 1
    assert "lower max_depth" in capsys.readouterr().err


def test_a_plan_reports_key_and_path_problems_at_once(tmp_path, capsys) -> None:
    (tmp_path / "rec.proto").write_text(RECURSIVE)
    (tmp_path / "bad.yaml").write_text(
        "proto: {file: rec.proto, message: rec.Tree}\n"
        "denormalizer:\n"
        "  columns:\n"
        "    - {name: a, path: root.nme}\n"
        "    - {name: b, pth: root.name}\n"
        "    - {name: c, path: 'root.children[?(.name == 1)][0].name'}\n"
        "    - {name: d, expr: {func: uper, args: [{path: root.name}]}}\n"
        "    - {name: e, path: root.leaf.v}\n"
    )
    assert main(["check", str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    found = [line for line in err.splitlines() if "bad.yaml:" in line]
    where = str(tmp_path / "bad.yaml")
    assert found == [
        f"wirearrow: error: {where}:4: denormalizer.columns[0]: field 'nme' not in message "
        "rec.Node (did you mean 'name'?)",
        f"{where}:5: denormalizer.columns[1].pth: unknown key (did you mean 'path'?); "
        "expected one of: name, path, expr, strict",
        f"{where}:5: denormalizer.columns[1]: either path or expr must be set",
        f"{where}:6: denormalizer.columns[2]: cannot compare string with number",
        f"{where}:7: denormalizer.columns[3].expr.func: unknown function 'uper' "
        "(did you mean 'upper'?)",
    ]


def test_bench_output_shape(work) -> None:
    proc = run(work, "bench", "plan.yaml", "a.u32le", "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith(f"a.u32le: {N} records, ")
    assert "median of 2" in lines[0]
    assert re.match(r"wirearrow +[\d,]+ msg/s +[\d,.]+ MB/s +[\d,]+ rows$", lines[1])
    assert re.match(r"protobuf +[\d,]+ msg/s +[\d,.]+ MB/s +\w+ FromString", lines[2])
    assert re.match(r"ratio +[\d,]+\.\dx ", lines[3])


# --------------------------------------------------------------------------- in process


def test_the_command_runs_as_a_module(work) -> None:
    """``python -m wirearrow``: what main() prints and returns, as the process's output and
    exit status (a success: test_progress_line_on_a_terminal)."""
    proc, in_process = run_process(work, "transcode", "plan.yaml"), run(work, "transcode", "plan.yaml")
    assert proc.returncode == 2  # a usage error
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        in_process.returncode, in_process.stdout, in_process.stderr
    )


def test_main_returns_exit_codes(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("wirearrow ")
    assert main(["transcode"]) == 2
    assert main(["check", "definitely-missing.yaml"]) == 1
    assert "plan file not found" in capsys.readouterr().err


def test_documented_commands_parse() -> None:
    """Every ``$ wirearrow ...`` line of docs/cli.md uses options that exist."""
    page = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    # a command may go on over lines ending in a backslash
    commands = re.findall(r"^ *\$ (wirearrow (?:.*\\\n)*.*)$", page.read_text(), re.M)
    assert len(commands) >= 8
    parser = build_parser()
    for line in commands:
        parser.parse_args(shlex.split(line.replace("\\\n", " "))[1:])  # SystemExit if not
