"""The results of a grid: rows = methods (x optimizer x LM when the grid has several), columns = dataset x
metric, each entry "ours [95% CI] | paper | delta" on the paper's scale, plus n done / asked, failures, LM
calls and cost per question; then the paired comparisons of every row with the grid's main method on the
questions both answered, each p-value printed beside its Holm adjustment over all the comparisons of the
table (several methods tested against one main method: family-wise error). Written as Markdown, CSV and JSON
in the grid directory; `grid_of_folder` recovers a sweep's grid from its folder, so `ragzoo report GRID_OUT`
rebuilds the table.

Everything is computed from the cells' run directories (records sorted by question id, statistics seeded),
so the table is the same whichever worker, order or number of workers produced the cells.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ragzoo import stats
from ragzoo.grid.runner import cell_dir, runnable
from ragzoo.grid.spec import Grid

MOSTLY_FAILED = 0.5


def _load(run: Path):
    from ragzoo.runs import load_run

    if not (run / "config.json").is_file():
        return None
    config, summary, records = load_run(run)
    return config, summary, sorted(records, key=lambda r: str(r["id"]))


def _dry(config: dict) -> bool:
    lm = config.get("lm")
    return bool(lm.get("dry_run")) if isinstance(lm, dict) else False


def build(grid: Grid, out: str | Path, *, resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    from ragzoo.runs import extra_usage, metric_failures, usage_totals

    out = Path(out)
    several_opt = len(grid.optimizers) > 1
    several_lm = len(grid.lms) > 1
    rows: dict[str, dict] = {}
    measured: list[str] = []
    per_row_scores: dict[tuple[str, str, str], dict[str, float]] = {}
    for cell in grid.cells():
        row_name = cell.method.label + (f" / {cell.optimizer}" if several_opt else "") + \
            (f" / {cell.lm.name}" if several_lm else "")
        row = rows.setdefault(row_name, {"row": row_name, "method": cell.method.id, "label": cell.method.label,
                                         "knobs": cell.method.knobs, "optimizer": cell.optimizer, "lm": cell.lm.spec,
                                         "cells": {}})
        entry: dict = {"dataset": cell.dataset.name, "split": cell.dataset.split, "label": cell.dataset.label,
                       "knobs": cell.knobs, "key": cell.key, "paper": cell.method.paper.get(cell.dataset.label, {})}
        row["cells"][cell.dataset.label] = entry
        reason = runnable(cell)
        if reason:
            entry["status"] = reason
            continue
        for stage in _compile_stages(cell_dir(out, cell) / "artifact"):
            # a stage whose labels came from another measure than asked (FILCO's CXMI fallback), or that was
            # skipped, is a difference from the paper this run made: the table says so beside the static ones
            said = "; ".join(part for part in (
                f"compile stage {stage.get('stage')!r} skipped: {stage['skipped']}" if stage.get("skipped") else "",
                stage.get("fallback") or "") if part) or None
            if said:
                measured.append(f"{row_name}, {cell.dataset.label}: {said}")
        loaded = _load(cell_dir(out, cell) / "run")
        if loaded is None:
            entry["status"] = "not run"
            continue
        config, summary, records = loaded
        # what the grid asks of the cell now, not what its run was last asked: a run left at an earlier, smaller
        # -n (a budget stopped the grid before extending it) is partial, kept out of the paired tests
        n_done = len(records)
        n_asked = cell.n if cell.n is not None else _whole_split(cell, config, summary, n_done)
        failures = sum(1 for r in records if r.get("error"))
        # what was paid: the records, and what no record holds (retried attempts, late calls)
        used = usage_totals(records, extra_usage(cell_dir(out, cell) / "run"))
        entry.update(n=n_done, n_asked=n_asked, failures=failures, dry_run=_dry(config),
                     lm_calls_per_question=used["lm_calls"] / max(1, n_done),
                     cost_per_question=used["cost"] / max(1, n_done),
                     # the same calls as if none had been served from the cache (which costs nothing)
                     cost_per_question_uncached=(used["cost"] + used["cached_cost"]) / max(1, n_done),
                     latency_mean=sum(float(r.get("latency") or 0) for r in records) / max(1, n_done))
        flags = []
        partial = n_done < n_asked
        if partial:
            flags.append(f"partial {n_done}/{n_asked}")
        if grid.n is not None and n_done > grid.n:  # run before at a larger -n: its mean is over more questions
            flags.append(f"{n_done} questions, the grid asks {grid.n}")
        if n_done and failures / n_done > MOSTLY_FAILED:
            flags.append(f"mostly failed ({failures}/{n_done})")
        # a metric that raised scored the question 0 (`runs.run_example`): said
        flags += [f"{name} raised on {count}" for name, count in metric_failures(records).items()]
        entry["status"] = "; ".join(flags) or "done"
        entry["metrics"] = {}
        if entry["dry_run"] or not records:
            continue
        for metric in config.get("metrics") or []:
            scores = [float((r.get("metrics") or {}).get(metric) or 0.0) for r in records]
            interval = stats.bootstrap_ci(scores, resamples=resamples, seed=seed)
            paper = entry["paper"].get(metric)
            ours = interval.mean * grid.scale
            # a partial cell's mean is of the questions it reached: shown with its flag, but set beside neither
            # the paper (no delta) nor another row (no paired test) as if it were the row's result
            entry["metrics"][metric] = {"ours": ours, "low": interval.low * grid.scale,
                                        "high": interval.high * grid.scale, "paper": paper,
                                        "delta": None if paper is None or partial else ours - paper}
            if not partial:
                per_row_scores[(row_name, cell.dataset.label, metric)] = {str(r["id"]): s
                                                                          for r, s in zip(records, scores)}
    comparisons = _comparisons(grid, rows, per_row_scores, resamples, seed)
    return {"grid": grid.name, "title": grid.title, "paper": grid.paper, "scale": grid.scale,
            "ci": f"95% {stats.CI_METHOD_NAME} ({resamples} resamples, seed {seed})", "test": stats.PAIRED_TEST_NAME,
            "columns": [{"label": d.label, "dataset": d.name, "split": d.split, "metrics": list(d.metrics)}
                        for d in grid.datasets],
            "rows": list(rows.values()), "comparisons": comparisons, "run_differences": measured}


def _whole_split(cell, config: dict, summary: dict, n_done: int) -> int:
    """The questions a cell asks when the grid names no n, by `runner.cell_state`'s rule: a run made over the
    whole split asked what its summary expected; a run made at an -n of its own is partial against the split
    (sized on disk; its own count where the split cannot be sized)."""
    from ragzoo import data
    from ragzoo.errors import RagzooError

    if config.get("n") is None:
        return int(summary.get("n_expected") or n_done)
    try:
        return data.split_size(cell.dataset.name, cell.dataset.split)
    except (RagzooError, OSError):
        return int(config.get("n") or n_done)


def _compile_stages(artifact: Path) -> list[dict]:
    """The `compile_stages` records of a cell's compiled program (none when it was not compiled)."""
    try:
        manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [stage for stage in manifest.get("compile_stages") or [] if isinstance(stage, dict)]


def _comparisons(grid: Grid, rows: dict, scores: dict, resamples: int, seed: int) -> list[dict]:
    main_label = grid.main
    labels = [m.label for m in grid.methods]
    if main_label in [m.id for m in grid.methods]:
        main_label = next(m.label for m in grid.methods if m.id == main_label)
    main_label = main_label or labels[-1]
    result = []
    main_rows = [name for name, row in rows.items() if row["label"] == main_label]
    for main_row in main_rows:
        suffix = main_row[len(main_label):]
        for name, row in rows.items():
            if name == main_row or not name.endswith(suffix) or row["label"] == main_label:
                continue
            for dataset in grid.datasets:
                for metric in dataset.metrics[:1] or []:
                    a = scores.get((main_row, dataset.label, metric))
                    b = scores.get((name, dataset.label, metric))
                    if not a or not b:
                        continue
                    shared = sorted(set(a) & set(b))
                    entry = {"a": main_row, "b": name, "dataset": dataset.label, "metric": metric,
                             "shared": len(shared), "n_a": len(a), "n_b": len(b)}
                    if not shared:
                        entry["refused"] = "no shared question"
                    else:
                        comparison = stats.compare([a[q] for q in shared], [b[q] for q in shared],
                                                   resamples=resamples, seed=seed)
                        d = comparison.difference
                        entry.update(difference=d.mean * grid.scale, low=d.low * grid.scale, high=d.high * grid.scale,
                                     p_value=comparison.p_value, test=comparison.test,
                                     a_better=comparison.a_better, b_better=comparison.b_better)
                    result.append(entry)
    tested = [entry for entry in result if "p_value" in entry]
    for entry, adjusted in zip(tested, stats.holm([entry["p_value"] for entry in tested])):
        entry["p_holm"] = adjusted
    return result


def grid_of_folder(out: str | Path) -> Grid:
    """The grid a sweep ran in `out`: the spec its grid file names, with the LMs, n, seed and optimizers the
    grid file records (the sweep's command-line overrides) and only the methods and datasets of its cells.
    ConfigError when the spec is gone or no longer yields the recorded cells (edited since)."""
    from ragzoo.errors import ConfigError
    from ragzoo.grid.runner import GRID_FILE
    from ragzoo.grid.spec import LMEntry, load_grid, search_corpus

    path = Path(out) / GRID_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        cells = record["cells"]
        keys = {cell["key"] for cell in cells}
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{path} is corrupt; rerun the sweep into this folder") from None
    source = record.get("source")
    if not source or not Path(source).is_file():
        raise ConfigError(f"{out}: the grid file {source or '?'} it was swept from is gone; the table saved by the "
                          f"sweep is {Path(out) / 'results.md'}")
    grid = load_grid(source)
    used = (record.get("paper") or {}).get("corpus_used") if isinstance(record.get("paper"), dict) else None
    if isinstance(used, dict) and used.get("fetched") and used.get("paper_corpus"):
        search_corpus(grid, used["paper_corpus"])  # `reproduce` searched the fetched paper corpus, not the sample
        grid.paper = {**grid.paper, **record["paper"]}
    methods = {cell.get("method") for cell in cells}
    datasets = {(cell.get("dataset"), cell.get("split")) for cell in cells}
    grid.methods = [m for m in grid.methods if m.id in methods]
    grid.datasets = [d for d in grid.datasets if (d.name, d.split) in datasets]
    grid.n, grid.seed = record.get("n"), int(record.get("seed") or 0)
    grid.optimizers = list(record.get("optimizers") or grid.optimizers)
    labelled = {(lm.spec, lm.api_base): lm for lm in grid.lms}
    recorded = [(lm.get("spec"), lm.get("api_base")) for lm in record.get("lms") or []]
    # a sweep's --lm override drops the spec's LM labels (which name the cells): try both
    for lms in ([labelled.get(pair) or LMEntry(*pair) for pair in recorded], [LMEntry(*pair) for pair in recorded]):
        grid.lms = lms
        if {cell.key for cell in grid.cells()} == keys:
            return grid
    raise ConfigError(f"{out}: its grid file {source} was edited since the sweep (other cells); the table saved by "
                      f"the sweep is {Path(out) / 'results.md'}")


def _num(value, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _entry_texts(entry: dict, metric: str, digits: int) -> list[str]:
    """[ours [95% CI], paper, delta] for one dataset x metric of a row."""
    paper = (entry.get("paper") or {}).get(metric)
    if "metrics" not in entry:
        status = entry.get("status", "–")
        if status.startswith("not yet runnable"):
            status = "not yet runnable"
        return [status, _num(paper, digits), "–"]
    if entry.get("dry_run"):
        return ["n/a (dry-run)", _num(paper, digits), "–"]
    m = entry["metrics"].get(metric)
    if m is None:
        return ["missing metric", _num(paper, digits), "–"]
    ours = f"{m['ours']:.{digits}f} [{m['low']:.{digits}f}, {m['high']:.{digits}f}]"
    if entry["status"] != "done":
        ours += f" ({entry['status']})"
    return [ours, _num(m["paper"], digits), "–" if m["delta"] is None else f"{m['delta']:+.{digits}f}"]


def to_markdown(table: dict) -> str:
    digits = 1 if table["scale"] >= 100 else 3
    header = ["method"]
    keys = []
    for column in table["columns"]:
        for metric in column["metrics"] or ["(default)"]:
            header += [f"{column['label']} {metric}: ours [95% CI]", "paper", "Δ"]
            keys.append((column["label"], metric))
    header += ["n done/asked", "failures", "LM calls/q", "spent $/q", "uncached $/q"]
    lines = [f"# {table['title']}", ""]
    paper = table.get("paper") or {}
    if paper:
        lines += [f"Paper: {paper.get('citation', '?')}, {paper.get('table', '?')}"
                  f"{', page ' + str(paper['page']) if paper.get('page') else ''}. Paper's setting: "
                  f"{paper.get('setting', '?')}", ""]
        for difference in paper.get("differences", []):
            lines.append(f"- differs: {difference}")
        lines.append("")
    if table.get("run_differences"):  # what this run's compiles changed (e.g. FILCO's filter measure)
        lines += [f"- differs in this run: {difference}" for difference in table["run_differences"]] + [""]
    lines += [f"Per dataset and metric: ours [{table['ci']}], the paper's number, and Δ = ours − paper, on the "
              f"paper's scale.", "",
              "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table["rows"]:
        cells = row["cells"]
        texts = [text for label, metric in keys for text in _entry_texts(cells.get(label, {}), metric, digits)]
        entries = [e for e in cells.values() if "n" in e]
        done = sum(e["n"] for e in entries)
        asked = sum(e["n_asked"] for e in entries)
        calls = sum(e["lm_calls_per_question"] * e["n"] for e in entries) / max(1, done)
        cost = sum(e["cost_per_question"] * e["n"] for e in entries) / max(1, done)
        uncached = sum(e.get("cost_per_question_uncached", e["cost_per_question"]) * e["n"]
                       for e in entries) / max(1, done)
        knobs = " ".join(f"{k}={v}" for k, v in sorted(row["knobs"].items()))
        name = f"{row['row']}{' (' + knobs + ')' if knobs else ''}"
        lines.append("| " + " | ".join([name, *texts, f"{done}/{asked}" if entries else "–",
                                         str(sum(e['failures'] for e in entries)) if entries else "–",
                                         f"{calls:.2f}" if entries else "–", f"{cost:.5f}" if entries else "–",
                                         f"{uncached:.5f}" if entries else "–"]) + " |")
    lines += ["", "Failed questions (a timeout, an LM or retriever error) are scored 0 in every mean. spent $/q: what "
                  "the calls cost (a call served from DSPy's cache costs nothing); uncached $/q: the same calls as if "
                  "none had been served from the cache, the figure to compare rows by."]
    if table["comparisons"]:
        tested = sum(1 for c in table["comparisons"] if "p_value" in c)
        lines += ["", f"Paired comparisons ({table['test']}; difference with its 95% paired bootstrap CI), "
                      f"on the questions both runs answered; p (Holm): {stats.HOLM_NAME} over the {tested} "
                      f"comparisons of this table (family-wise error):", "",
                  "| a | b | dataset | metric | shared questions | a − b [95% CI] | p | p (Holm) | a better / b better |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in table["comparisons"]:
            if "refused" in c:
                lines.append(f"| {c['a']} | {c['b']} | {c['dataset']} | {c['metric']} | 0 | refused: "
                             f"{c['refused']} | – | – | – |")
                continue
            holm = stats.format_p(c["p_holm"]) if "p_holm" in c else "–"
            lines.append(f"| {c['a']} | {c['b']} | {c['dataset']} | {c['metric']} | {c['shared']} "
                         f"(of {c['n_a']}/{c['n_b']}) | {c['difference']:+.{digits}f} [{c['low']:+.{digits}f}, "
                         f"{c['high']:+.{digits}f}] | {stats.format_p(c['p_value'])} | {holm} | "
                         f"{c['a_better']} / {c['b_better']} |")
    return "\n".join(lines) + "\n"


def to_csv(table: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["method", "knobs", "optimizer", "lm", "dataset", "split", "metric", "ours", "ci_low", "ci_high",
                     "paper", "delta", "n", "n_asked", "failures", "lm_calls_per_question", "cost_per_question",
                     "cost_per_question_uncached", "status"])
    for row in table["rows"]:
        for label, entry in row["cells"].items():
            metrics = entry.get("metrics") or {}
            column = next(c for c in table["columns"] if c["label"] == label)
            for metric in column["metrics"] or [None]:
                m = metrics.get(metric, {})
                writer.writerow([row["row"], json.dumps(entry.get("knobs", {}), sort_keys=True), row["optimizer"],
                                 row["lm"], label, entry.get("split"), metric, m.get("ours"), m.get("low"),
                                 m.get("high"), (entry.get("paper") or {}).get(metric), m.get("delta"),
                                 entry.get("n"), entry.get("n_asked"), entry.get("failures"),
                                 entry.get("lm_calls_per_question"), entry.get("cost_per_question"),
                                 entry.get("cost_per_question_uncached"),
                                 "dry-run" if entry.get("dry_run") else entry.get("status")])
    return buffer.getvalue()


def write(table: dict, out: str | Path) -> dict[str, Path]:
    from ragzoo.files import atomic_write_bytes, atomic_write_json

    out = Path(out)
    paths = {"md": out / "results.md", "csv": out / "results.csv", "json": out / "results.json"}
    atomic_write_bytes(paths["md"], to_markdown(table).encode("utf-8"))
    atomic_write_bytes(paths["csv"], to_csv(table).encode("utf-8"))
    atomic_write_json(paths["json"], table)
    return paths


def plot(table: dict, path: str | Path, metric: str | None = None) -> Path:
    """Metric vs LM calls per question, one panel per dataset, one point per row with its CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragzoo.errors import ConfigError
    from ragzoo.ownership import PLOT_MARK, check_file, plot_metadata

    check_file(path, PLOT_MARK, "plot", flag="--plot")
    columns = [c for c in table["columns"] if c["metrics"]]
    points = []
    for column in columns:
        name = metric or column["metrics"][0]
        for row in table["rows"]:
            entry = row["cells"].get(column["label"], {})
            m = (entry.get("metrics") or {}).get(name)
            if m:
                points.append((column["label"], name, row["row"], entry["lm_calls_per_question"], m))
    if not points:
        raise ConfigError("no cell has a metric to plot (dry-run cells have none)")
    panels = sorted({p[0] for p in points}, key=[c["label"] for c in columns].index)
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, label in zip(axes[0], panels):
        for _, name, row, calls, m in [p for p in points if p[0] == label]:
            ax.errorbar(calls, m["ours"], yerr=[[m["ours"] - m["low"]], [m["high"] - m["ours"]]], fmt="o",
                        capsize=3, label=row)
        ax.set_title(label)
        ax.set_xlabel("LM calls per question")
        ax.set_ylabel(f"{name} (95% CI)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata=plot_metadata(path))
    plt.close(figure)
    return Path(path)
