"""Usage accounting and budgets for LM calls.

How it works:
- `UsageTracker` is a DSPy callback (`on_lm_start` / `on_lm_end`). At the start of a call it notes the
  time and the calling predictor (from `dspy.settings.caller_modules`, named as `ragzoo.engines` and
  `ScriptedLM` name it); at the end it finds the call's own history entry (the entry whose `outputs` is
  the object the call returned, so concurrent calls never mix) and reads usage and cost from it. Each call
  becomes an `LMCallRecord` that goes to the current example's trace (`ragzoo.tracing.record_lm_call`),
  the tracker's `totals`, and any extra `UsageTotals` sinks.
- Cost: the cost DSPy reports for the call (LiteLLM's `response_cost` or DSPy's price estimate); else,
  and always for the dry-run LM, tokens times LiteLLM's list price for the LM's priced model.
  Cache hits are recorded with `cached=True`, zero tokens and zero cost.
- `make_lm` attaches one tracker to every LM it builds (`install_usage_tracking`); `lm.usage` is its
  running `UsageTotals`. Install it on other LMs yourself: `install_usage_tracking(lm)` (idempotent).
  Do not also register a tracker in `dspy.configure(callbacks=...)`: the call would be counted twice.
- Budgets: DSPy swallows exceptions raised in callbacks, so a budget cannot be enforced there.
  `TrackedLM` (the `dspy.LM` subclass `make_lm` returns) asks its trackers' `BudgetGuard`s before every
  call and the guard raises `BudgetExceeded` before anything is sent. Calls are reserved atomically, so
  `max_calls=N` allows exactly N calls across threads. Optimizers and `dspy.Evaluate` may catch the
  error per example; check `guard.exceeded` / call `guard.check()` after they return.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict
from typing import Any, Iterator

import dspy
from dspy.utils.callback import BaseCallback

from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.tracing import LMCallRecord, record_lm_call


class UsageTotals:
    """Thread-safe running totals of LM calls: counts, tokens, cost, latency, per predictor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.cached_calls = 0
        self.failed_calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost = 0.0
        self.latency = 0.0
        self.by_signature: dict[str, dict[str, Any]] = {}

    def add(self, record: LMCallRecord) -> None:
        with self._lock:
            self.calls += 1
            self.cached_calls += int(record.cached)
            self.prompt_tokens += record.prompt_tokens
            self.completion_tokens += record.completion_tokens
            self.cost += record.cost
            self.latency += record.latency
            per = self.by_signature.setdefault(record.signature, {"calls": 0, "prompt_tokens": 0,
                                                                  "completion_tokens": 0, "cost": 0.0})
            per["calls"] += 1
            per["prompt_tokens"] += record.prompt_tokens
            per["completion_tokens"] += record.completion_tokens
            per["cost"] += record.cost

    def add_failure(self) -> None:
        with self._lock:
            self.failed_calls += 1

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": self.calls, "cached_calls": self.cached_calls, "failed_calls": self.failed_calls,
                    "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                    "cost": self.cost, "latency": self.latency,
                    "by_signature": {name: dict(per) for name, per in self.by_signature.items()}}

    def __repr__(self) -> str:
        return (f"UsageTotals(calls={self.calls}, prompt_tokens={self.prompt_tokens}, "
                f"completion_tokens={self.completion_tokens}, cost={self.cost:.6f})")


class BudgetGuard:
    """Stops LM calls once `max_calls` calls were started or `max_cost` USD was spent.

    `before_call()` raises `ragzoo.errors.BudgetExceeded` before a call that would exceed the budget;
    once tripped, `exceeded` holds the reason and every later call is refused too.
    """

    def __init__(self, max_calls: int | None = None, max_cost: float | None = None):
        if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
            raise ConfigError(f"--max-calls must be a non-negative integer, got {max_calls!r}")
        if max_cost is not None and (not isinstance(max_cost, (int, float)) or max_cost < 0):
            raise ConfigError(f"--max-cost must be a non-negative number of USD, got {max_cost!r}")
        self.max_calls = max_calls
        self.max_cost = None if max_cost is None else float(max_cost)
        self.started = 0
        self.cost = 0.0
        self.exceeded: str | None = None
        self._lock = threading.Lock()

    def before_call(self) -> None:
        with self._lock:
            if self.exceeded is None:
                if self.max_calls is not None and self.started >= self.max_calls:
                    self.exceeded = (f"LM call budget reached ({self.started} of --max-calls {self.max_calls}); "
                                     "raise --max-calls to continue")
                elif self.max_cost is not None and self.cost >= self.max_cost:
                    self.exceeded = (f"LM cost budget reached (${self.cost:.4f} of --max-cost {self.max_cost:g}); "
                                     "raise --max-cost to continue")
            if self.exceeded is not None:
                raise BudgetExceeded(self.exceeded)
            self.started += 1

    def record(self, record: LMCallRecord) -> None:
        with self._lock:
            self.cost += record.cost

    def check(self) -> None:
        """Raise `BudgetExceeded` if the budget was hit (e.g. after an optimizer swallowed the error)."""
        if self.exceeded is not None:
            raise BudgetExceeded(self.exceeded)


def caller_name() -> str:
    """Name of the predictor making the current LM call (see `ragzoo.engines.predictor_name`)."""
    from dspy.dsp.utils import settings

    from ragzoo.engines import predictor_name

    stack = list(settings.caller_modules or [])
    caller = next((module for module in reversed(stack) if hasattr(module, "signature")), None)
    return predictor_name(caller, stack)


def find_history_entry(lm, outputs) -> dict | None:
    """The history entry DSPy wrote for the call that returned `outputs` (identity, so thread-safe)."""
    from dspy.clients.base_lm import GLOBAL_HISTORY

    for history in (getattr(lm, "history", None) or [], GLOBAL_HISTORY):
        for entry in reversed(list(history[-256:])):
            if entry.get("outputs") is outputs or entry.get("response") is outputs:
                return entry
    return None


def _priced_model(lm) -> str:
    return getattr(lm, "priced_model", None) or getattr(lm, "model", "")


class UsageTracker(BaseCallback):
    """A DSPy callback that turns every LM call into an `LMCallRecord` (see the module docstring)."""

    def __init__(self, totals: UsageTotals | None = None):
        self.totals = totals or UsageTotals()
        self.sinks: list[UsageTotals] = []
        self.guards: list[BudgetGuard] = []
        self._pending: dict[str, tuple[Any, float, str]] = {}
        self._lock = threading.Lock()

    def before_call(self) -> None:
        for guard in list(self.guards):
            guard.before_call()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self._lock:
            self._pending[call_id] = (instance, time.perf_counter(), caller_name())

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None:
            return
        lm, started, name = pending
        if exception is not None:
            for totals in (self.totals, *self.sinks):
                totals.add_failure()
            return
        record = self.make_record(lm, outputs, name, time.perf_counter() - started)
        record_lm_call(record)
        for totals in (self.totals, *self.sinks):
            totals.add(record)
        for guard in list(self.guards):
            guard.record(record)

    @staticmethod
    def make_record(lm, outputs, name: str, latency: float) -> LMCallRecord:
        entry = find_history_entry(lm, outputs) or {}
        usage = entry.get("usage") or {}
        cached = bool(entry) and not usage
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        cost = 0.0
        if not cached:
            reported = entry.get("cost")
            if getattr(lm, "priced_model", None) or reported is None:
                from ragzoo.lm import estimate_cost

                cost = estimate_cost(_priced_model(lm), prompt_tokens, completion_tokens)
            else:
                cost = float(reported)
        return LMCallRecord(signature=name, model=getattr(lm, "model", ""), prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens, cost=cost, latency=latency, cached=cached)


def _trackers(lm) -> list[UsageTracker]:
    callbacks = list(dspy.settings.get("callbacks", None) or []) + list(getattr(lm, "callbacks", None) or [])
    return [callback for callback in callbacks if isinstance(callback, UsageTracker)]


class TrackedLM(dspy.LM):
    """`dspy.LM` that checks its trackers' budgets before each call. Otherwise identical: same engines,
    adapters, cache, history and callbacks. Saved state names plain `dspy.LM` for a string engine so a
    program saved with it loads without `allow_unsafe_lm_state`."""

    priced_model: str | None = None

    def __call__(self, *args, **kwargs):
        for tracker in _trackers(self):
            tracker.before_call()
        return super().__call__(*args, **kwargs)

    async def acall(self, *args, **kwargs):
        for tracker in _trackers(self):
            tracker.before_call()
        return await super().acall(*args, **kwargs)

    @property
    def usage(self) -> UsageTotals | None:
        trackers = [callback for callback in self.callbacks if isinstance(callback, UsageTracker)]
        return trackers[0].totals if trackers else None

    def dump_state(self) -> dict[str, Any]:
        from dspy.clients.base_lm import _BUILTIN_LM_CLASS_PATH, LM_CLASS_STATE_KEY

        state = super().dump_state()
        if isinstance(self.engine, str):
            state[LM_CLASS_STATE_KEY] = _BUILTIN_LM_CLASS_PATH
        return state


def install_usage_tracking(lm, totals: UsageTotals | None = None, guard: BudgetGuard | None = None) -> UsageTracker:
    """Attach (once) a `UsageTracker` to `lm`; add `totals` as an extra sink and `guard` as a budget.

    Budgets need a `TrackedLM` (what `make_lm` returns): other LMs cannot be stopped before a call.
    """
    if guard is not None and not isinstance(lm, TrackedLM):
        raise ConfigError(f"a budget needs an LM built by ragzoo.lm.make_lm (got {type(lm).__name__})")
    tracker = next((callback for callback in lm.callbacks if isinstance(callback, UsageTracker)), None)
    if tracker is None:
        tracker = UsageTracker()
        lm.callbacks.append(tracker)
    if totals is not None and totals is not tracker.totals and totals not in tracker.sinks:
        tracker.sinks.append(totals)
    if guard is not None and guard not in tracker.guards:
        tracker.guards.append(guard)
    return tracker


@contextlib.contextmanager
def tracking(lm, totals: UsageTotals | None = None, guard: BudgetGuard | None = None) -> Iterator[UsageTotals]:
    """Count the LM's calls made inside the block into `totals` (new if not given), under `guard`."""
    totals = totals or UsageTotals()
    tracker = install_usage_tracking(lm, totals, guard)
    try:
        yield totals
    finally:
        if totals in tracker.sinks:
            tracker.sinks.remove(totals)
        if guard is not None and guard in tracker.guards:
            tracker.guards.remove(guard)


def record_as_dict(record: LMCallRecord) -> dict[str, Any]:
    return asdict(record)
