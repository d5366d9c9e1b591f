"""`ragzoo report RUN [RUN ...]`: a table of runs that says what it compares.

- The metrics table: method (with the knobs that tell same-method runs apart), n done, every metric (mean with
  a seeded 95% bootstrap CI over questions with `--ci`), LM calls, tokens, cost per question, failures;
  partial runs (n done < n asked, or killed before their summary) and mostly-failed runs are marked.
- The runs table: dataset/split, LM with its endpoint (no credentials) and adapter, optimizer, n done / n
  asked, failures, mean latency, status. Tokens and cost are shown twice, labelled: spent (cache hits are
  free) and as if uncached (what the same calls cost without the cache).
- A question is its id AND a hash of its normalised text and gold answers (`question_key`): two data files
  that number different questions 0..n share no question. Runs that answered different questions are said
  to: how many questions all of them share; `--shared` puts every run's means on those shared questions only
  (refused when there is none). Runs that differ in LM, endpoint, adapter, retriever, metric definition or
  data get a warning line naming what differs.
- Bootstrap CIs resample the scores sorted by question, so the file's order (thread completion order) does
  not move them.
- A metric a run lacks is an error (`--metric` names the metrics; by default those every run has, and the
  ones left out are named).
- `--compare` (two runs): the paired test on the questions both were asked (the paired permutation test, with
  the difference and its paired bootstrap CI; a failure or an abstention scores 0 and is counted per side),
  and the questions where they disagree; refused when they share no question, or when questions with the
  same id differ (another data file).
- `ragzoo report GRID_OUT`: a grid folder (from `ragzoo sweep` / `reproduce`) prints the grid's results table
  rebuilt from its cells, and the cells' run directories.
- `--plot out.png`: the metric against LM calls per question, one labelled point per run with its CI.
"""

from __future__ import annotations

import argparse
import math

MOSTLY_FAILED = 0.5
NO_RETRIEVER = "none"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="run directories written by ragzoo evaluate (or grid cells)")
    parser.add_argument("--plot", help="write a PNG: metric vs LM calls per question, with 95%% CIs")
    parser.add_argument("--metric", help="comma-separated metrics to show (default: those every run has); a "
                                         "run without one is an error")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--ci", action="store_true", help="show each mean with its 95%% bootstrap CI")
    parser.add_argument("--shared", action="store_true",
                        help="compute every run's figures on the questions all runs answered")
    parser.add_argument("--compare", action="store_true",
                        help="two runs: paired test, difference with its CI, and the questions they disagree on")
    parser.add_argument("--show", type=int, default=20, help="disagreeing questions listed by --compare")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap / permutation seed")
    parser.add_argument("--html", metavar="OUT.html",
                        help="write one self-contained page (opens from disk): the table, cost-vs-accuracy plot, "
                             "attribution, stage diagnostics, per-question table with drill-down")


def _recorded_dry_run(lm) -> bool:
    """Whether a run's recorded LM was the dry-run LM: the flag `describe_lm` wrote, or (older runs that
    saved the spec string) the spec itself, read by `ragzoo.engines.is_dry_run_spec`."""
    from ragzoo.engines import is_dry_run_spec

    if isinstance(lm, dict):
        return bool(lm.get("dry_run"))
    return is_dry_run_spec(lm)


def _lm_name(lm) -> str:
    if isinstance(lm, dict):
        name = str(lm.get("model") or "?")
        if lm.get("priced_model"):
            name += f" (priced as {lm['priced_model']})"
        return name
    return str(lm or "?")


def _endpoint(config: dict) -> str:
    """Where the run's LM was served, as it may be shown: the --api-base URL without credentials, else the
    host the LM description kept, else the provider's own endpoint."""
    from ragzoo.secrets import strip_url

    lm = config.get("lm") if isinstance(config.get("lm"), dict) else {}
    url = config.get("api_base") or lm.get("api_base")
    return str(strip_url(url)) if url else "provider default"


def _setup(config: dict) -> dict[str, str]:
    """What must be the same for two runs' scores to differ only by method: LM, endpoint, adapter, retriever,
    metric definition, data."""
    import json

    lm = config.get("lm")
    preset = config.get("preset") or (config.get("defaults_used") or {}).get("preset")
    return {"LM": _lm_name(lm), "endpoint": _endpoint(config),
            "adapter": str(config.get("adapter") or "?") + (" (lenient)" if config.get("lenient") else ""),
            "retriever": str(config.get("retriever") or NO_RETRIEVER),
            "metric definition": f"preset {preset or 'none'}",
            "data": f"{config.get('dataset') or '?'}/{config.get('split') or '-'}"
                    + (f" file {config['data']}" if config.get("data") else "")
                    + (f" fields {json.dumps(config['field_map'], sort_keys=True)}" if config.get("field_map") else "")}


def setup_differences(setups: list[dict]) -> list[str]:
    """One text per aspect in which the runs' setups (`_setup`) differ, naming each run's value. A method
    without retrieval beside one with it differs by method, not by retriever: only retrievers are compared."""
    found = []
    for aspect in setups[0] if setups else {}:
        values = [setup[aspect] for setup in setups]
        if aspect == "retriever":
            values = [value for value in values if value != NO_RETRIEVER]
        if len(set(values)) > 1:
            found.append(f"{aspect} ({' vs '.join(values)})")
    return found


def question_key(record: dict) -> str:
    """The question a record answered: its id AND a hash of its normalised question text and gold answers, so
    that two data files numbering different questions 0..n are not taken for the same questions."""
    import hashlib
    import json

    from ragzoo.metrics.answer import normalize_answer

    gold = record.get("gold")
    golds = gold if isinstance(gold, list) else [gold]
    text = json.dumps([normalize_answer(str(record.get("question") or "")),
                       sorted(normalize_answer(str(g)) for g in golds if g is not None)])
    return f"{record['id']}#{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


def _optimizer(config: dict) -> str:
    program = config.get("program")
    if not program:  # a run of a program in memory (Python) records its optimizer itself (`runs._describe_run`)
        return str(config["optimizer"]) if config.get("optimizer") else "none (uncompiled)"
    try:
        from ragzoo.artifacts import read_manifest

        manifest = read_manifest(program)
        return str(manifest.get("optimizer") or "?")
    except Exception:  # noqa: BLE001 - the artifact may have moved since the run; the run is still reportable
        return "? (artifact not found)"


def _load(run_dir: str) -> dict:
    from pathlib import Path

    from ragzoo.runs import SUMMARY_FILE, load_run

    from ragzoo.errors import RunError

    try:
        loaded = load_run(run_dir)
    except (AttributeError, TypeError, KeyError, ValueError) as error:  # a value of the wrong type in a run file
        raise RunError(f"{run_dir} holds a corrupt run file ({type(error).__name__}: {str(error)[:120]}); rerun "
                       f"the evaluation or remove the run") from None
    config, summary, records = _checked_run(run_dir, *loaded)
    if not records:  # no figure of it would mean anything: not 0.000, which reads as a score
        raise RunError(f"{run_dir} has no finished question yet (its predictions.jsonl is empty), so there is "
                       f"nothing to report; run or resume the evaluation first")
    expected = summary.get("n_expected")  # derived data: a count, or nothing
    expected = expected if isinstance(expected, int) and not isinstance(expected, bool) and expected >= 0 else None
    n_asked = config.get("n") or expected or len(records)
    killed = not (Path(run_dir) / SUMMARY_FILE).is_file()
    return {"dir": str(run_dir), "config": config, "summary": summary, "records": records,
            "n_asked": int(n_asked), "killed": killed}


def _checked_run(run_dir: str, config, summary, records) -> tuple[dict, dict, list[dict]]:
    """The run's files as `report` reads them: a value of the wrong type (a hand-edited or damaged file) is a
    one-line 'corrupt run' error naming the file, never an internal error."""
    from pathlib import Path

    from ragzoo.errors import RunError
    from ragzoo.runs import CONFIG_FILE, PREDICTIONS_FILE, is_count, summarize

    def corrupt(name: str, what: str) -> RunError:
        return RunError(f"{Path(run_dir) / name} is corrupt ({what}); rerun the evaluation or remove the run")

    if not isinstance(config, dict):
        raise corrupt(CONFIG_FILE, "not a JSON object")
    metrics = config.get("metrics")
    if metrics is not None and (not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics)):
        raise corrupt(CONFIG_FILE, "'metrics' is not a list of metric names")
    n = config.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise corrupt(CONFIG_FILE, "'n' is not a count")
    if config.get("knobs") is not None and not isinstance(config["knobs"], dict):
        raise corrupt(CONFIG_FILE, "'knobs' is not an object")
    for key in ("method", "program", "split", "dataset"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise corrupt(CONFIG_FILE, f"{key!r} is not a string")
    if config.get("defaults_used") is not None and not isinstance(config["defaults_used"], dict):
        raise corrupt(CONFIG_FILE, "'defaults_used' is not an object")

    def count(value) -> bool:
        return value is None or is_count(value)

    for index, record in enumerate(records, 1):
        numbers = [record.get(key) for key in ("lm_calls", "prompt_tokens", "completion_tokens", "cost",
                                                "retrievals", "latency", "cached_calls", "cached_prompt_tokens",
                                                "cached_completion_tokens", "cached_cost")]
        scores = record.get("metrics", {})
        gold = record.get("gold")
        if not isinstance(record.get("id"), (str, int)) or isinstance(record.get("id"), bool) \
                or not isinstance(scores, dict) \
                or not all(count(v) for v in numbers) \
                or not all(count(v) and (v is None or v <= 1) for v in scores.values()) \
                or not (gold is None or isinstance(gold, str) or
                        (isinstance(gold, list) and all(isinstance(g, str) for g in gold))) \
                or not _stages_fit(record.get("stages")) or not _trace_fits(record.get("lm_trace")) \
                or not all(_ids(record.get(key)) for key in ("gold_pids", "supporting_titles")) \
                or not isinstance(record.get("error") or {}, dict) \
                or not isinstance(record.get("passages") or [], list):
            raise corrupt(PREDICTIONS_FILE, f"record {index} has a field of the wrong type or out of range (scores "
                                            f"are in [0, 1], usage figures finite and not negative)")
    if not isinstance(summary, dict) or not isinstance(summary.get("metrics", {}), dict) \
            or not isinstance(summary.get("usage", {}), dict):
        summary = summarize(records, list(metrics or ["em"]), total=n)  # derived data: recomputed from the records
    return config, summary, records


def _ids(value) -> bool:
    """A list of passage ids or titles (None: not recorded; an item None: a passage that had no id)."""
    return value is None or (isinstance(value, list) and all(
        item is None or (isinstance(item, (str, int)) and not isinstance(item, bool)) for item in value))


def _stages_fit(stages) -> bool:
    """A record's stage diagnostics as `ragzoo.diagnostics` writes them: an object of objects, their call counts
    numbers, their passage lists lists of ids."""
    if stages is None:
        return True
    if not isinstance(stages, dict) or not all(isinstance(stage, dict) for stage in stages.values()):
        return False
    for stage in stages.values():
        calls = stage.get("calls")
        if calls is not None and (isinstance(calls, bool) or not isinstance(calls, (int, float))
                                  or not math.isfinite(calls)):
            return False
        if not all(_ids(stage.get(key)) for key in ("passages", "kept", "gold")):
            return False
    return True


def _trace_fits(trace) -> bool:
    """A record's `lm_trace`: a list of objects whose token counts are numbers."""
    if trace is None:
        return True
    return isinstance(trace, list) and all(
        isinstance(call, dict) and all(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
                                       for value in (call.get("prompt_tokens"), call.get("completion_tokens")))
        for call in trace)


def _labels(runs: list[dict]) -> list[str]:
    """Method labels, with the knobs that differ between runs of the same method (two `rag` runs with k=3
    and k=5 read "rag k=3" and "rag k=5"), and the program's folder for compiled runs."""
    from pathlib import Path

    labels = []
    for run in runs:
        config = run["config"]
        method = config.get("method") or "?"
        knobs = config.get("knobs") or {}
        same = [other["config"].get("knobs") or {} for other in runs if (other["config"].get("method") or "?") == method]
        differing = sorted(k for k in knobs if any(other.get(k) != knobs[k] for other in same))
        label = method + "".join(f" {k}={knobs[k]}" for k in differing)
        if config.get("program"):
            label += f" ({Path(str(config['program'])).name})"
        labels.append(label)
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return [f"{label} [{Path(run['dir']).name}]" if counts[label] > 1 else label for label, run in zip(labels, runs)]


def _metric_names(runs: list[dict], requested: str | None) -> tuple[list[str], list[str]]:
    """(metrics to show, metrics left out because some run lacks them). A requested metric a run lacks is an
    error."""
    from ragzoo.errors import ConfigError

    have = [list(run["config"].get("metrics") or run["summary"].get("metrics", {}).keys()) for run in runs]
    if requested:
        names = [name.strip() for name in requested.split(",") if name.strip()]
        for run, metrics in zip(runs, have):
            missing = [name for name in names if name not in metrics]
            if missing:
                raise ConfigError(f"run {run['dir']} has no metric {', '.join(missing)} (it has "
                                  f"{', '.join(metrics) or 'none'}); report the metrics every run has")
        return names, []
    shared = [name for name in have[0] if all(name in metrics for metrics in have[1:])] if have else []
    left = sorted({name for metrics in have for name in metrics} - set(shared))
    return shared, left


def _keyed(run: dict) -> dict[str, dict]:
    """The run's records by question key (the last record of a key wins, as in a resumed run)."""
    if "keyed" not in run:
        run["keyed"] = {question_key(r): r for r in run["records"]}
    return run["keyed"]


def _keyed_in(run: dict, common: set[str] | None) -> dict[str, dict]:
    """The run's records by question key, in key order, of the `common` questions only (None: all)."""
    return {key: record for key, record in sorted(_keyed(run).items()) if common is None or key in common}


def _scores(run: dict, metric: str, keys: set[str] | None = None) -> dict[str, float]:
    """Scores by question key, in key order: the bootstrap then sees the same sequence whatever order the
    predictions were written in (threads finish in any order)."""
    keyed = _keyed(run)
    return {key: float((keyed[key].get("metrics") or {}).get(metric) or 0.0) for key in sorted(keyed)
            if keys is None or key in keys}


def shared_ids(runs: list[dict]) -> set[str]:
    """The question keys every run answered."""
    sets = [set(_keyed(run)) for run in runs]
    return set.intersection(*sets) if sets else set()


def _same_id_other_question(runs: list[dict]) -> int:
    """How many ids all runs answered hold a different question (text or gold) in some run."""
    ids = [{str(r["id"]) for r in run["records"]} for run in runs]
    common_ids = set.intersection(*ids) if ids else set()
    same = {key.rpartition("#")[0] for key in shared_ids(runs)}  # the id may hold "#" itself
    return len(common_ids - same)


def rows(run_dirs: list[str], *, metric: str | None = None, shared: bool = False, ci: bool = False,
         seed: int = 0) -> list[dict]:
    """One row per run. `shared`: figures over the questions every run answered."""
    from ragzoo import stats

    from ragzoo.errors import ConfigError
    from ragzoo.metrics.rates import is_unknown
    from ragzoo.runs import extra_usage, metric_failures, usage_totals

    runs = [_load(run_dir) for run_dir in run_dirs]
    names, left_out = _metric_names(runs, metric)
    common = shared_ids(runs) if shared else None
    if common is not None and not common:
        differing = _same_id_other_question(runs)
        raise ConfigError(f"--shared: the runs share no question ({'/'.join(str(len(r['records'])) for r in runs)} "
                          f"answered{f'; {differing} ids hold different questions' if differing else ''}), so "
                          f"there is nothing to compute; evaluate them on the same questions")
    table = []
    for run, label in zip(runs, _labels(runs)):
        config, summary = run["config"], run["summary"]
        setup = _setup(config)
        records = list(_keyed_in(run, common).values())
        n = len(records)
        failures = sum(1 for r in records if r.get("error"))
        abstained = sum(1 for r in records if not r.get("error") and is_unknown(r.get("prediction")))
        dry_run = _recorded_dry_run(config.get("lm"))
        metrics, intervals = {}, {}
        for name in names:
            values = list(_scores(run, name, common).values())
            metrics[name] = sum(values) / n if n else 0.0
            if ci and values and not dry_run:
                interval = stats.bootstrap_ci(values, seed=seed)
                intervals[name] = [interval.low, interval.high]
        # what was paid: the records, and what no record holds (`runs.extra_usage`): all of it, a retried
        # question not answered yet included (its spend had vanished); under --shared, the shared questions' only
        used = usage_totals(records, extra_usage(run["dir"], ids={r["id"] for r in records} if common is not None
                                                 else None))

        status = []
        partial = len(run["records"]) < run["n_asked"] or bool(summary.get("stopped"))
        if len(run["records"]) < run["n_asked"]:
            status.append(f"partial {len(run['records'])}/{run['n_asked']}")
        if run["killed"]:
            status.append("no summary: killed or still running")
        if summary.get("stopped"):
            status.append("stopped by budget")
        if n and failures / n > MOSTLY_FAILED:
            status.append(f"mostly failed {failures}/{n}")
        raised = metric_failures(records, names)
        status += [f"{name} raised on {count}" for name, count in raised.items()]
        table.append({
            "run": run["dir"], "method": label, "knobs": config.get("knobs") or {},
            "dataset": config.get("dataset") or config.get("data") or "?", "split": config.get("split"),
            "lm": _lm_name(config.get("lm")), "endpoint": setup["endpoint"], "adapter": setup["adapter"],
            "setup": setup,
            "optimizer": _optimizer(config), "n": n, "n_done": len(run["records"]),
            "n_asked": run["n_asked"], "dry_run": dry_run, "metrics": metrics, "ci": intervals,
            "lm_calls_per_question": used["lm_calls"] / n if n else 0.0,
            # spent: cache hits cost nothing; uncached: the same calls as if none had been served from the cache
            "tokens_per_question": (used["prompt_tokens"] + used["completion_tokens"]) / n if n else 0.0,
            "uncached_tokens_per_question": (used["prompt_tokens"] + used["completion_tokens"]
                                             + used["cached_prompt_tokens"] + used["cached_completion_tokens"]) / n
            if n else 0.0,
            "cached_calls": int(used["cached_calls"]),
            "cost": used["cost"],
            "cost_uncached": used["cost"] + used["cached_cost"],
            "latency_mean": sum(float(r.get("latency") or 0) for r in records) / n if n else 0.0,
            "failures": failures, "abstained": abstained, "complete": not partial,
            "mostly_failed": bool(n and failures / n > MOSTLY_FAILED),
            "status": "; ".join(status) or "complete", "left_out_metrics": left_out,
            "metric_failures": raised,
        })
    return table


def _aligned(header: list[str], lines: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in lines]
    return out


def format_table(table: list[dict], *, common: int | None = None, shared: bool = False, show_ci: bool = True) -> str:
    metric_names: list[str] = []
    for row in table:
        for name in row["metrics"]:
            if name not in metric_names:
                metric_names.append(name)

    def value(row, name):
        if row.get("dry_run"):
            return "n/a*"
        text = f"{row['metrics'][name]:.3f}"
        if show_ci and name in row.get("ci", {}):
            low, high = row["ci"][name]
            text += f" [{low:.3f}, {high:.3f}]"
        return text

    header = ["method", "n", *metric_names, "calls/q", "spent tok/q", "uncached tok/q", "spent $", "uncached $",
              "failures"]
    lines = [[str(row["method"]) + ("" if row["complete"] else " (partial)")
              + (" (mostly failed)" if row.get("mostly_failed") else ""), str(row["n"]),
              *[value(row, m) for m in metric_names], f"{row['lm_calls_per_question']:.2f}",
              f"{row['tokens_per_question']:.0f}", f"{row.get('uncached_tokens_per_question', 0):.0f}",
              f"{row['cost']:.4f}", f"{row.get('cost_uncached', 0):.4f}", str(row["failures"])] for row in table]
    out = _aligned(header, lines)
    out.append("")
    details = [[str(row["method"]), f"{row['dataset']}{'/' + row['split'] if row.get('split') else ''}", row["lm"],
                row.get("endpoint", "?"), row.get("adapter", "?"), row["optimizer"], f"{row['n_done']}/{row['n_asked']}",
                str(row["failures"]), str(row.get("abstained", 0)), f"{row['latency_mean']:.2f}", row["status"]]
               for row in table]
    out += _aligned(["run", "dataset/split", "LM", "endpoint", "adapter", "optimizer", "done/asked", "failures",
                     "abstained", "latency s", "status"], details)
    notes = ["spent: tokens and $ paid (calls served from the LM cache cost nothing); uncached: the same calls as "
             "if none had been served from the cache"]
    if any(row.get("abstained") for row in table):
        notes.append("abstained: answered \"unknown\" (scored 0, counted in %Unk: --metric unknown); failures "
                     "are examples that raised (scored 0 too)")
    elif any(row.get("failures") for row in table):
        notes.append("failures: examples that raised (a timeout, an LM or retriever error) are scored 0 in every "
                     "metric mean above, as the paper's figure would count an unanswered question")
    if any(row.get("dry_run") for row in table):
        notes.append("* dry-run: placeholder answers from no LM, so no accuracy figure; calls and tokens are real")
    if show_ci and any(row.get("ci") for row in table):
        notes.append("[low, high]: 95% percentile bootstrap CI over questions (10000 resamples, seeded)")
    notes += comparability_notes(table, common=common, shared=shared)
    if any(not row["complete"] for row in table):
        notes.append("(partial): killed, stopped or not finished; rerun its evaluate with --resume")
    return "\n".join(out + ([""] + notes if notes else []))


def comparability_notes(table: list[dict], *, common: int | None = None, shared: bool = False) -> list[str]:
    """What a reader of `rows`' figures must know before comparing them, in the text table and the HTML page alike:
    metrics left out, scores a raising metric made 0, different questions, datasets or set-ups. `common`: how many
    questions every run answered."""
    notes = []
    left = sorted({name for row in table for name in row.get("left_out_metrics", [])})
    if left:
        notes.append(f"metrics left out because not every run has them: {', '.join(left)} (--metric to choose)")
    raised = [f"{row['method']}: {name} on {count}" for row in table
              for name, count in (row.get("metric_failures") or {}).items()]
    if raised:
        notes.append(f"warning: a metric raised and scored those questions 0 ({'; '.join(raised)}); see "
                     f"metric_errors in the run's predictions.jsonl")
    if len(table) > 1 and common is not None:
        sizes = [row["n_done"] for row in table]
        if shared:
            notes.append(f"every figure is over the {common} questions all runs answered")
        elif common < max(sizes):
            notes.append(f"warning: these runs answered different questions: {common} shared by all (of "
                         f"{'/'.join(map(str, sizes))}); their means are not comparable. --shared recomputes them "
                         f"on the shared questions; --compare tests two runs on them")
        datasets = {(row["dataset"], row.get("split")) for row in table}
        if len(datasets) > 1:
            notes.append(f"warning: the runs are on different datasets/splits: "
                         f"{', '.join(f'{d}/{s}' for d, s in sorted(datasets, key=str))}")
        differing = setup_differences([row["setup"] for row in table if row.get("setup")])
        if differing:
            notes.append(f"warning: the runs differ in {'; '.join(differing)}: a difference in their figures may "
                         f"come from that, not from the method")
    return notes


def compare(run_a: str, run_b: str, *, metric: str | None = None, seed: int = 0, show: int = 20) -> dict:
    """The paired comparison of two runs on the questions both answered."""
    from ragzoo import stats
    from ragzoo.errors import ConfigError

    runs = [_load(run_a), _load(run_b)]
    names, _ = _metric_names(runs, metric)
    if not names:
        raise ConfigError("the two runs share no metric; pass --metric with one both have")
    name = names[0]
    for run in runs:
        if _recorded_dry_run(run["config"].get("lm")):
            raise ConfigError(f"{run['dir']} is a dry run (placeholder answers): there is nothing to compare")
    from ragzoo.metrics.rates import is_unknown

    sizes = [len(run["records"]) for run in runs]
    differing = _same_id_other_question(runs)
    if differing:
        raise ConfigError(f"refusing to compare: {differing} question(s) with the same id differ in text or gold "
                          f"answers between the runs (another data file or dataset?); a paired test needs the same "
                          f"questions")
    common = shared_ids(runs)
    if not common:
        raise ConfigError(f"refusing to compare: the runs share no question ({sizes[0]} and {sizes[1]} answered); "
                          f"evaluate both on the same questions (same --dataset/--split/-n/--seed)")
    keys = sorted(common)
    a, b = _scores(runs[0], name, common), _scores(runs[1], name, common)
    result = stats.compare([a[k] for k in keys], [b[k] for k in keys], seed=seed)
    by_key = [_keyed(run) for run in runs]
    # a failure scores 0 like a wrong answer; an abstention ("unknown") is an answer that scores 0: both counted
    failed = [sum(1 for k in keys if records[k].get("error")) for records in by_key]
    abstained = [sum(1 for k in keys if not records[k].get("error") and is_unknown(records[k].get("prediction")))
                 for records in by_key]
    disagree = [{"id": str(by_key[0][k]["id"]), "question": by_key[0][k].get("question"),
                 "gold": by_key[0][k].get("gold"), "a": by_key[0][k].get("prediction"),
                 "b": by_key[1][k].get("prediction"), "score_a": a[k], "score_b": b[k]}
                for k in keys if a[k] != b[k]]
    labels = _labels(runs)
    warnings = []
    datasets = [(run["config"].get("dataset") or run["config"].get("data") or "?", run["config"].get("split"))
                for run in runs]
    if datasets[0] != datasets[1]:
        warnings.append(f"the runs are on different datasets/splits: {datasets[0][0]}/{datasets[0][1]} vs "
                        f"{datasets[1][0]}/{datasets[1][1]} (their shared questions are compared)")
    setups = [_setup(run["config"]) for run in runs]
    differences = setup_differences(setups)
    if differences:
        warnings.append(f"the runs differ in {'; '.join(differences)}: the difference may come from that, not "
                        f"from the method")
    return {"a": labels[0], "b": labels[1], "run_a": run_a, "run_b": run_b, "metric": name, "shared": len(keys),
            "n_a": sizes[0], "n_b": sizes[1], "failed_a": failed[0], "failed_b": failed[1],
            "abstained_a": abstained[0], "abstained_b": abstained[1],
            "setup_a": setups[0], "setup_b": setups[1], "warnings": warnings,
            "comparison": result.to_dict(), "disagreements": disagree, "shown": disagree[:max(0, show)],
            "flips": _flips(runs, name, common)}


def _flips(runs: list[dict], metric: str, common: set[str]) -> dict:
    """Issue 23: the questions one run got right and the other wrong, by the loser's attribution class."""
    from ragzoo.diagnostics import flips

    shared = [[record for record in run["records"] if question_key(record) in common] for run in runs]
    from ragzoo.diagnostics import answer_metric

    # right and wrong by an answer metric, whatever the compared metric is (recall scores the passages)
    return flips(shared[0], shared[1], key=question_key, metric=answer_metric([metric]))


def format_compare(found: dict) -> str:
    c = found["comparison"]
    d = c["difference"]
    from ragzoo.stats import format_p

    def who(setup: dict) -> str:
        return f"LM {setup['LM']} @ {setup['endpoint']}, adapter {setup['adapter']}"

    p_text = format_p(c["p_value"])
    lines = [f"A = {found['a']} ({found['run_a']}; {who(found['setup_a'])})",
             f"B = {found['b']} ({found['run_b']}; {who(found['setup_b'])})",
             *[f"warning: {text}" for text in found.get("warnings", [])],
             f"on the {found['shared']} questions both runs were asked (A has {found['n_a']}, B {found['n_b']}), "
             f"metric {found['metric']}:",
             f"  failed (scored 0): A {found['failed_a']}, B {found['failed_b']};  abstained (\"unknown\", scored "
             f"0, counted in %Unk): A {found['abstained_a']}, B {found['abstained_b']}",
             f"  A {c['mean_a']:.3f}   B {c['mean_b']:.3f}   A − B = {d['mean']:+.3f} "
             f"[95% CI {d['low']:+.3f}, {d['high']:+.3f}] (paired bootstrap over questions, 10000 resamples)",
             f"  {c['test']}: p {p_text if p_text.startswith('<') else '= ' + p_text}",
             f"  A better on {c['a_better']}, B better on {c['b_better']}, equal on {c['ties']}"]
    if found.get("flips"):
        from ragzoo.diagnostics import format_flips

        lines.append(format_flips(found["flips"]))
    if found["shown"]:
        lines.append(f"questions where they disagree ({len(found['disagreements'])}; first {len(found['shown'])}):")
        for item in found["shown"]:
            lines.append(f"  {item['id']}: {str(item['question'])[:80]!r} gold={item['gold']!r} "
                         f"A={item['a']!r} ({item['score_a']:.2f}) B={item['b']!r} ({item['score_b']:.2f})")
    return "\n".join(lines)


def check_plot_path(path: str) -> None:
    """`--plot PATH`, checked before any work: a format matplotlib writes (by the suffix), and a file ragzoo may
    write (`ownership.check_file`). An unknown suffix failed after the whole report was printed."""
    from pathlib import Path

    from ragzoo.errors import ConfigError
    from ragzoo.ownership import PLOT_MARK, check_file

    check_file(path, PLOT_MARK, "plot", flag="--plot")  # a folder, a missing folder, a file not ragzoo's: said first
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ragzoo.ownership import plot_metadata

    # the formats whose file carries ragzoo's mark, so that a rerun replaces it (a .jpg was written once, then
    # refused as "not written by this command")
    formats = [name for name in FigureCanvasAgg.get_supported_filetypes() if plot_metadata(f"x.{name}") is not None]
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ConfigError(f"--plot {path}: {('.' + suffix) if suffix else 'no suffix'} is not a format ragzoo writes "
                          f"its plots in; end the name in one of {', '.join('.' + f for f in sorted(formats))}")


def plot(table: list[dict], path: str, metric: str | None = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragzoo.errors import ConfigError

    table = [row for row in table if not row.get("dry_run")]
    if not table:
        raise ConfigError("every run is a dry run: their answers are placeholders, so there is no metric to plot")
    metric = metric.split(",")[0].strip() if metric else next((name for row in table for name in row["metrics"]), None)
    if metric is None:
        raise ConfigError("the runs share no metric to plot; pass --metric with one every run has")
    lacking = [row["run"] for row in table if metric not in row["metrics"]]
    if lacking:
        raise ConfigError(f"run(s) {', '.join(lacking)} have no metric {metric!r}; pass --metric with one every "
                          f"run has")
    from ragzoo.ownership import PLOT_MARK, check_file, plot_metadata

    check_file(path, PLOT_MARK, "plot", flag="--plot")
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for row in table:
        x, y = row["lm_calls_per_question"], row["metrics"][metric]
        label = f"{row['method']} (n={row['n']}{', partial' if not row['complete'] else ''})"
        if metric in row.get("ci", {}):
            low, high = row["ci"][metric]
            axes.errorbar(x, y, yerr=[[y - low], [high - y]], fmt="o", capsize=4, label=label)
        else:
            axes.scatter(x, y, label=label)
    axes.set_xlabel("LM calls per question", fontsize=11)
    axes.set_ylabel(f"{metric} (mean over questions" + (", 95% CI)" if any(r.get("ci") for r in table) else ")"),
                    fontsize=11)
    datasets = sorted({f"{row['dataset']}{'/' + row['split'] if row.get('split') else ''}" for row in table})
    axes.set_title(f"{metric} vs LM calls — {', '.join(datasets)}", fontsize=11)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    # Runs of one method often sit on (nearly) the same point: each label takes the first slot beside its
    # point, alternating above and below, whose box overlaps no label placed before it (no extra dependency).
    renderer = figure.canvas.get_renderer()
    placed = []
    for row in sorted(table, key=lambda r: (r["lm_calls_per_question"], r["metrics"][metric])):
        point = (row["lm_calls_per_question"], row["metrics"][metric])
        for step in range(2 * len(table) + 1):
            offset = 5 + 13 * ((step + 1) // 2) * (1 if step % 2 else -1) if step else 5
            text = axes.annotate(row["method"], point, textcoords="offset points", xytext=(5, offset), fontsize=9)
            box = text.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in placed) or step == 2 * len(table):
                placed.append(box)
                break
            text.remove()
    figure.savefig(path, dpi=120, metadata=plot_metadata(path))
    plt.close(figure)
    return metric


def _is_grid_folder(path: str) -> bool:
    from pathlib import Path

    from ragzoo.grid.runner import GRID_FILE
    from ragzoo.runs import CONFIG_FILE

    return (Path(path) / GRID_FILE).is_file() and not (Path(path) / CONFIG_FILE).is_file()


def _has_answers(run_dir) -> bool:
    """Whether a cell's run has started and finished a question (a stopped or running cell may have neither)."""
    from pathlib import Path

    from ragzoo.errors import RunError
    from ragzoo.runs import CONFIG_FILE, PREDICTIONS_FILE, read_predictions

    if not (Path(run_dir) / CONFIG_FILE).is_file():
        return False
    try:  # a line cut by a kill is no question finished
        return bool(read_predictions(Path(run_dir) / PREDICTIONS_FILE))
    except RunError:  # damaged: the report of the cell says how
        return True


def _cell_runs(grid_out: str) -> list[str]:
    """The run directories of a grid folder's cells that have started (in the grid file's order)."""
    from pathlib import Path

    from ragzoo.errors import ConfigError
    from ragzoo.grid.runner import cell_dir
    from ragzoo.grid.table import grid_of_folder

    found = [str(cell_dir(Path(grid_out), cell) / "run") for cell in grid_of_folder(grid_out).cells()]
    found = [run_dir for run_dir in found if _has_answers(run_dir)]
    if not found:
        raise ConfigError(f"grid folder {grid_out} has no evaluated cell yet; run its sweep first")
    return found


def report_grid(grid_out: str, args: argparse.Namespace) -> int:
    """`report GRID_OUT`: the grid's results table rebuilt from its cells, then each cell's run directory."""
    import json
    from pathlib import Path

    from ragzoo.grid import table as results
    from ragzoo.grid.runner import cell_dir

    grid = results.grid_of_folder(grid_out)
    built = results.build(grid, grid_out, seed=args.seed)
    if args.json:
        print(json.dumps(built, indent=2, default=str))
    else:
        print(results.to_markdown(built))
        entries = {entry["key"]: entry for row in built["rows"] for entry in row["cells"].values() if "key" in entry}
        print("cells (each an ordinary run directory: `ragzoo report RUN ...`, `--compare A B`):")
        started = []
        for cell in grid.cells():
            entry = entries.get(cell.key, {})
            done = f"{entry['n']}/{entry['n_asked']}, " if "n" in entry else ""
            run_dir = cell_dir(Path(grid_out), cell) / "run"
            print(f"  {cell.describe()}: {run_dir} ({done}{entry.get('status', '?')})")
            if _has_answers(run_dir):
                started.append((cell.describe(), str(run_dir)))
        if started:
            print_diagnostics([run_dir for _, run_dir in started], labels=[label for label, _ in started])
    if args.plot:
        results.plot(built, args.plot, args.metric)
        print(f"plot: {args.plot}")
    return 0


def _mark_gold(run: dict, found: dict) -> bool:
    """Give the run's records (in memory) the titles of their gold passages, from the questions the run was
    evaluated on (HotPotQA's supporting titles, a dataset's `gold_passage`), so the page can mark them; records
    that carry gold titles already keep theirs. Best effort: False when the data cannot be loaded again or
    names no gold passage. `found` caches the titles by data source (a grid's cells share their data)."""
    import json

    config = run["config"]
    source = json.dumps([config.get(k) for k in ("dataset", "split", "data", "field_map", "n", "seed")], default=str)
    if source not in found:
        from ragzoo.runs import example_id

        try:
            from ragzoo.commands.common import load_examples

            examples = load_examples(dict(config))
        except Exception:  # noqa: BLE001 - the page is still worth writing without the marks (data moved, offline)
            examples = []
        titles = {}
        for position, example in enumerate(examples):
            names = example.get("supporting_titles") or [p.get("title") for p in example.get("gold_passage") or []
                                                           if isinstance(p, dict)]
            if names:
                titles[example_id(example, position)] = [str(name) for name in names if name]
        found[source] = titles or None
    titles = found[source]
    if titles is None:
        return any(r.get("supporting_titles") or r.get("gold_titles") for r in _keyed(run).values())
    run["keyed"] = {key: record if record.get("supporting_titles") or record.get("gold_titles")
                    or str(record.get("id")) not in titles else {**record, "gold_titles": titles[str(record["id"])]}
                    for key, record in _keyed(run).items()}
    return True


def write_html(args: argparse.Namespace) -> int:
    """`--html OUT`: the page of `ragzoo.html_report` over a grid folder (its table with the paper's numbers,
    one method per cell) or runs (their metrics table with CIs)."""
    from pathlib import Path

    from ragzoo import html_report

    html_report.check_target(args.html)  # before the work: a refused path is said at once
    if len(args.runs) == 1 and _is_grid_folder(args.runs[0]):
        from ragzoo.grid import table as results
        from ragzoo.grid.runner import cell_dir

        grid = results.grid_of_folder(args.runs[0])
        built = results.build(grid, args.runs[0], seed=args.seed)
        table = html_report.grid_table(built)
        cells = {cell.key: cell for cell in grid.cells()}
        several = len(built["columns"]) > 1
        run_dirs, labels, figures = [], [], []
        for row in built["rows"]:
            for label, entry in row["cells"].items():
                if entry.get("n") and entry.get("key") in cells:  # a cell with no question finished: no run yet
                    run_dirs.append(str(cell_dir(Path(args.runs[0]), cells[entry["key"]]) / "run"))
                    labels.append(row["row"] + (f" · {label}" if several else ""))
                    # the plot's points are the table's figures, on the paper's scale
                    figures.append(({name: m["ours"] for name, m in (entry.get("metrics") or {}).items()},
                                    {name: [m["low"], m["high"]] for name, m in (entry.get("metrics") or {}).items()},
                                    dict(entry.get("paper") or {})))
        if not run_dirs:
            from ragzoo.errors import ConfigError

            raise ConfigError(f"grid folder {args.runs[0]} has no evaluated cell yet; run its sweep first")
        loaded = [_load(run_dir) for run_dir in run_dirs]
        for run, (means, cis, paper) in zip(loaded, figures):
            run["means"], run["cis"], run["paper"] = means, cis, paper
    else:
        run_dirs = [run_dir for given in args.runs
                    for run_dir in (_cell_runs(given) if _is_grid_folder(given) else [given])]
        table_rows = rows(run_dirs, metric=args.metric, shared=args.shared, ci=True, seed=args.seed)
        table = html_report.runs_table(table_rows)
        loaded = [_load(run_dir) for run_dir in run_dirs]
        labels = _labels(loaded)
        table["notes"] += comparability_notes(table_rows, common=len(shared_ids(loaded)) if len(loaded) > 1 else None,
                                              shared=args.shared)
        common = shared_ids(loaded) if args.shared and len(loaded) > 1 else None
        for run, row in zip(loaded, table_rows):  # the plot's points are the table's figures, usage included
            run["means"], run["cis"] = row["metrics"], row["ci"]
            run["usage"] = {"lm_calls_per_question": row["lm_calls_per_question"],
                            "tokens_per_question": row["tokens_per_question"],
                            "cost_per_question": row["cost"] / row["n"] if row["n"] else 0.0}
            if common is not None:  # the page's questions are the table's: the shared ones
                run["keyed"] = _keyed_in(run, common)
    names, _ = _metric_names(loaded, args.metric)
    found: dict[str, dict | None] = {}
    unmarked = [label for label, run in zip(labels, loaded) if not _mark_gold(run, found)]
    if unmarked:
        table["notes"].append(f"gold passages not marked for {', '.join(unmarked)}: the run's questions could not "
                              f"be loaded again, or their data names no gold passage")
    runs = [{"label": label, "dir": run["dir"], "dry_run": _recorded_dry_run(run["config"].get("lm")),
             "metrics": names, "keyed": _keyed(run), "means": run.get("means"), "cis": run.get("cis"),
             "paper": run.get("paper") or {}, "usage": run.get("usage")}
            for label, run in zip(labels, loaded)]
    from ragzoo.diagnostics import answer_metric

    path = html_report.write(args.html, table, runs, metric=answer_metric(names) or (names[0] if names else None),
                             seed=args.seed)
    print(f"html report: {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    import json

    from ragzoo.config import check_numbers
    from ragzoo.errors import ConfigError

    check_numbers(vars(args))  # --show, --seed: whole numbers in range, as every command's numeric flags
    # outputs that one form of the report does not make: refused, not dropped without a word (review)
    clash = [(flag, other) for flag, other, given in (
        ("--compare", "--html", args.compare and getattr(args, "html", None)),
        ("--compare", "--plot", args.compare and getattr(args, "plot", None)),
        ("--html", "--plot", getattr(args, "html", None) and getattr(args, "plot", None)),
        ("--html", "--json", getattr(args, "html", None) and args.json)) if given]
    if clash:
        flag, other = clash[0]
        raise ConfigError(f"{flag} makes no {other} output; run the report once for each")
    if getattr(args, "plot", None):
        check_plot_path(args.plot)  # before any table is printed, a run's or a grid's
    if getattr(args, "html", None) and not args.compare:
        return write_html(args)
    if len(args.runs) == 1 and _is_grid_folder(args.runs[0]) and not args.compare:
        return report_grid(args.runs[0], args)
    # a grid folder among runs stands for its cells' runs
    args.runs = [run_dir for given in args.runs
                 for run_dir in (_cell_runs(given) if _is_grid_folder(given) else [given])]
    if args.compare:
        if len(args.runs) != 2:
            raise ConfigError(f"--compare takes exactly two runs, got {len(args.runs)}")
        found = compare(args.runs[0], args.runs[1], metric=args.metric, seed=args.seed, show=args.show)
        print(json.dumps(found, indent=2, default=str) if args.json else format_compare(found))
        return 0
    table = rows(args.runs, metric=args.metric, shared=args.shared, ci=args.ci or bool(args.plot), seed=args.seed)
    if args.json:  # a dry run's means are of placeholder answers: no figure (null), as the table's n/a
        print(json.dumps([{**row, "metrics": {name: None for name in row["metrics"]}, "ci": {}} if row["dry_run"]
                          else row for row in table], indent=2))
    else:
        common = len(shared_ids([{"records": _records(run)} for run in args.runs])) if len(args.runs) > 1 else None
        print(format_table(table, common=common, shared=args.shared, show_ci=args.ci))
        print_diagnostics(args.runs, shared=args.shared)
    if args.plot:
        metric = plot(table, args.plot, args.metric)
        print(f"plot: {args.plot} ({metric} vs LM calls per question)")
    return 0


def print_diagnostics(run_dirs: list[str], labels: list[str] | None = None, *, shared: bool = False) -> None:
    """Issue 23: per run, the attribution of its answers (counts, shares, Wilson 95% CIs) and its stage
    diagnostics (`ragzoo.diagnostics`); runs written before stage records get one line saying so. `shared`: over
    the questions every run answered, as the table above them (review: they were over all of each run's)."""
    from ragzoo.diagnostics import attribution_summary, format_attribution, format_stages, stage_summary

    runs = [_load(run_dir) for run_dir in run_dirs]
    common = shared_ids(runs) if shared and len(runs) > 1 else None
    lines = []
    for label, run in zip(labels or _labels(runs), runs):
        records = list(_keyed_in(run, common).values()) if common is not None else run["records"]
        if not any("attribution" in record for record in records):
            lines.append(f"{label}: no attribution (a run written before stage records)")
            continue
        dry_run = _recorded_dry_run(run["config"].get("lm"))
        if dry_run:  # retrieval and calls are real, the answers placeholders
            lines.append(f"{label}: no attribution (dry run: placeholder answers); its stages:")
        else:
            lines.append(format_attribution(label, attribution_summary(records)))
        lines.extend(format_stages(label, stage_summary(records, answers=not dry_run)))
    if lines:
        print("\nattribution (count, share [95% CI]) and stage diagnostics:")
        print("\n".join(f"  {line}" for line in lines))


def _records(run_dir: str) -> list[dict]:
    from pathlib import Path

    from ragzoo.runs import PREDICTIONS_FILE, read_predictions

    return read_predictions(Path(run_dir) / PREDICTIONS_FILE)
