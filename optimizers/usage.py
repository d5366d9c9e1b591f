"""Counting LM calls, tokens and cost while a compile or an evaluation runs, and stopping at a budget.

`UsageMeter` is a DSPy callback: DSPy runs callbacks in the thread that makes the LM call, for every LM
(copies made by optimizers included) and in every worker thread of DSPy's parallel executor, because
`dspy.settings.callbacks` propagates to them. Calls are counted exactly; tokens are counted on the formatted
messages and the completions with `ragzoo.engines.approx_tokens` (tiktoken cl100k), the same counter the
dry-run LM uses, so a dry-run estimate and a real run are measured the same way. Cost uses LiteLLM's price
table for `pricing_model` (or the LM's own model name).

`budget_guard(meter, max_calls, max_cost)` returns a context manager that makes every LM call check the
budget first and raise `BudgetExceeded` once it is reached, so a call over budget is never sent.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

from dspy.utils.callback import BaseCallback

from ragzoo.errors import BudgetExceeded
from ragzoo.usage import UsageTracker, caller_name, find_history_entry


@dataclass
class Usage:
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    def add(self, other: "Usage") -> None:
        self.lm_calls += other.lm_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost += other.cost

    def minus(self, other: "Usage") -> "Usage":
        return Usage(self.lm_calls - other.lm_calls, self.prompt_tokens - other.prompt_tokens,
                     self.completion_tokens - other.completion_tokens, self.cost - other.cost)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["cost"] = round(self.cost, 6)
        return data


def _text_of(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "".join(_text_of(v) for k, v in value.items() if k in ("text", "content", "reasoning_content"))
    if isinstance(value, (list, tuple)):
        return "\n".join(_text_of(v) for v in value)
    return str(getattr(value, "text", "") or "")


# Usage of the example the current thread is working on (set by ragzoo.runs around each example).
_example_usage: contextvars.ContextVar[Usage | None] = contextvars.ContextVar("ragzoo_example_usage", default=None)


@contextlib.contextmanager
def example_usage() -> Iterator[Usage]:
    usage = Usage()
    token = _example_usage.set(usage)
    try:
        yield usage
    finally:
        _example_usage.reset(token)


class UsageMeter(BaseCallback):
    """Counts every LM call made while it is installed (see `metering`)."""

    def __init__(self, pricing_model: str | None = None):
        self.pricing_model = pricing_model
        self.total = Usage()
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, str | None]] = {}
        self.max_calls: int | None = None
        self.max_cost: float | None = None

    # -- budget ------------------------------------------------------------------------------------------
    def check_budget(self) -> None:
        with self._lock:
            if self.max_calls is not None and self.total.lm_calls >= self.max_calls:
                raise BudgetExceeded(f"--max-calls {self.max_calls} reached ({self.total.lm_calls} LM calls made)")
            if self.max_cost is not None and self.total.cost >= self.max_cost:
                raise BudgetExceeded(f"--max-cost {self.max_cost} reached (${self.total.cost:.4f} spent)")

    @property
    def exceeded(self) -> bool:
        try:
            self.check_budget()
        except BudgetExceeded:
            return True
        return False

    def snapshot(self) -> Usage:
        with self._lock:
            return Usage(**asdict(self.total))

    # -- DSPy callback -----------------------------------------------------------------------------------
    def on_lm_start(self, call_id, instance, inputs):
        try:
            name = caller_name()
        except Exception:  # naming is a nicety; counting must never depend on it (DSPy swallows errors here)
            name = "?"
        with self._lock:
            self._pending[call_id] = (instance, inputs, time.perf_counter(), name)

    def on_lm_end(self, call_id, outputs, exception=None):
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None or exception is not None:
            return  # the call failed before a completion: nothing was billed
        lm, inputs, started, name = pending
        usage, cached = self._measure(lm, inputs, outputs)
        with self._lock:
            self.total.add(usage)
        current = _example_usage.get()
        if current is not None:
            current.add(usage)
        if not _has_ragzoo_tracker(lm):  # nobody else records this LM's calls into the example's trace
            from ragzoo.tracing import LMCallRecord, record_lm_call

            record_lm_call(LMCallRecord(signature=name, model=getattr(lm, "model", ""),
                                        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                                        cost=usage.cost, latency=time.perf_counter() - started, cached=cached))

    def _measure(self, lm, inputs, outputs) -> tuple[Usage, bool]:
        """Usage from DSPy's history entry of the call when it has one, else tokens counted on the text."""
        entry = find_history_entry(lm, outputs)
        model = self.pricing_model or getattr(lm, "priced_model", None)
        if entry is not None:
            reported = entry.get("usage") or {}
            if not reported:  # a cache hit: no billed usage
                return Usage(1, 0, 0, 0.0), True
            usage = Usage(1, int(reported.get("prompt_tokens") or 0), int(reported.get("completion_tokens") or 0))
            if model:
                usage.cost = _cost(model, usage.prompt_tokens, usage.completion_tokens)
            elif entry.get("cost") is not None:
                usage.cost = float(entry["cost"])
            return usage, False
        from ragzoo.engines import approx_tokens

        messages = inputs.get("messages") or []
        prompt = inputs.get("prompt")
        text = prompt if isinstance(prompt, str) else "\n\n".join(
            _text_of(m.get("content") if isinstance(m, dict) else m) for m in messages)
        completion = _text_of(outputs)
        usage = Usage(1, approx_tokens(text) if text else 0, approx_tokens(completion) if completion else 0)
        usage.cost = _cost(model, usage.prompt_tokens, usage.completion_tokens) if model else 0.0
        return usage, False


def _has_ragzoo_tracker(lm) -> bool:
    return any(isinstance(callback, UsageTracker) for callback in getattr(lm, "callbacks", None) or [])


def _cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float:
    from ragzoo.lm import estimate_cost

    return estimate_cost(model, prompt_tokens, completion_tokens) if model else 0.0


@contextlib.contextmanager
def metering(meter: UsageMeter, max_calls: int | None = None, max_cost: float | None = None):
    """Install `meter` as a DSPy callback (all threads) and, with a budget, make every LM call check it first."""
    import dspy

    meter.max_calls = max_calls
    meter.max_cost = max_cost
    callbacks = list(dspy.settings.get("callbacks", []) or []) + [meter]
    lm = dspy.settings.lm
    overrides = {"callbacks": callbacks}
    if lm is not None and (max_calls is not None or max_cost is not None):
        overrides["lm"] = guarded(lm, meter)
    with dspy.context(**overrides):
        yield meter


def guarded(lm, meter: UsageMeter):
    """A copy of `lm` whose calls check the meter's budget before they are sent (copies of it, which
    optimizers make for bootstrap rounds, keep the check because they keep the class)."""
    base = type(lm)
    if getattr(base, "_ragzoo_guarded", False):
        copy = lm.copy()
        copy._ragzoo_meter = meter
        return copy

    def __call__(self, *args, **kwargs):
        self._ragzoo_meter.check_budget()
        return base.__call__(self, *args, **kwargs)

    async def acall(self, *args, **kwargs):
        self._ragzoo_meter.check_budget()
        return await base.acall(self, *args, **kwargs)

    cls = type(f"Budgeted{base.__name__}", (base,), {"__call__": __call__, "acall": acall,
                                                     "_ragzoo_guarded": True, "__module__": base.__module__})
    copy = lm.copy()
    copy.__class__ = cls
    copy._ragzoo_meter = meter
    return copy


@dataclass
class StageUsage:
    """Usage of one stage (compile, validation, evaluation) with its wall time."""

    stage: str
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"stage": self.stage, **self.usage.to_dict(), "seconds": round(self.seconds, 3)}
