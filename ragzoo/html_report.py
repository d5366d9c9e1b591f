"""`ragzoo report RUNS_OR_GRID --html out.html`: one self-contained page (no network, no server: plotly.js is
inlined, the data is a JSON block in the page) that a person can open from disk or attach to a supplement.

What it shows, all from the run directories:
- the table: a grid's "ours [95% CI] | paper | Δ" (`ragzoo.grid.table`), or the runs' metrics with CIs;
- a cost-vs-accuracy plot, one panel per cost (LM calls, tokens, dollars per question), the Pareto front of
  the runs drawn through the points no other run beats on both axes (dry runs have no accuracy: their panel
  shows cost only);
- attribution bars per method from each record's `attribution` ("not computed" when a record has none:
  older runs);
- stage diagnostics from each record's `stages` (generic: per stage, how many records have it, its calls,
  and per field a list's mean length, a flag's rate, a label's counts, a number's mean), and LM calls per
  predictor from `lm_trace` (every run has it);
- the per-question table (one row per question, one cell per method) with filters: method, flip against a
  second method, attribution class; a click on a cell opens the drill-down: prediction vs gold, each LM call
  (its prompt and reply when the record kept them), the passages of each stage with gold ones marked.

A question counts as right for flips when its first metric scores >= 0.5 (EM is 0/1; F1 partial). Gold
passages are marked from what a record carries: `supporting_titles`/`gold_titles` (titles), `gold_pids`,
or a passage's own `gold: true`.

This module takes what `ragzoo.commands.report` loaded (it owns reading runs), so the two do not import each
other.
"""

from __future__ import annotations

import json
from pathlib import Path

GENERATOR = "ragzoo report --html"
ATTRIBUTION_CLASSES = ("correct", "retrieval_miss", "filtered_out", "reader_miss", "abstained", "failed")
NOT_COMPUTED = "not computed"
DRY_RUN = "n/a (dry-run)"  # a placeholder answer has no cause to attribute

COSTS = (("lm_calls_per_question", "LM calls / question"), ("tokens_per_question", "tokens / question"),
         ("cost_per_question", "$ / question"))
_TEMPLATE = "report.html.j2"


def check_target(path: str) -> Path:
    """The page's path, refused (ConfigError, one line) when its folder is missing or when a file is there that
    this command did not write: a user's file is never overwritten."""
    from ragzoo.errors import ConfigError

    try:
        import jinja2  # noqa: F401
        import plotly  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"report --html needs the [html] extra ({error.name} is not installed): pip install "
                          f"'ragzoo[html]'") from None
    from ragzoo.ownership import check_file

    return check_file(path, f'content="{GENERATOR}"', "HTML report", flag="--html")


def grid_table(built: dict) -> dict:
    """A grid's results table (`ragzoo.grid.table.build`) as header + rows of texts, as `to_markdown` has it."""
    from ragzoo.grid.table import _entry_texts

    digits = 1 if built["scale"] >= 100 else 3
    header, keys = ["method"], []
    for column in built["columns"]:
        for metric in column["metrics"] or ["(default)"]:
            header += [f"{column['label']} {metric}: ours [95% CI]", "paper", "Δ"]
            keys.append((column["label"], metric))
    header += ["n done/asked", "failures", "LM calls/q", "$/q"]
    lines = []
    for row in built["rows"]:
        entries = [e for e in row["cells"].values() if "n" in e]
        done = sum(e["n"] for e in entries)
        calls = sum(e["lm_calls_per_question"] * e["n"] for e in entries) / max(1, done)
        cost = sum(e["cost_per_question"] * e["n"] for e in entries) / max(1, done)
        knobs = " ".join(f"{k}={v}" for k, v in sorted(row["knobs"].items()))
        lines.append([f"{row['row']}{' (' + knobs + ')' if knobs else ''}",
                      *[text for label, metric in keys for text in _entry_texts(row["cells"].get(label, {}), metric,
                                                                                digits)],
                      f"{done}/{sum(e['n_asked'] for e in entries)}" if entries else "–",
                      str(sum(e["failures"] for e in entries)) if entries else "–",
                      f"{calls:.2f}" if entries else "–", f"{cost:.5f}" if entries else "–"])
    paper = built.get("paper") or {}
    notes = [f"Paper: {paper.get('citation', '?')}, {paper.get('table', '?')}. Paper's setting: "
             f"{paper.get('setting', '?')}"] if paper else []
    notes += [f"differs: {d}" for d in paper.get("differences", [])]
    notes += [f"differs in this run: {d}" for d in built.get("run_differences") or []]
    notes.append(f"ours: mean with its {built['ci']}; Δ = ours − paper, on the paper's scale")
    return {"title": built.get("title") or built.get("grid"), "header": header, "rows": lines, "notes": notes}


def runs_table(table: list[dict]) -> dict:
    """`ragzoo.commands.report.rows` (with CIs) as header + rows of texts; runs carry no paper numbers."""
    names: list[str] = []
    for row in table:
        names += [name for name in row["metrics"] if name not in names]

    def value(row: dict, name: str) -> str:
        if row.get("dry_run"):
            return "n/a (dry-run)"
        if name not in row["metrics"]:
            return "–"
        text = f"{row['metrics'][name]:.3f}"
        if name in row.get("ci", {}):
            low, high = row["ci"][name]
            text += f" [{low:.3f}, {high:.3f}]"
        return text

    header = ["method", "dataset", "n", *[f"{n} [95% CI]" for n in names], "paper", "LM calls/q", "tokens/q", "$",
              "failures", "status"]
    lines = [[row["method"], f"{row['dataset']}{'/' + row['split'] if row.get('split') else ''}", str(row["n"]),
              *[value(row, name) for name in names], "–", f"{row['lm_calls_per_question']:.2f}",
              f"{row['tokens_per_question']:.0f}", f"{row['cost']:.4f}", str(row["failures"]), row["status"]]
             for row in table]
    notes = ["[low, high]: 95% percentile bootstrap CI over questions (seeded); paper: runs name no paper (a grid "
             "folder's page puts the paper's numbers beside ours)"]
    if any(row.get("dry_run") for row in table):
        notes.append("dry-run: placeholder answers from no LM, so no accuracy figure; calls and tokens are real")
    return {"title": "ragzoo runs", "header": header, "rows": lines, "notes": notes}


def _attribution(record: dict) -> str:
    value = record.get("attribution")
    return value if isinstance(value, str) and value else NOT_COMPUTED


def _gold_marks(record: dict) -> tuple[set[str], set[str]]:
    titles = record.get("supporting_titles") or record.get("gold_titles") or []
    pids = record.get("gold_pids") or []
    return ({str(t) for t in titles if t is not None}, {str(p) for p in pids if p is not None})


def _detail(record: dict) -> dict:
    """What the drill-down shows of one record: prediction vs gold, LM calls, passages (gold marked), stages."""
    titles, pids = _gold_marks(record)
    title_of = {}
    passages = []
    for passage in record.get("passages") or []:
        passage = passage if isinstance(passage, dict) else {"pid": None, "title": str(passage)}
        pid, title = passage.get("pid"), passage.get("title")
        if pid is not None:
            title_of[str(pid)] = title
        passages.append({"pid": pid, "title": title,
                         "gold": bool(passage.get("gold")) or str(title) in titles or str(pid) in pids})
    stages = []
    for name, stage in (record.get("stages") or {}).items() if isinstance(record.get("stages"), dict) else []:
        fields = []
        for key, value in (stage.items() if isinstance(stage, dict) else [("value", stage)]):
            if key in ("passages", "kept") and isinstance(value, list):
                value = [{"pid": p, "title": title_of.get(str(p)),
                          "gold": str(p) in pids or str(title_of.get(str(p))) in titles} for p in value]
                fields.append({"name": key, "passages": value})
            else:
                fields.append({"name": key, "value": value})
        stages.append({"name": str(name), "fields": fields})
    return {"id": record.get("id"), "question": record.get("question"), "gold": record.get("gold"),
            "prediction": record.get("prediction"), "metrics": record.get("metrics") or {},
            "gold_passages": sorted(titles | pids),
            "attribution": _attribution(record), "error": record.get("error"), "passages": passages,
            "stages": stages, "calls": [call for call in record.get("lm_trace") or [] if isinstance(call, dict)],
            "degraded": record.get("degraded") or [], "latency": record.get("latency")}


def _describe(values: list) -> str:
    """One stage field over the records that have it: a list's mean length, a flag's rate, a label's counts,
    a number's mean."""
    present = [v for v in values if v is not None]
    if not present:
        return "–"
    if all(isinstance(v, bool) for v in present):
        return f"true {sum(present) / len(present):.0%}"
    if all(isinstance(v, (int, float)) for v in present):
        return f"mean {sum(present) / len(present):.2f}"
    if all(isinstance(v, (list, tuple)) for v in present):
        return f"mean length {sum(len(v) for v in present) / len(present):.2f}"
    if all(isinstance(v, str) for v in present):
        counts: dict[str, int] = {}
        for v in present:
            counts[v[:40]] = counts.get(v[:40], 0) + 1
        top = sorted(counts.items(), key=lambda item: -item[1])[:5]
        return ", ".join(f"{k}: {c}" for k, c in top) + (" …" if len(counts) > 5 else "")
    return f"{len(present)} values"


def _measure_text(stats: dict) -> str:
    shown = []
    for key, value in stats.items():
        if value is None or key in ("records", "calls"):  # both have their own columns
            continue
        if isinstance(value, dict):
            value = " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.2f}"
        shown.append(f"{key.replace('_', ' ')} {value}")
    return "; ".join(shown) or "–"


def _attribution_line(label: str, records: list[dict]) -> str | None:
    """The method's classes as counts and shares with their 95% Wilson CIs (`ragzoo.diagnostics`), when any
    record has a class."""
    try:
        from ragzoo.diagnostics import attribution_summary, format_attribution
    except ImportError:
        return None
    summary = attribution_summary(records)
    return format_attribution(label, summary) if summary["not_computed"] < summary["n"] else None


def _stage_rows(label: str, records: list[dict], *, answers: bool = True) -> list[list[str]]:
    """Per stage: records with it, mean calls, the papers' measures (`ragzoo.diagnostics.stage_summary`: gold
    recall, filter precision/recall, %Unk, vote agreement, gate rates, depth) and every field described."""
    try:
        from ragzoo.diagnostics import stage_summary
    except ImportError:  # a ragzoo without stage diagnostics: the fields alone
        measures: dict = {}
    else:
        measures = stage_summary(records, answers=answers)  # a dry run's answers are placeholders
    by_stage: dict[str, list[dict]] = {}
    for record in records:
        stages = record.get("stages")
        for name, stage in (stages.items() if isinstance(stages, dict) else []):
            by_stage.setdefault(str(name), []).append(stage if isinstance(stage, dict) else {"value": stage})
    out = []
    for name, stages in by_stage.items():
        fields: list[str] = []
        for stage in stages:
            fields += [key for key in stage if key != "calls" and key not in fields]
        calls = [s.get("calls") for s in stages if isinstance(s.get("calls"), (int, float))]
        out.append([label, name, f"{len(stages)}/{len(records)}",
                    f"{sum(calls) / len(calls):.2f}" if calls else "–", _measure_text(measures.get(name) or {}),
                    "; ".join(f"{key}: {_describe([s.get(key) for s in stages])}" for key in fields) or "–"])
    return out


def _predictor_rows(label: str, records: list[dict]) -> list[list[str]]:
    counts: dict[str, list[int]] = {}
    for record in records:
        for call in record.get("lm_trace") or []:
            if isinstance(call, dict):
                entry = counts.setdefault(str(call.get("predictor") or "?"), [0, 0])
                entry[0] += 1
                entry[1] += int(call.get("prompt_tokens") or 0) + int(call.get("completion_tokens") or 0)
    n = max(1, len(records))
    return [[label, name, f"{calls / n:.2f}", f"{tokens / max(1, calls):.0f}"]
            for name, (calls, tokens) in counts.items()]


def _figures(methods: list[dict], metric: str | None) -> dict[str, dict]:
    """The cost-vs-accuracy plot and the attribution bars as plotly figure JSON, by the id of the div the page
    draws each in (after its table is usable: plotly.js is the page's last script)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    scored = [m for m in methods if not m["dry_run"] and metric in m["means"]]
    cost = make_subplots(rows=1, cols=len(COSTS), subplot_titles=[title for _, title in COSTS],
                         horizontal_spacing=0.06)
    for column, (key, _) in enumerate(COSTS, 1):
        if scored:
            for index, m in enumerate(scored):
                mean, (low, high) = m["means"][metric], m["cis"][metric]
                cost.add_trace(go.Scatter(x=[m[key]], y=[mean], mode="markers", name=m["label"],
                                          legendgroup=m["label"], showlegend=column == 1,
                                          marker={"size": 10, "color": _color(index)},
                                          error_y={"type": "data", "symmetric": False, "array": [high - mean],
                                                   "arrayminus": [mean - low]},
                                          hovertemplate=f"{m['label']}<br>%{{x:.4g}}<br>{metric} %{{y:.3f}}"
                                                        f"<extra></extra>"), row=1, col=column)
                paper = m["paper"].get(metric)
                if isinstance(paper, (int, float)):  # the paper's number, at our cost (papers rarely give theirs)
                    cost.add_trace(go.Scatter(x=[m[key]], y=[paper], mode="markers", name=f"{m['label']}: paper",
                                              legendgroup=m["label"] + " paper", showlegend=column == 1,
                                              marker={"size": 11, "color": _color(index), "symbol": "x-thin-open",
                                                      "line": {"width": 2, "color": _color(index)}},
                                              hovertemplate=f"{m['label']}: paper's {metric} %{{y:.3f}}"
                                                            f"<extra></extra>"), row=1, col=column)
            front = _pareto([(m[key], m["means"][metric]) for m in scored])
            cost.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines",
                                      line={"dash": "dot", "color": "#888"}, name="Pareto front",
                                      legendgroup="front", showlegend=column == 1, hoverinfo="skip"),
                           row=1, col=column)
        else:  # dry runs: no accuracy, so each cost alone
            cost.add_trace(go.Bar(x=[m["label"] for m in methods], y=[m[key] for m in methods],
                                  marker={"color": [_color(i) for i in range(len(methods))]}, showlegend=False),
                           row=1, col=column)
    cost.update_yaxes(title_text=f"{metric} (mean, 95% CI)" if scored else "per question", row=1, col=1)
    cost.update_layout(height=400, margin={"t": 60, "b": 40, "l": 60, "r": 20},
                       title={"text": "" if scored else "dry runs: no accuracy (placeholder answers); cost only"
                              if all(m["dry_run"] for m in methods) else "no answer metric every run has: cost only",
                              "font": {"size": 12}})
    bars = go.Figure()
    for klass in (*ATTRIBUTION_CLASSES, NOT_COMPUTED, DRY_RUN):
        counts = [m["attribution"].get(klass, 0) for m in methods]
        if any(counts):
            bars.add_trace(go.Bar(y=[m["label"] for m in methods], x=counts, name=klass, orientation="h",
                                  marker={"color": _CLASS_COLORS.get(klass, "#bbb")},
                                  customdata=[[c / max(1, m["n"])] for c, m in zip(counts, methods)],
                                  hovertemplate=f"{klass}: %{{x}} (%{{customdata[0]:.0%}})<extra></extra>"))
    bars.update_layout(barmode="stack", height=120 + 28 * len(methods), margin={"t": 20, "b": 40, "l": 160, "r": 20},
                       xaxis_title="questions", yaxis={"autorange": "reversed"})
    return {"plot-cost": json.loads(cost.to_json()), "plot-attribution": json.loads(bars.to_json())}


_CLASS_COLORS = {"correct": "#2e7d32", "retrieval_miss": "#c62828", "filtered_out": "#ef6c00",
                 "reader_miss": "#6a1b9a", "abstained": "#757575", "failed": "#212121", NOT_COMPUTED: "#cfd8dc",
                 DRY_RUN: "#eceff1"}


def _color(index: int) -> str:
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    return palette[index % len(palette)]


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (less cost, more accuracy), by cost."""
    front, best = [], float("-inf")
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front


_PLOTLY_JS_SLOT = "<ragzoo-plotly-js>"  # a "<" no text of a record reaches the page with (escaped)


def render(table: dict, runs: list[dict], *, metric: str | None = None, seed: int = 0) -> str:
    """The page. `runs`: one dict per run as `ragzoo.commands.report` loaded it, with its `label`, `dir`,
    `dry_run`, `metrics` (names) and `keyed` (records by question key)."""
    import jinja2
    import plotly.offline

    from ragzoo import stats
    from ragzoo.diagnostics import is_right
    from ragzoo.secrets import redact

    names = [name for name in (runs[0]["metrics"] if runs else []) if all(name in r["metrics"] for r in runs)]
    metric = metric if metric in names else (names[0] if names else None)
    methods, stage_rows, predictor_rows, attribution_lines = [], [], [], []
    runs = [{**run, "keyed": {key: {**record, "attribution": DRY_RUN} for key, record in run["keyed"].items()}}
            if run["dry_run"] else run for run in runs]
    for run in runs:
        records = [run["keyed"][key] for key in sorted(run["keyed"])]
        n = len(records)
        means, cis = dict(run.get("means") or {}), dict(run.get("cis") or {})  # the table's, when it has them
        values = [float((r.get("metrics") or {}).get(metric) or 0.0) for r in records]
        if metric and metric not in cis and values and not run["dry_run"]:
            interval = stats.bootstrap_ci(values, seed=seed)
            means[metric], cis[metric] = interval.mean, [interval.low, interval.high]
        attribution: dict[str, int] = {}
        for record in records:
            attribution[_attribution(record)] = attribution.get(_attribution(record), 0) + 1
        tokens = sum((r.get("prompt_tokens") or 0) + (r.get("completion_tokens") or 0) for r in records)
        usage = run.get("usage") or {  # the table's (retried and late calls counted), else the records'
            "lm_calls_per_question": sum(r.get("lm_calls") or 0 for r in records) / max(1, n),
            "tokens_per_question": tokens / max(1, n),
            "cost_per_question": sum(float(r.get("cost") or 0) for r in records) / max(1, n)}
        methods.append({"label": run["label"], "dir": run["dir"], "n": n, "dry_run": run["dry_run"],
                        "paper": run.get("paper") or {},
                        "means": means, "cis": cis, "attribution": attribution, **usage})
        stage_rows += _stage_rows(run["label"], records, answers=not run["dry_run"])
        attribution_lines.append(_attribution_line(run["label"], records))
        predictor_rows += _predictor_rows(run["label"], records)
    keys = list(dict.fromkeys(key for run in runs for key in run["keyed"]))  # the data's order, as evaluated
    questions, details = [], []
    for key in keys:
        found = [run["keyed"].get(key) for run in runs]
        first = next(r for r in found if r is not None)
        # a dry run's answers are placeholders: neither right nor wrong (null)
        questions.append({"id": str(first.get("id")), "q": str(first.get("question") or "")[:200],
                          "gold": first.get("gold"),
                          "r": [None if r is None else [None if run["dry_run"] else 1 if is_right(r, metric) else 0,
                                                        _attribution(r), bool(r.get("error"))]
                                for r, run in zip(found, runs)]})
        details.append([None if r is None else _detail(r) for r in found])
    data = {"metric": metric, "methods": [{"label": m["label"], "dir": m["dir"], "dry_run": m["dry_run"]}
                                          for m in methods], "questions": questions}
    environment = jinja2.Environment(loader=jinja2.PackageLoader("ragzoo", "templates"),
                                     autoescape=jinja2.select_autoescape(["html", "j2"]))

    def block(value) -> str:
        """A JSON script block's text, every `<` written as the JSON escape \\u003c: `</script>` would end the
        element early, and `<!--` then `<script` (a question about HTML) would keep the page's own `</script>`
        from ending it, swallowing the page's code."""
        return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")).replace("<", "\\u003c")

    page = environment.get_template(_TEMPLATE).render(
        generator=GENERATOR, table=table, methods=methods, metric=metric, figures=block(_figures(methods, metric)),
        stage_rows=stage_rows, predictor_rows=predictor_rows,
        attribution_lines=[line for line in attribution_lines if line],
        plotly_js=_PLOTLY_JS_SLOT, payload=block(data), n_questions=len(keys),
        details=[(f"{q}-{m}", block(detail)) for q, row in enumerate(details) for m, detail in enumerate(row)
                 if detail is not None],
        classes=[*ATTRIBUTION_CLASSES, NOT_COMPUTED, DRY_RUN], has_attribution=any(
            set(m["attribution"]) - {NOT_COMPUTED, DRY_RUN} for m in methods), dry=any(m["dry_run"] for m in methods))
    # secrets redacted over the whole page, in one pass: every table cell, note and stage line shows text the LM
    # or the data wrote (the records were scrubbed when written; this is the second line of defence); plotly's
    # own code goes in after, never rewritten by a pattern that finds key shapes
    return redact(page).replace(_PLOTLY_JS_SLOT, plotly.offline.get_plotlyjs(), 1)


def write(path: str, table: dict, runs: list[dict], *, metric: str | None = None, seed: int = 0) -> Path:
    from ragzoo.files import atomic_write_text

    target = check_target(path)
    atomic_write_text(target, render(table, runs, metric=metric, seed=seed))
    return target
