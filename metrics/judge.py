"""LLM-judged metrics (issue 23): `judge` (SemanticF1-style: the answer's key ideas against the reference's) and
`judge_faithful` (is the answer supported by the passages the final call saw?), scored by a judge LM apart from
the program's LM.

- Configured once per process (`use_judge`; the CLI builds it from `--judge-lm` / `--judge-api-base` with
  `ragzoo.lm.make_lm`, keys only from the environment, as for `--lm`). `get_metric("judge")` without a
  configured judge is a `ConfigError` naming the flag.
- Counted apart: every judge call runs under the judge's own meter (`ragzoo.usage.Meter.apart`) and outside the
  example's trace, so it never appears in a record's `lm_calls`/tokens/cost, the program's totals or an open
  meter of the run; `summary.json` carries them under "judge". Budgets (`--max-calls`, `--max-cost`) bound the
  program only: the judge's calls do not count against them (its cost is shown apart instead).
- Cached: the CLI's judge LM is built by `ragzoo.lm.make_lm`, so DSPy's cache answers a repeated verdict (a cache
  hit costs nothing and is counted as cached).
- Recorded: `judge_config(metrics)` is what config.json stores (each judge signature's instructions, the judge
  LM's description without secrets).
- A judge call that fails (LM error, an unreadable or out-of-range verdict) fails the metric for that question
  only: it scores 0, the question's id is listed in the summary's "judge"."failed_ids", the run goes on.

The signatures are ours, in the spirit of `dspy.evaluate.SemanticF1` (recall and precision of key ideas, F1 of
the two); a bare `dspy.Predict` so a verdict is one call. During bootstrapping (`trace` given) `judge` passes at
F1 >= 0.66 as SemanticF1 does, `judge_faithful` at support >= 0.5.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import dspy

from ragzoo.errors import ConfigError
from ragzoo.metrics.fields import field, gold_answers, predicted_answer
from ragzoo.metrics.retrieval import predicted_passages

SEMANTIC_THRESHOLD = 0.66  # dspy.evaluate.SemanticF1's default
FAITHFUL_THRESHOLD = 0.5


class AnswerOverlap(dspy.Signature):
    """Compare a system's answer to a question with the reference answer, idea by idea. List the key ideas of
    each; recall is the fraction of the reference's key ideas the system answer states, precision the fraction
    of the system answer's key ideas the reference supports. Wording and order do not matter, meaning does."""

    question: str = dspy.InputField()
    reference_answer: str = dspy.InputField()
    system_answer: str = dspy.InputField()
    recall: float = dspy.OutputField(desc="fraction (0.0 to 1.0) of the reference covered by the system answer")
    precision: float = dspy.OutputField(desc="fraction (0.0 to 1.0) of the system answer covered by the reference")


class AnswerSupport(dspy.Signature):
    """Judge whether a system's answer to a question is supported by the passages the system was given. List the
    answer's claims; supported is the fraction of them that the passages state or directly imply. Outside
    knowledge does not count as support, even when the claim is true."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField()
    system_answer: str = dspy.InputField()
    supported: float = dspy.OutputField(desc="fraction (0.0 to 1.0) of the answer's claims the passages support")


class JudgeFailed(Exception):
    """A judge call failed or gave an unreadable verdict (the metric fails for that question only)."""


def _fraction(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise JudgeFailed(f"the judge's {name} {value!r} is not a number") from None
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        raise JudgeFailed(f"the judge's {name} {value!r} is not a fraction from 0 to 1")
    return number


def _passage_text(passage: Any) -> str:
    long_text = getattr(passage, "long_text", None)
    if isinstance(long_text, str):
        return long_text
    if isinstance(passage, dict):
        title, text = passage.get("title") or "", passage.get("text") or ""
        return f"{title} | {text}" if title else str(text)
    return str(passage)


def _example_id(example: Any) -> str:
    for name in ("id", "_id", "qid"):
        value = field(example, name)
        if value is not None:
            return str(value)
    return str(field(example, "question", "?"))[:80]


class Judge:
    """The judge LM, its own meter and its failures. One per process (`configure_judge`), shared by threads."""

    def __init__(self, lm, spec: str, meter, description: dict | None = None):
        self.lm = lm
        self.spec = spec
        self.meter = meter  # a `ragzoo.usage.Meter` of its own (this room imports no LM or usage code)
        self.description = description or {"model": getattr(lm, "model", type(lm).__name__)}
        self.failed_ids: list[str] = []
        self._lock = threading.Lock()

    def ask(self, signature: type[dspy.Signature], **inputs) -> dspy.Prediction:
        """One verdict: the judge LM under its own meter only (no open meter, budget or example trace of the
        program sees it) and DSPy's plain chat format (the program's lenient adapter is the program's)."""
        try:
            with self.meter.apart(), dspy.context(lm=self.lm, adapter=dspy.ChatAdapter()):
                return dspy.Predict(signature)(**inputs)
        except Exception as error:  # LM error after retries, unreadable reply: this question's verdict fails
            raise JudgeFailed(f"judge call failed: {type(error).__name__}: {error}") from error

    def fail(self, example: Any) -> None:
        with self._lock:
            self.failed_ids.append(_example_id(example))

    def mark(self) -> tuple:
        """Where the judge's totals stand now: `summary(since=...)` gives what was added after (one evaluation's,
        in a process that runs several, as a notebook does)."""
        with self._lock:
            return self.meter.usage.snapshot(), len(self.failed_ids)

    def summary(self, since: tuple | None = None) -> dict:
        usage = self.meter.usage if since is None else self.meter.usage.minus(since[0])
        with self._lock:
            failed = list(self.failed_ids)[since[1] if since is not None else 0:]
        return {"lm": self.spec, "lm_calls": usage.lm_calls, "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens, "cost": round(usage.total_cost, 6),
                "cached_calls": usage.cached_calls, "failed_calls": usage.failed_calls,
                "failed": len(failed), "failed_ids": failed}


_JUDGE: Judge | None = None


def use_judge(lm, spec: str, meter, description: dict | None = None) -> Judge:
    """Make `lm` (built from `spec`, counted on `meter`, described without secrets by `description`) the
    process's judge; `ragzoo.commands.common.check_metrics` builds it from --judge-lm."""
    global _JUDGE
    _JUDGE = Judge(lm, spec, meter, description)
    return _JUDGE


def clear_judge() -> None:
    global _JUDGE
    _JUDGE = None


def current_judge() -> Judge | None:
    return _JUDGE


class JudgeMetric:
    """`(example, pred, trace=None) -> float`: one judge verdict. Bound to the judge configured when the metric
    is resolved by name, so a run keeps its judge."""

    def __init__(self, name: str, signature: type[dspy.Signature], judge: Judge):
        self.__name__ = name
        self.signature = signature
        self.judge = judge

    def __call__(self, example, pred, trace=None, *args, **kwargs) -> float:
        answer = predicted_answer(pred).strip()
        if not answer:  # nothing to judge: a failed or empty prediction scores 0 without a call
            return 0.0
        try:
            score, threshold = self._verdict(example, pred, answer)
        except JudgeFailed:
            self.judge.fail(example)
            raise
        return score if trace is None else score >= threshold

    def _verdict(self, example, pred, answer: str) -> tuple[float, float]:
        question = str(field(example, "question", "") or "")
        if self.signature is AnswerOverlap:
            reference = field(example, "response") or "; ".join(gold_answers(example))
            verdict = self.judge.ask(AnswerOverlap, question=question, reference_answer=str(reference),
                                     system_answer=answer)
            recall = _fraction(verdict.get("recall"), "recall")
            precision = _fraction(verdict.get("precision"), "precision")
            f1 = 0.0 if recall + precision == 0 else 2 * recall * precision / (recall + precision)
            return f1, SEMANTIC_THRESHOLD
        passages = [_passage_text(p) for p in predicted_passages(pred)]
        verdict = self.judge.ask(AnswerSupport, question=question, passages=passages, system_answer=answer)
        return _fraction(verdict.get("supported"), "supported"), FAITHFUL_THRESHOLD


JUDGE_METRICS: dict[str, type[dspy.Signature]] = {"judge": AnswerOverlap, "judge_faithful": AnswerSupport}


def judge_metric(name: str) -> JudgeMetric:
    """The judge metric `name` bound to the configured judge (ConfigError without one)."""
    if _JUDGE is None:
        raise ConfigError(f"metric {name!r} is judged by an LM: pass --judge-lm SPEC (e.g. openai/gpt-4o-mini; "
                          f"key in the environment; --judge-api-base for an OpenAI-compatible server)")
    return JudgeMetric(name, JUDGE_METRICS[name], _JUDGE)


def _judge_metrics(metrics) -> list[JudgeMetric]:
    found = []
    for item in metrics:
        fn = item[1] if isinstance(item, tuple) else item
        fn = getattr(fn, "fn", fn)  # a SafeMetric wraps it
        if isinstance(fn, JudgeMetric):
            found.append(fn)
    return found


def judge_config(metrics) -> dict:
    """What config.json records about the judge of these resolved metrics: {} when none is judged."""
    found = _judge_metrics(metrics)
    if not found:
        return {}
    from ragzoo.secrets import storable

    judge = found[0].judge
    return {"judge": storable({"lm": judge.description,
                               "metrics": {m.__name__: {"signature": m.signature.__name__,
                                                        "instructions": m.signature.instructions,
                                                        "fields": list(m.signature.fields)} for m in found}})}


def judge_mark(metrics) -> tuple | None:
    """Where the judge of these metrics stands before an evaluation (`Judge.mark`); None when none is judged."""
    found = _judge_metrics(metrics)
    return found[0].judge.mark() if found else None


def judge_summary(metrics, since: tuple | None = None) -> dict:
    """What summary.json carries about the judge's calls, {} when no metric is judged: since `since`
    (`judge_mark` at the evaluation's start), so each evaluation of a process counts its own."""
    found = _judge_metrics(metrics)
    return {"judge": found[0].judge.summary(since)} if found else {}
