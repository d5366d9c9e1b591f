"""Reading golds from examples and answers from predictions without ever raising on the prediction side.

A prediction may be a `dspy.Prediction`, a dict, a plain string, None, or an exception object (what an
evaluator records when a program failed, e.g. an AdapterParseError). Anything that does not yield a usable
answer reads as "" and so scores 0.
"""

from __future__ import annotations

from typing import Any

from ragzoo.errors import DataError


def field(obj: Any, name: str, default: Any = None) -> Any:
    """`obj.name` / `obj[name]`, or `default`; never raises."""
    if obj is None or isinstance(obj, BaseException):
        return default
    try:
        if isinstance(obj, dict):
            return obj.get(name, default)
        value = getattr(obj, name, default)
    except Exception:
        return default
    return value


def predicted_answer(pred: Any) -> str:
    """The prediction's answer as a string ("" when missing, None, empty or the prediction failed).
    A bool answer (a typed yes/no output) reads as "yes"/"no"; a plain string is its own answer."""
    if isinstance(pred, str):
        return pred
    value = field(pred, "answer")
    if value is None or isinstance(value, BaseException):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        return str(value)
    except Exception:
        return ""


REPLY_FIELDS = ("reasoning", "notes")  # what a method's final call writes before its answer (CoT; Chain-of-Note)


def predicted_reply(pred: Any) -> list[str]:
    """The whole final reply as its parts: what the final call wrote before its answer (its reasoning, or
    Chain-of-Note's reading notes) and the answer. What ActiveRAG's scoring reads for every row of its table (a
    gold alias anywhere in the last reply, whose labels keep the parts apart); a method that writes nothing
    before its answer replies its answer alone."""
    before = [field(pred, name) for name in REPLY_FIELDS]
    return [part for part in (*(text for text in before if isinstance(text, str)), predicted_answer(pred)) if part]


def gold_answers(example: Any) -> list[str]:
    """`example.answers` (list), else `example.answer` (string or list). An example without either is a
    data error, raised so a mis-mapped dataset is not silently scored 0."""
    for name in ("answers", "answer"):
        value = field(example, name)
        if value is None:
            continue
        if isinstance(value, bool):
            return ["yes" if value else "no"]
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)):
            return [str(item) for item in value if item is not None]
    raise DataError(f"example {field(example, 'id', '?')!r} has no 'answers' or 'answer' field to score against")


def gold_yes_no(example: Any):
    """The yes/no label: `example.answer_bool` when present, else the first gold answer."""
    value = field(example, "answer_bool")
    if isinstance(value, bool):
        return value
    golds = gold_answers(example)
    return golds[0] if golds else None


def predicted_candidates(pred: Any) -> list[str]:
    """The candidate answers a method produced (`pred.candidates`: samples, agents' answers, votes, in the
    method's documented order), each as a string (None reads as ""); [] when the prediction has none or
    failed. Works on a prediction and on a run record alike (both carry them as `candidates`)."""
    value = field(pred, "candidates")
    if not isinstance(value, (list, tuple)):
        return []
    return ["" if item is None or isinstance(item, BaseException) else str(item) for item in value]
