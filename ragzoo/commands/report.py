"""`ragzoo report RUN [RUN ...]`: a table of finished runs (method, n, metrics, LM calls per question, tokens,
cost, failures); `--plot out.png` draws a metric against LM calls per question, one point per run."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="run directories written by ragzoo evaluate")
    parser.add_argument("--plot", help="write a PNG: metric vs LM calls per question")
    parser.add_argument("--metric", help="metric for the plot (default: the first of each run)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _recorded_dry_run(lm) -> bool:
    """Whether a run's recorded LM was the dry-run LM: the flag `describe_lm` wrote, or (older runs that
    saved the spec string) the spec itself, read by `ragzoo.engines.is_dry_run_spec`."""
    from ragzoo.engines import is_dry_run_spec

    if isinstance(lm, dict):
        return bool(lm.get("dry_run"))
    return is_dry_run_spec(lm)


def rows(run_dirs: list[str]) -> list[dict]:
    from pathlib import Path

    from ragzoo.runs import load_run

    table = []
    for run_dir in run_dirs:
        config, summary, _records = load_run(run_dir)
        usage = summary.get("usage", {})
        label = config.get("method") or "?"
        if config.get("program"):
            label = f"{label} ({Path(str(config['program'])).name})"
        dry_run = _recorded_dry_run(config.get("lm"))
        table.append({"run": str(run_dir), "method": label, "n": summary.get("n", 0), "dry_run": dry_run,
                      "metrics": summary.get("metrics", {}), "lm_calls_per_question": usage.get("lm_calls_per_question", 0.0),
                      "tokens_per_question": usage.get("tokens_per_question", 0.0), "cost": usage.get("cost", 0.0),
                      "failures": summary.get("failures", 0), "complete": summary.get("complete", True)})
    return table


def format_table(table: list[dict]) -> str:
    metric_names: list[str] = []
    for row in table:
        for name in row["metrics"]:
            if name not in metric_names:
                metric_names.append(name)
    header = ["method", "n", *metric_names, "calls/q", "tokens/q", "cost $", "failures"]
    lines = [[str(row["method"]) + ("" if row["complete"] else " (partial)"), str(row["n"]),
              *[("n/a*" if row.get("dry_run") else f"{row['metrics'][m]:.3f}") if m in row["metrics"] else "-"
                for m in metric_names],
              f"{row['lm_calls_per_question']:.2f}", f"{row['tokens_per_question']:.0f}", f"{row['cost']:.4f}",
              str(row["failures"])] for row in table]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in lines]
    if any(row.get("dry_run") for row in table):
        out.append("* dry-run: placeholder answers from no LM, so no accuracy figure; calls and tokens are real")
    return "\n".join(out)


def plot(table: list[dict], path: str, metric: str | None = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragzoo.errors import ConfigError

    table = [row for row in table if not row.get("dry_run")]
    if not table:
        raise ConfigError("every run is a dry run: their answers are placeholders, so there is no metric to plot")
    metric = metric or next((name for row in table for name in row["metrics"]), None)
    if metric is None or not any(metric in row["metrics"] for row in table):
        raise ConfigError(f"no run has metric {metric!r} to plot; pass --metric with one the runs have")
    from pathlib import Path

    target = Path(path)
    if target.parent and not target.parent.is_dir():
        raise ConfigError(f"cannot write the plot to {path}: folder {target.parent} does not exist; create it "
                          f"or choose another --plot path")
    figure, axes = plt.subplots(figsize=(6, 4))
    for row in table:
        if metric in row["metrics"]:
            axes.scatter(row["lm_calls_per_question"], row["metrics"][metric])
            axes.annotate(row["method"], (row["lm_calls_per_question"], row["metrics"][metric]),
                          textcoords="offset points", xytext=(4, 4), fontsize=8)
    axes.set_xlabel("LM calls per question")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return metric


def run(args: argparse.Namespace) -> int:
    import json

    table = rows(args.runs)
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        print(format_table(table))
    if args.plot:
        metric = plot(table, args.plot, args.metric)
        print(f"plot: {args.plot} ({metric} vs LM calls per question)")
    return 0
