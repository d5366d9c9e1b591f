"""GEPA's feedback metric (issue 23): the score of the compile's metric, and a text saying why the answer was wrong,
built from the answer against the gold (EM, token F1) and the method's stage records (`ragzoo.diagnostics`):
which stage retrieved the evidence, which stage dropped it, whether it reached the final call. GEPA's reflection
LM reads this text when it rewrites an instruction, so it learns from why an answer was wrong, not only that it
was.

`feedback_metric(metric)` is `(gold, pred, trace=None, pred_name=None, pred_trace=None) ->
dspy.Prediction(score=..., feedback=...)`, GEPA's metric signature in DSPy 3.4.1; the score is exactly `metric`'s
(GEPA checks that the module-level and feedback scores agree). The feedback is the program's, the same for every
predictor GEPA asks about: stage records are per question, not per predictor.

Evidence and classes are `ragzoo.diagnostics`' (its docstring has the rule): a method without stage records is
judged on its final passages alone (a retrieval miss or a reader miss; "filtered out" needs a filter's record).
This lives with the optimizers, not the metrics: `ragzoo.diagnostics` reads the metrics, so the metrics room
cannot read it back.
"""

from __future__ import annotations

from typing import Any

import dspy

from ragzoo.metrics.answer import exact_match, f1
from ragzoo.metrics.fields import field, gold_answers, predicted_answer
from ragzoo.metrics.retrieval import predicted_passages

MAX_TITLES = 3


def _golds(example: Any) -> list[str]:
    try:
        return [str(g) for g in gold_answers(example)]
    except Exception:  # an example without gold answers: the feedback says what it can
        return []


def _titles_by_pid(pred: Any) -> dict[str, str]:
    """pid -> title of every passage the prediction carries (final passages and every stage's)."""
    found: dict[str, str] = {}
    lists = [predicted_passages(pred)]
    stages = field(pred, "stages")
    if isinstance(stages, dict):
        for fields in stages.values():
            if isinstance(fields, dict):
                lists.extend(value for value in fields.values() if isinstance(value, (list, tuple)))
    for items in lists:
        for item in items:
            pid, title = getattr(item, "pid", None), getattr(item, "title", None)
            if pid is not None and title:
                found.setdefault(str(pid), str(title))
    return found


def _named(pids, titles: dict[str, str]) -> str:
    names = [f"'{titles.get(str(pid), pid)}'" for pid in list(pids)[:MAX_TITLES]]
    more = len(list(pids)) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def diagnose(example: Any, pred: Any, right: bool) -> tuple[str | None, list[str]]:
    """(attribution class or None, one line per stage) from the prediction's stage records and the gold."""
    from ragzoo.diagnostics import attribute, stage_records

    stages = field(pred, "stages")
    passages = predicted_passages(pred)
    if not isinstance(stages, dict):
        if not passages or not hasattr(passages[0], "pid"):
            return None, []
        stages = {"final context": {"passages": passages}}  # no stage records: judge the final passages
    carrier = dspy.Prediction(stages=stages, passages=passages)
    info = stage_records(carrier, None, [], example)
    record = {"error": None, "metrics": {"score": 1.0 if right else 0.0}, "prediction": predicted_answer(pred),
              "passages": [{"pid": str(p.pid)} for p in passages if hasattr(p, "pid")], **info}
    label = attribute(record)
    titles = _titles_by_pid(pred)
    lines = []
    retrieved_gold = False
    for name, rec in (info.get("stages") or {}).items():
        gold = rec.get("gold") or []
        if "passages" in rec:
            line = f"stage '{name}' retrieved {len(rec['passages'])} passage(s)"
            line += f"; with the evidence: {_named(gold, titles)}" if gold else "; none carries the evidence"
            retrieved_gold = retrieved_gold or bool(gold)
        elif "kept" in rec:
            line = f"stage '{name}' kept {len(rec['kept'])} passage(s)"
            if gold:
                line += f", the evidence among them: {_named(gold, titles)}"
            elif retrieved_gold:
                line += ", and dropped every passage with the evidence"
        else:
            continue
        if rec.get("queries"):
            line += f" (queries: {rec['queries']})"
        lines.append(line)
    return label, lines


_CLASS_TEXT = {
    "retrieval_miss": "Retrieval miss: no retrieved passage carries the evidence, so the answer could not be read "
                      "from the context; better search queries would find it.",
    "filtered_out": "Filtered out: the evidence was retrieved but dropped before the final call.",
    "reader_miss": "Reader miss: the evidence reached the final call, yet the answer is wrong; the answer should be "
                   "read from those passages.",
    "abstained": "Abstained: the program answered 'unknown'.",
}


def explain(example: Any, pred: Any, score: float, metric_name: str = "metric") -> str:
    """The feedback text for one question."""
    if pred is None or isinstance(pred, BaseException):
        return f"The program failed on this question ({type(pred).__name__ if pred is not None else 'no output'})."
    answer, golds = predicted_answer(pred), _golds(example)
    right = score >= 0.5
    head = (f"{'Correct' if right else 'Wrong'} ({metric_name}={score:g}): answered {answer!r}"
            + (f"; the gold answer is {' / '.join(map(repr, golds[:MAX_TITLES]))} (EM {exact_match(answer, golds):g},"
               f" token F1 {f1(answer, golds):.2f})." if golds else "."))
    try:
        label, lines = diagnose(example, pred, right)
    except Exception:  # a diagnosis is help for the reflection LM; the score must never depend on it
        label, lines = None, []
    parts = [head]
    if not right and label in _CLASS_TEXT:
        parts.append(_CLASS_TEXT[label])
    parts.extend(line[:1].upper() + line[1:] + "." for line in lines)
    return " ".join(parts)


class FeedbackMetric:
    """GEPA's five-argument metric around a compile metric (see the module docstring)."""

    def __init__(self, metric):
        self.metric = metric
        self.__name__ = getattr(metric, "__name__", "metric")

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction:
        score = float(self.metric(gold, pred, trace))
        return dspy.Prediction(score=score, feedback=explain(gold, pred, score, self.__name__))


def feedback_metric(metric) -> FeedbackMetric:
    return metric if isinstance(metric, FeedbackMetric) else FeedbackMetric(metric)
