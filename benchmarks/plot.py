"""Figures of the benchmarks: PNGs, the docs page and the README's lines from their runs.

    python benchmarks/plot.py out/bench/flat.json --out out/plots        # PNGs of any run
    python benchmarks/plot.py benchmarks/results/figures.json --publish  # the published figures

Input: the ``--json`` output of a benchmark script (``NAME.json``), or the published
collection ``benchmarks/results/figures.json`` written by ``publish.py`` (its ``runs``,
each under its name). For each run: ``NAME-throughput.png`` (messages per second of every
row, by plan, each bar labelled with its ratio to the row the script compares it with,
the script's target lines underneath) and, when the rows have a peak-memory probe,
``NAME-memory.png`` (peak memory over the output's size); runs without per-row rates
(threads, Ray, Beam) have no PNG, only their target lines on the page.

``--publish`` writes the PNGs into docs/img/benchmarks, the docs page
docs/benchmark-figures.md and the README's performance lines (between its ``figures``
markers), every ratio with its run's conditions (date, machine, load before and after).
It refuses, and writes nothing, when a run is a ``--quick`` run or was taken above the
load ``conditions.refusals`` allows (benchmarks/README.md, "Publishing the figures").
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import conditions

__all__ = ["Unpublishable", "figures", "main", "page_text", "readme_lines", "unquoted_numbers"]

RATIO_LABEL = {"flat": "x pybufarrow", "nested": "x ptars", "encode": "x runtime"}

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "benchmarks" / "results" / "figures.json"
PAGE = ROOT / "docs" / "benchmark-figures.md"
IMAGES = ROOT / "docs" / "img" / "benchmarks"
README = ROOT / "README.md"
README_BEGIN = "<!-- figures: written by benchmarks/plot.py --publish from benchmarks/results/figures.json -->"
README_END = "<!-- /figures -->"
REFRESH = "python benchmarks/publish.py"


class Unpublishable(ValueError):
    """A run whose figures may not be published (``conditions.refusals``)."""


def _rows(results: list[dict]) -> list[dict]:
    return [r for r in results if r.get("status", "ok") == "ok" and r.get("msg_per_s")]


def _label(row: dict) -> str:
    form = row.get("input_form")
    return f"{row['method']} ({form})" if form else row["method"]


def _when(path: Path, data: dict) -> str:
    stamp = (data.get("conditions") or {}).get("date") or data.get("date")
    if stamp:
        return str(stamp)
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, tz=datetime.timezone.utc)
    return mtime.strftime("%Y-%m-%d %H:%M UTC")


def _machine(data: dict) -> str:
    m = data.get("machine") or {}
    if not m:
        return "machine not recorded"
    return f"{m.get('cpu', '?')}, {m.get('usable_cores', m.get('cores', '?'))} cores, {m.get('python', '')}"


def png_names(name: str, data: dict) -> list[str]:
    """The PNGs ``figures`` makes of a run (none when it has no per-row rates)."""
    rows = _rows(data.get("results", []))
    if not rows:
        return []
    probed = any(r.get("peak_ratio") is not None for r in rows)
    return [f"{name}-throughput.png", *([f"{name}-memory.png"] if probed else [])]


def figures(path: Path, out: Path, *, name: str | None = None, data: dict | None = None) -> list[Path]:
    """The PNGs of one benchmark's JSON output, written into ``out``; their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text()) if data is None else data
    name = name or path.stem
    rows = _rows(data.get("results", []))
    if not rows:
        raise ValueError(f"{path}: no measured rows")
    plans = list(dict.fromkeys(r.get("plan", "") for r in rows))
    out.mkdir(parents=True, exist_ok=True)
    subtitle = run_conditions(data) if data.get("conditions") else f"{_machine(data)}; {_when(path, data)}"
    made = []

    height = sum(len([r for r in rows if r.get("plan", "") == p]) for p in plans)
    fig, axes = plt.subplots(
        len(plans), 1, figsize=(9, 1.2 + 0.38 * height + 0.5 * len(plans)), squeeze=False,
        gridspec_kw={"height_ratios": [max(1, sum(r.get("plan", "") == p for r in rows)) for p in plans]},
    )  # fmt: skip
    for ax, plan in zip(axes[:, 0], plans, strict=True):
        group = [r for r in rows if r.get("plan", "") == plan]
        labels = [_label(r) for r in group]
        values = [r["msg_per_s"] for r in group]
        colors = ["#1f6feb" if r["method"].startswith("wirearrow") else "#8c959f" for r in group]
        bars = ax.barh(labels, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(plan or name, loc="left", fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        for bar, row in zip(bars, group, strict=True):
            ratio = row.get("ratio")
            text = f" {row['msg_per_s']:,.0f}"
            if ratio is not None:
                text += f"  ({ratio:.2f}{RATIO_LABEL.get(name, 'x')})"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=7)
        ax.set_xlim(0, max(values) * 1.45)
    axes[-1, 0].set_xlabel("messages per second (median)", fontsize=9)
    targets = data.get("targets") or []
    fig.suptitle(f"{name}: throughput\n{subtitle}", fontsize=10)
    if targets:
        fig.text(0.01, 0.005, "\n".join(targets), fontsize=7, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.03 + 0.018 * len(targets), 1, 1))
    target = out / f"{name}-throughput.png"
    fig.savefig(target, dpi=110)
    plt.close(fig)
    made.append(target)

    probed = [r for r in rows if r.get("peak_ratio") is not None]
    if probed:
        fig, ax = plt.subplots(figsize=(9, 1.2 + 0.3 * len(probed)))
        labels = [f"{_label(r)} [{r.get('plan', '')}]" for r in probed]
        values = [r["peak_ratio"] for r in probed]
        colors = ["#1f6feb" if r["method"].startswith("wirearrow") else "#8c959f" for r in probed]
        bars = ax.barh(labels, values, color=colors)
        ax.invert_yaxis()
        for bar, row in zip(bars, probed, strict=True):
            mb = (row.get("peak_extra_bytes") or 0) / 1e6
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {row['peak_ratio']:.2f} ({mb:,.1f} MB)", va="center", fontsize=7)  # fmt: skip
        ax.set_xlim(0, max(values) * 1.35)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("peak memory above the input / output size", fontsize=9)
        ax.set_title(f"{name}: peak memory\n{subtitle}", fontsize=10)
        fig.tight_layout()
        target = out / f"{name}-memory.png"
        fig.savefig(target, dpi=110)
        plt.close(fig)
        made.append(target)
    return made


def _loads(load: list[float] | None) -> str:
    return " / ".join(f"{x:.2f}" for x in load) if load else "not recorded"


def run_conditions(data: dict) -> str:
    """One line: when, where and under what load a run was taken."""
    c = data.get("conditions") or {}
    m = c.get("machine") or data.get("machine") or {}
    memory = f", {m['memory_gb']:g} GB" if m.get("memory_gb") else ""
    kind = "--quick run" if c.get("quick") else "full run"
    return (
        f"{c.get('date', 'date not recorded')}, {m.get('cpu', 'machine not recorded')}, "
        f"{m.get('cores', '?')} cores{memory}; {kind}; load average (one, five, fifteen minutes) "
        f"{_loads(c.get('load_before'))} before, {_loads(c.get('load_after'))} after"
        + (
            f"; other processes used {c['others_cores']:.2f} cores during the run"
            if c.get("others_cores") is not None
            else ""
        )
    )


def _versions(data: dict) -> str:
    v = (data.get("conditions") or {}).get("versions") or {}
    return ", ".join(f"{k} {x}" for k, x in v.items() if x != "not installed")


def _targets(data: dict) -> list[str]:
    return [str(t) for t in data.get("targets") or []]


def refusals(figures: dict) -> dict[str, list[str]]:
    """Per run, why it may not be published (only the runs with a reason)."""
    out = {}
    for name, data in (figures.get("runs") or {}).items():
        reasons = conditions.refusals(data.get("conditions"))
        if reasons:
            out[name] = reasons
    return out


def page_text(figures: dict) -> str:
    """docs/benchmark-figures.md from the published collection (``figures.json``)."""
    runs = figures.get("runs") or {}
    limits = figures.get("thresholds") or {}
    lines = [
        "# Benchmark figures",
        "",
        "<!-- Written by benchmarks/plot.py --publish from benchmarks/results/figures.json:"
        " regenerate, do not edit (benchmarks/README.md). -->",
        "",
    ]
    rule = (
        f"Only full runs are published, each taken with a one-minute load average of at most "
        f"{limits.get('quiet_load_per_core', conditions.QUIET_LOAD_PER_CORE):g} per core "
        f"(never under {limits.get('quiet_load_floor', conditions.QUIET_LOAD_FLOOR):g}) from anything else, before "
        f"and during the run (the CPU other processes used, where recorded, else the load after it); `{REFRESH}` takes them ([benchmarks](benchmarks.md) explains "
        "every row). Absolute rates depend on the machine: read the ratios, which compare "
        "rows measured in the same run, each printed with its run's conditions."
    )
    if not runs:
        lines += [
            "**No published figures: awaiting a quiet full run.** " + rule,
            "",
        ]
        for w in figures.get("withdrawn") or []:
            lines += [f"Withdrawn: {w['what']} ({w['date']}): {w['why']}", ""]
        return "\n".join(lines)
    lines += [rule, ""]
    for name, data in runs.items():
        lines += [f"## {name}", "", f"Measured {run_conditions(data)}.", ""]
        versions = _versions(data)
        if versions:
            lines += [f"Versions: {versions}.", ""]
        short = _short_conditions(data)
        for target in _targets(data):
            lines.append(f"- {target} ({short})")
        if _targets(data):
            lines.append("")
        for png in png_names(name, data):
            lines += [f"![{Path(png).stem}](img/benchmarks/{png})", ""]
    return "\n".join(lines)


def _short_conditions(data: dict) -> str:
    c = data.get("conditions") or {}
    before, after = c.get("load_before") or [None], c.get("load_after") or [None]
    fmt = lambda x: "?" if x is None else f"{x:.2f}"  # noqa: E731
    during = c.get("others_cores")
    if during is not None:  # what decided (the load after counts the run's own processes)
        return f"{c.get('date', '?')}, load {fmt(before[0])} before, others {during:.2f} cores during"
    return f"{c.get('date', '?')}, load {fmt(before[0])} before, {fmt(after[0])} after"


def readme_lines(figures: dict) -> list[str]:
    """The README's performance lines: each published target line with its conditions."""
    runs = figures.get("runs") or {}
    if not runs:
        return [
            "No published benchmark figures yet: they await a full run on a quiet machine "
            f"(`{REFRESH}`, [benchmarks/README.md](benchmarks/README.md#publishing-the-figures)).",
        ]
    out = ["Published figures ([docs/benchmark-figures.md](docs/benchmark-figures.md): every run's machine and load):", ""]
    for name, data in runs.items():
        for target in _targets(data):
            out.append(f"- {name}: {target} ({_short_conditions(data)})")
    return out


def _with_readme_lines(readme: str, lines: list[str]) -> str:
    head, sep, rest = readme.partition(README_BEGIN)
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"README.md has no {README_BEGIN!r} ... {README_END!r} block")
    return head + README_BEGIN + "\n" + "\n".join(lines) + "\n" + README_END + tail


def readme_block(readme: str) -> str:
    """The text between the README's figures markers."""
    _, sep, rest = readme.partition(README_BEGIN)
    block, sep2, _ = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"README.md has no {README_BEGIN!r} ... {README_END!r} block")
    return block


# A number as quoted on the page: digits with separators (1,234 / 2.65 / 2026-12-07 / 00:41)
# and the scale suffixes of rates (2.65M, 266k).
_NUMBER = re.compile(r"\d[\d,.:-]*\d[kM]?|\d[kM]?")


def _json_strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_json_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _json_strings(v)]
    return [str(value)] if not isinstance(value, float) else [repr(value)]


def _json_floats(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [f for v in value.values() for f in _json_floats(v)]
    if isinstance(value, list):
        return [f for v in value for f in _json_floats(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def unquoted_numbers(text: str, figures: dict) -> list[str]:
    """The numbers of ``text`` that the collection does not hold: [] when none drifted.

    A number is held when it occurs, not as part of a longer number, in one of the JSON's
    strings (the scripts' target lines, dates, versions), or when one of its numbers, shown with as many decimals as
    the quote, reads the same (a load of 0.12, 2 cores). Link targets and image paths are
    not quotes.
    """
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link and image targets
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    strings = _json_strings(figures)
    floats = _json_floats(figures)
    missing = []
    for quote in _NUMBER.findall(text):
        alone = re.compile(rf"(?<![\d.,]){re.escape(quote)}(?![\d])")
        if any(alone.search(s) for s in strings):
            continue
        plain = quote.rstrip("kM").replace(",", "")
        try:
            value = float(plain)
        except ValueError:
            missing.append(quote)
            continue
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        scale = {"k": 1e3, "M": 1e6}.get(quote[-1], 1)
        if not any(f"{f / scale:.{decimals}f}" == f"{value:.{decimals}f}" for f in floats):
            missing.append(quote)
    return missing


def publish(figures_path: Path = FIGURES, *, page: Path = PAGE, images: Path = IMAGES,
            readme: Path = README) -> list[Path]:
    """Write the PNGs, the page and the README lines of ``figures_path``; refuse bad runs."""
    figures_data = json.loads(figures_path.read_text())
    refused = refusals(figures_data)
    if refused:
        raise Unpublishable("; ".join(f"{k}: {', '.join(v)}" for k, v in refused.items()))
    made = []
    for name, data in (figures_data.get("runs") or {}).items():
        if png_names(name, data):
            made += figures(figures_path, images, name=name, data=data)
    text = page_text(figures_data)
    page.write_text(text)
    new_readme = _with_readme_lines(readme.read_text(), readme_lines(figures_data))
    readme.write_text(new_readme)
    for written, where in ((text, page), (readme_block(new_readme), readme)):
        missing = unquoted_numbers(written, figures_data)
        if missing:  # a bug of this module, not of the run: the page would be wrong
            raise AssertionError(f"{where} quotes numbers not in {figures_path}: {missing}")
    return [*made, page, readme]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", type=Path,
                        help="--json outputs of the benchmarks, or figures.json")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("out/plots"), help="PNG directory")
    parser.add_argument("--publish", action="store_true",
                        help="one figures.json: write docs/img/benchmarks, the docs page and "
                        "the README's lines (refused for --quick or loaded runs)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.publish:
        if len(args.json) != 1:
            parser.error("--publish takes one figures.json")
        try:
            written = publish(args.json[0])
        except Unpublishable as exc:
            print(f"not published: {exc}", file=sys.stderr)
            return 2
        for path in written:
            print(f"wrote {path}")
        return 0
    for source in args.json:
        data = json.loads(source.read_text())
        runs = data["runs"].items() if "runs" in data else [(source.stem, data)]
        for name, run in runs:
            print(f"{name}: {run_conditions(run)}")
            for reason in conditions.refusals(run.get("conditions")):
                print(f"  not publishable: {reason}")
            if png_names(name, run):
                for png in figures(source, args.out, name=name, data=run):
                    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
