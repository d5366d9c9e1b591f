"""Stage diagnostics and error attribution (issue 23): what each method's stages did on a question, and why a
wrong answer was wrong.

Stage records. A method declares its stages as a class attribute `STAGES` (stage name -> the predictors whose
LM calls belong to it, in the order the method runs them; `ragzoo.programs.base.RagProgram.STAGES`) and
returns what each stage produced as `prediction.stages` ({stage: {field: value}}). `stage_records` turns them
into the typed, JSON-able dicts of a prediction record's "stages":
- "calls": LM calls of the stage's predictors in this question's trace (always present);
- "passages" (what a retrieval fetched) and "kept" (what a filter or gate let through): pid lists, in order;
- "gold": the pids among the stage's passages / kept that carry evidence (below), "recall": gold-title recall
  of the stage's passages (HotPotQA-style data only);
- "context" (the texts the final call saw) is stored as "context_chars" (kept-context length);
- method-specific fields as the method gave them: "answers" (per-passage or per-agent answers), "decision"
  (a gate's str/bool), "depth" (recursion depth), "queries", "context_chars" (kept-context length), ...

Evidence, judged per passage from the gold data when the record is written (the only time passage texts and
gold are both at hand): with gold titles (`supporting_titles`, HotPotQA) a passage is evidence when its title
is one of them; otherwise when a gold answer occurs in its "Title | text" (`metrics.answer.contains`,
normalized). Yes/no golds (StrategyQA) cannot be found in a passage: no evidence judgement ("evidence": null).
The record keeps "gold_pids": every evidence pid among all passages any stage saw, and "evidence": the mode.

Attribution rule (`attribute(record)`), first match wins:
1. "failed": the record has an error (LM error, timeout, parse failure, retriever error);
2. "correct": the first answer metric (`answer_metric`: em, f1, acc, ...; never a retrieval or diagnostic one)
   scores >= 0.5 (the report's "right", EM being 0/1); a run without one has no class beyond 3.;
3. "abstained": the answer is an abstention (`metrics.rates.is_unknown`: "unknown", or empty);
4. None (cannot be computed) when the record has no evidence judgement (yes/no data, or a run older than
   stage records);
5. "retrieval_miss": no passage any stage retrieved (or the final context) carries evidence; a closed-book
   method, which retrieves nothing, is a retrieval miss by this rule;
6. "filtered_out": evidence was retrieved but none of it is in the passages the final call saw (the record's
   "passages", which each method sets to its final context, filtered or gated; when a stage gives the texts
   the final call saw as "context", e.g. FILCO's kept sentences or Self-Refine's summary, the record's
   "reached" says whether an answer string is in those texts, and that decides; with gold titles the pids do);
7. "reader_miss": evidence reached the final call and the answer is still wrong.

`stage_summary(records)` aggregates per stage what the papers measure: LM calls, passages per retrieval and
gold recall@k (title recall, or the share of questions with an answer-bearing passage), filter precision and
recall against the evidence passages, kept-context length, %Unk, vote agreement and vote miss (%NM: a gold
answer in the pool, the final answer wrong) of per-passage answers, gate decision rates (and accuracy where
the stage gives a label: RA-ISF's self-knowledge gate against whether its closed-book answer was right),
depth distribution. `attribution_summary` counts classes with Wilson CIs
(`ragzoo.stats`), and `flips` counts, between two runs, the questions one got right and the other wrong, by
the loser's class.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

CLASSES = ("correct", "retrieval_miss", "filtered_out", "reader_miss", "abstained", "failed")
PASSAGE_FIELDS = ("passages", "kept")
RIGHT = 0.5


# --- stage records, built when a prediction record is written -----------------------------------------------

def _pid(passage: Any) -> Any:
    pid = getattr(passage, "pid", None)
    if pid is None and isinstance(passage, dict):
        pid = passage.get("pid")
    return str(pid) if pid is not None else (passage if isinstance(passage, str) else None)


def _is_passage_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        hasattr(item, "pid") or (isinstance(item, dict) and "pid" in item) for item in value)


def _evidence_judge(example: Any):
    """(mode, judge(passage) -> bool) for this example; (None, None) when evidence cannot be judged."""
    from ragzoo.errors import DataError
    from ragzoo.metrics.answer import contains_normalized, normalize_answer
    from ragzoo.metrics.fields import gold_answers
    from ragzoo.metrics.retrieval import gold_titles_if_any, normalize_title, passage_title

    if example is None:
        return None, None
    titles = {normalize_title(t) for t in gold_titles_if_any(example) or ()}
    if titles:
        return "titles", lambda p: normalize_title(passage_title(p)) in titles
    try:
        golds = [g for g in gold_answers(example) if g.strip().lower() not in ("yes", "no")]
    except DataError:
        golds = []
    if not golds:
        return None, None

    # `metrics.answer.contains`, with the golds normalized once and each text judged once per question: the same
    # passage recurs across stages and in the final context
    expected = [gold for gold in map(normalize_answer, golds) if gold]
    judged: dict[str, bool] = {}

    def answer_in(passage: Any) -> bool:
        text = str(getattr(passage, "long_text", None) or (passage if isinstance(passage, str) else ""))
        if text not in judged:
            judged[text] = contains_normalized(text, expected)
        return judged[text]

    return "answer", answer_in


def predictor_stage(predictor: str, declared: dict) -> str | None:
    """The declared stage whose predictor names `predictor` (as `named_predictors()` gives it) starts with."""
    for stage, predictors in declared.items():
        for name in predictors:
            if predictor == name or predictor.startswith(name + "."):
                return stage
    return None


def stage_records(prediction: Any, program: Any, lm_trace: list[dict], example: Any = None) -> dict:
    """{"stages": ..., "gold_pids": ..., "evidence": ...} for a prediction record; {} when the method records no
    stages (older methods, failed questions). A diagnostics error never costs the question its paid answer: the
    record gets "stages_error" (and no attribution beyond failed / correct / abstained) and a warning is logged."""
    try:
        return _stage_records(prediction, program, lm_trace, example)
    except Exception as error:  # noqa: BLE001 - the answer was paid for; its diagnostics are extra
        import logging

        message = f"{type(error).__name__}: {error}"[:300]
        logging.getLogger(__name__).warning("stage diagnostics of a question could not be built (%s)", message)
        return {"stages_error": message}


def _stage_records(prediction: Any, program: Any, lm_trace: list[dict], example: Any = None) -> dict:
    from ragzoo.files import jsonable
    from ragzoo.metrics.retrieval import gold_titles, title_recall

    stages = prediction.get("stages") if prediction is not None else None
    if not isinstance(stages, dict):
        return {}
    declared = dict(getattr(program, "STAGES", None) or {})
    calls = Counter(predictor_stage(str(call.get("predictor")), declared) for call in lm_trace)
    mode, judge = _evidence_judge(example)
    gold_pids: dict[str, None] = {}
    reached = None
    out: dict[str, dict] = {}
    order = [*declared, *(name for name in stages if name not in declared)]
    for name in order:
        if name not in stages:
            continue
        fields = stages[name] if isinstance(stages[name], dict) else {"value": stages[name]}
        record: dict[str, Any] = {"calls": calls.get(name, 0)}
        gold: dict[str, None] = {}
        for key, value in fields.items():
            if key == "context" and isinstance(value, (list, tuple)):
                # the texts the final call saw (e.g. FILCO's kept sentences): stored as their length; whether
                # evidence survived in them is judged on the texts, not on the passages they came from
                texts = [str(text) for text in value]
                record["context_chars"] = sum(len(text) for text in texts)
                if mode == "answer":  # a title cannot be read off a summary: titles mode goes by the pids
                    reached = any(judge(text) for text in texts)
                continue
            if key in PASSAGE_FIELDS or _is_passage_list(value):
                items = list(value or [])
                record[key] = [_pid(item) for item in items]
                if judge is not None:
                    for item in items:
                        if hasattr(item, "pid") and judge(item):
                            gold[str(item.pid)] = None
                if key == "passages" and mode == "titles" and items:
                    record["recall"] = round(title_recall(items, gold_titles(example)), 4)
            else:
                record[key] = jsonable(value)
        if judge is not None and any(key in PASSAGE_FIELDS for key in fields):
            record["gold"] = list(gold)
        gold_pids.update(gold)
        out[name] = record
    if judge is not None:
        for passage in prediction.get("passages") or []:
            if hasattr(passage, "pid") and judge(passage):
                gold_pids[str(passage.pid)] = None
    return {"stages": out, "gold_pids": list(gold_pids) if mode else None, "evidence": mode,
            **({"reached": reached} if reached is not None else {})}


# --- attribution ----------------------------------------------------------------------------------------------

def answer_metric(names) -> str | None:
    """The first of `names` that scores the answer (em, f1, acc, contains, judge, ...): what "right" means. Never a
    retrieval metric (recall scores the passages: 7 of 8 wrong answers had been "correct" by it), a diagnostic
    one (unknown, vote_miss: higher is not better) or the judge's faithfulness."""
    from ragzoo.metrics import DIAGNOSTICS
    from ragzoo.metrics.retrieval import TITLE_METRICS

    return next((name for name in names if name not in TITLE_METRICS and name not in DIAGNOSTICS
                 and name != "judge_faithful"), None)


def is_right(record: dict, metric: str | None = None) -> bool:
    """Whether the record's answer is right: `metric` (else the record's own first answer metric,
    `answer_metric`) at or above RIGHT."""
    metrics = record.get("metrics") or {}
    metric = metric or answer_metric(list(metrics))
    if metric is None:
        return False
    return float(metrics.get(metric) or 0.0) >= RIGHT


def attribute(record: dict) -> str | None:
    """The record's class (module docstring: the rule), or None when it cannot be computed."""
    from ragzoo.metrics.rates import is_unknown

    if record.get("error"):
        return "failed"
    judged = answer_metric(list(record.get("metrics") or {})) is not None
    if judged and is_right(record):
        return "correct"
    if is_unknown(record.get("prediction")):
        return "abstained"
    if not judged:  # no metric says whether the answer is right: no class beyond failed / abstained
        return None
    if not record.get("evidence") or not isinstance(record.get("stages"), dict):
        return None
    gold = {str(pid) for pid in record.get("gold_pids") or []}
    if not gold:
        return "retrieval_miss"
    if isinstance(record.get("reached"), bool):
        return "reader_miss" if record["reached"] else "filtered_out"
    final = {str(p.get("pid")) for p in record.get("passages") or [] if isinstance(p, dict)}
    return "reader_miss" if gold & final else "filtered_out"


# --- summaries for the report ---------------------------------------------------------------------------------

def attribution_summary(records: list[dict]) -> dict:
    """{"n": records, "classes": {class: {"count", "share", "ci": [lo, hi]}}, "not_computed": count}."""
    from ragzoo.stats import wilson_interval

    labels = [record.get("attribution") for record in records]
    n = len(labels)
    classes = {}
    for klass in CLASSES:
        count = sum(1 for label in labels if label == klass)
        low, high = wilson_interval(count, n) if n else (0.0, 0.0)
        classes[klass] = {"count": count, "share": count / n if n else 0.0, "ci": [low, high]}
    return {"n": n, "classes": classes, "not_computed": sum(1 for label in labels if label not in CLASSES)}


def _mean(values: Iterable[float]) -> float | None:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None


def _majority_share(answers: list) -> float | None:
    from ragzoo.metrics.answer import normalize_answer

    normalized = [normalize_answer(str(a)) for a in answers if a is not None]
    if not normalized:
        return None
    return Counter(normalized).most_common(1)[0][1] / len(normalized)


_ANSWER_MEASURES = ("unknown_rate", "vote_agreement", "vote_miss", "yes_precision", "decision_accuracy")


def stage_summary(records: list[dict], *, answers: bool = True) -> dict[str, dict]:
    """Per stage (in first-seen order): how many records have it and the papers' measures (module docstring);
    a measure is present only when some record carries what it needs. `answers=False` (a dry run's placeholder
    answers): the measures read off the answers are left out, the retrieval and call figures are real."""
    out = _stage_summary(records)
    if not answers:
        for stats in out.values():
            for name in _ANSWER_MEASURES:
                stats.pop(name, None)
    return out


def _stage_summary(records: list[dict]) -> dict[str, dict]:
    from ragzoo.metrics.answer import exact_match
    from ragzoo.metrics.rates import is_unknown, vote_miss

    by_stage: dict[str, list[tuple[dict, dict]]] = {}
    for record in records:
        stages = record.get("stages")
        for name, stage in (stages.items() if isinstance(stages, dict) else []):
            if isinstance(stage, dict):
                by_stage.setdefault(name, []).append((record, stage))
    out: dict[str, dict] = {}
    for name, pairs in by_stage.items():
        stats: dict[str, Any] = {"records": len(pairs), "calls": _mean(s.get("calls", 0) for _, s in pairs)}
        with_passages = [(r, s) for r, s in pairs if isinstance(s.get("passages"), list)]
        if with_passages:
            stats["passages"] = _mean(len(s["passages"]) for _, s in with_passages)
            judged = [(r, s) for r, s in with_passages if r.get("evidence")]
            recalls = [s["recall"] for _, s in judged if isinstance(s.get("recall"), (int, float))]
            if recalls:
                stats["gold_recall"] = _mean(recalls)
            if judged:
                stats["answer_in_passages" if not recalls else "any_gold"] = _mean(
                    bool(s.get("gold")) and bool(set(s["gold"]) & set(s["passages"])) for _, s in judged)
        with_kept = [(r, s) for r, s in pairs if isinstance(s.get("kept"), list)]
        if with_kept:
            stats["kept"] = _mean(len(s["kept"]) for _, s in with_kept)
            precision, recall = [], []
            for record, stage in with_kept:
                if not record.get("evidence"):
                    continue
                gold = set(stage.get("gold") or [])
                kept = set(stage["kept"])
                if kept:
                    precision.append(len(kept & gold) / len(kept))
                offered = gold & set(stage.get("passages") or [])
                if offered:
                    recall.append(len(kept & offered) / len(offered))
            if precision:
                stats["filter_precision"] = _mean(precision)
            if recall:
                stats["filter_recall"] = _mean(recall)
        lengths = [s["context_chars"] for _, s in pairs if isinstance(s.get("context_chars"), (int, float))]
        if lengths:
            stats["context_chars"] = _mean(lengths)
        answer_lists = [s["answers"] for _, s in pairs if isinstance(s.get("answers"), list)]
        if answer_lists:
            flat = [a for answers in answer_lists for a in answers]
            stats["unknown_rate"] = _mean(is_unknown(a) for a in flat) if flat else None
            shares = [share for share in (_majority_share([a for a in answers if not is_unknown(a)])
                                          for answers in answer_lists) if share is not None]
            if shares:
                stats["vote_agreement"] = _mean(shares)
            # Post-Fusion's %NM: a gold answer was in the pool, the final answer is still wrong
            pools = [(r, s["answers"]) for r, s in pairs if isinstance(s.get("answers"), list) and r.get("gold")]
            if pools:
                stats["vote_miss"] = _mean(vote_miss(r.get("prediction"), [str(a) for a in answers], r["gold"])
                                           for r, answers in pools)
        decisions = [s["decision"] for _, s in pairs if "decision" in s and s["decision"] is not None]
        if decisions:
            counts = Counter(str(d) for d in decisions)
            stats["decisions"] = {value: count / len(decisions) for value, count in sorted(counts.items())}
            # a gate with a label: the closed-book answer it vouched for (or not) was right or wrong
            labelled = [(bool(s["decision"]), bool(exact_match(s.get("answer"), r.get("gold") or [])))
                        for r, s in pairs if isinstance(s.get("decision"), bool) and "answer" in s
                        and r.get("gold") is not None]
            if labelled and all(said for said, _ in labelled):
                # only a "yes" carries an answer to score (RA-ISF's closed-book answer): how often it was right,
                # not an accuracy, which would need the wrong "no"s too (review)
                stats["yes_precision"] = _mean(right for _, right in labelled)
            elif labelled:
                stats["decision_accuracy"] = _mean(said == right for said, right in labelled)
        depths = [s["depth"] for _, s in pairs if isinstance(s.get("depth"), int)]
        if depths:
            stats["depth"] = dict(sorted(Counter(depths).items()))
        out[name] = stats
    return out


def flips(records_a: list[dict], records_b: list[dict], key=lambda record: record["id"],
          metric: str | None = None) -> dict:
    """Questions both runs answered: A right / B wrong (by B's class) and B right / A wrong (by A's class);
    "right" is `metric` (default: each record's first) >= 0.5."""
    a = {key(record): record for record in records_a}
    b = {key(record): record for record in records_b}
    shared = [k for k in a if k in b]

    def won(x: dict, y: dict) -> bool:
        return is_right(x, metric) and not is_right(y, metric)

    a_only = Counter(b[k].get("attribution") or "not computed" for k in shared if won(a[k], b[k]))
    b_only = Counter(a[k].get("attribution") or "not computed" for k in shared if won(b[k], a[k]))
    return {"shared": len(shared),
            "a_right_b_wrong": {"count": sum(a_only.values()), "by_class": dict(a_only.most_common())},
            "b_right_a_wrong": {"count": sum(b_only.values()), "by_class": dict(b_only.most_common())}}


def format_flips(found: dict, label_a: str = "A", label_b: str = "B") -> str:
    lines = [f"flips by class ({found['shared']} shared questions):"]
    for side, right, wrong in (("a_right_b_wrong", label_a, label_b), ("b_right_a_wrong", label_b, label_a)):
        part = found[side]
        detail = ", ".join(f"{wrong} {klass.replace('_', ' ')} {count}" for klass, count in part["by_class"].items())
        lines.append(f"  {right} right, {wrong} wrong: {part['count']}" + (f", of which {detail}" if detail else ""))
    return "\n".join(lines)


def format_attribution(label: str, summary: dict) -> str:
    parts = [f"{klass.replace('_', ' ')} {c['count']} ({c['share']:.0%} [{c['ci'][0]:.0%}, {c['ci'][1]:.0%}])"
             for klass, c in summary["classes"].items()]
    tail = f"; not computed {summary['not_computed']}" if summary["not_computed"] else ""
    return f"{label}: " + ", ".join(parts) + tail


def format_stages(label: str, stages: dict[str, dict]) -> list[str]:
    lines = []
    for name, stats in stages.items():
        shown = []
        for key, value in stats.items():
            if value is None:
                continue
            if isinstance(value, dict):
                shown.append(f"{key} " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in value.items()))
            elif isinstance(value, float):
                shown.append(f"{key} {value:.2f}")
            else:
                shown.append(f"{key} {value}")
        lines.append(f"{label} / {name}: " + ", ".join(shown))
    return lines
