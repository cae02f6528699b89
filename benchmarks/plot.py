"""Figures of the benchmarks: PNGs from the ``--json`` output of each benchmark script.

    python benchmarks/bench_flat.py --quick --json out/bench/flat.json
    python benchmarks/bench_nested.py --quick --json out/bench/nested.json
    python benchmarks/bench_encode.py --quick --json out/bench/encode.json
    python benchmarks/plot.py out/bench/*.json --out docs/img/benchmarks --page docs/benchmark-figures.md

For each JSON file ``NAME.json``: ``NAME-throughput.png`` (messages per second of every
row, by plan, each bar labelled with its ratio to the row the script compares it with,
the script's target lines underneath) and, when the rows have a peak-memory probe,
``NAME-memory.png`` (peak memory over the output's size). ``--page`` writes the docs page
that shows them, with the machine and the date of the measurements.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["figures", "main"]

RATIO_LABEL = {"flat": "x pybufarrow", "nested": "x ptars", "encode": "x runtime"}


def _rows(results: list[dict]) -> list[dict]:
    return [r for r in results if r.get("status", "ok") == "ok" and r.get("msg_per_s")]


def _label(row: dict) -> str:
    form = row.get("input_form")
    return f"{row['method']} ({form})" if form else row["method"]


def _when(path: Path, data: dict) -> str:
    stamp = data.get("date")
    if stamp:
        return str(stamp)
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, tz=datetime.timezone.utc)
    return mtime.strftime("%Y-%m-%d %H:%M UTC")


def _machine(data: dict) -> str:
    m = data.get("machine") or {}
    if not m:
        return "machine not recorded"
    return f"{m.get('cpu', '?')}, {m.get('usable_cores', m.get('cores', '?'))} cores, {m.get('python', '')}"


def figures(path: Path, out: Path) -> list[Path]:
    """The PNGs of one benchmark's JSON output, written into ``out``; their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    name = path.stem
    rows = _rows(data.get("results", []))
    if not rows:
        raise ValueError(f"{path}: no measured rows")
    plans = list(dict.fromkeys(r.get("plan", "") for r in rows))
    out.mkdir(parents=True, exist_ok=True)
    subtitle = f"{_machine(data)}; {_when(path, data)}"
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


def _page(sources: Sequence[Path], made: dict[Path, list[Path]], page: Path) -> str:
    lines = [
        "# Benchmark figures",
        "",
        "<!-- Written by benchmarks/plot.py: regenerate, do not edit (benchmarks/README.md). -->",
        "",
        "The latest figures measured here, from `--quick` runs of the benchmark scripts on a",
        "shared machine: absolute numbers move with the load; read the ratios, which compare",
        "rows measured in the same run ([benchmarks](benchmarks.md) explains every row).",
        "A `--quick` run is a smoke test (a small corpus, short timings): the full runs in",
        "[benchmarks](benchmarks.md) are the reference for the targets.",
        "",
    ]
    for source in sources:
        data = json.loads(source.read_text())
        lines += [f"## {source.stem}", "", f"Measured {_when(source, data)} on {_machine(data)}.", ""]
        for target in data.get("targets") or []:
            lines.append(f"- {target}")
        if data.get("targets"):
            lines.append("")
        for png in made[source]:
            rel = os.path.relpath(png, page.parent).replace(os.sep, "/")
            lines += [f"![{png.stem}]({rel})", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", type=Path, help="--json outputs of the benchmarks")
    parser.add_argument("--out", type=Path, default=Path("out/plots"), help="PNG directory")
    parser.add_argument("--page", type=Path, default=None, help="also write this docs page")
    args = parser.parse_args(argv)
    made = {}
    for source in args.json:
        made[source] = figures(source, args.out)
        for png in made[source]:
            print(f"wrote {png}")
    if args.page is not None:
        args.page.write_text(_page(args.json, made, args.page))
        print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
