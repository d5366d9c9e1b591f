"""Per-example accounting: LM calls and retrievals made while one example runs, and what real models did
to it: re-asks after an unreadable reply (`record_reask`, written by `ragzoo.adapters`) and the
degradations a method chose when a call stayed unreadable (`record_degradation`, written by programs).

A trace is bound to the current context (thread or task) with `trace_example()`; programs record
retrievals through `record_retrieval`, and the LM layer records calls through `record_lm_call`. Nothing
is recorded when no trace is active, so programs cost nothing extra outside evaluation.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, field
from typing import Iterator

# texts are cut to a length: a key is hidden before the cut, as a cut key is no longer its known value
from ragzoo.secrets import redact


@dataclass
class LMCallRecord:
    signature: str
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    cached: bool = False
    # a cache hit spends nothing: its tokens (counted on the text) and list-price cost are kept here, so a
    # report can show tokens and cost as if uncached beside what was spent
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    cached_cost: float = 0.0
    # what was sent and what came back, kept only while `keeping_call_texts()` is on (`evaluate --keep-prompts`)
    prompt: list[dict] | None = None  # [{"role", "content"}]
    reply: str | None = None


@dataclass
class RetrievalRecord:
    query: str
    k: int
    pids: list[str]
    latency: float = 0.0


@dataclass
class ExampleTrace:
    lm_calls: list[LMCallRecord] = field(default_factory=list)
    retrievals: list[RetrievalRecord] = field(default_factory=list)
    reasks: list[dict] = field(default_factory=list)  # {"predictor", "reason"} per re-ask sent
    lenient: list[dict] = field(default_factory=list)  # {"predictor", "how"} per reply read only leniently
    degradations: list[dict] = field(default_factory=list)  # {"where", "what"} per degradation a method chose
    started: float = field(default_factory=time.perf_counter)

    @property
    def prompt_tokens(self) -> int:
        return sum(call.prompt_tokens for call in self.lm_calls)

    @property
    def completion_tokens(self) -> int:
        return sum(call.completion_tokens for call in self.lm_calls)

    @property
    def cost(self) -> float:
        return sum(call.cost for call in self.lm_calls)

    def summary(self) -> dict:
        return {
            "lm_calls": len(self.lm_calls),
            "retrievals": len(self.retrievals),
            "reasks": len(self.reasks),
            "degradations": len(self.degradations),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
            "latency": time.perf_counter() - self.started,
        }


_current: contextvars.ContextVar[ExampleTrace | None] = contextvars.ContextVar("ragzoo_trace", default=None)


def current_trace() -> ExampleTrace | None:
    return _current.get()


@contextlib.contextmanager
def trace_example() -> Iterator[ExampleTrace]:
    trace = ExampleTrace()
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)


_keep_texts = [0]  # process-wide: the evaluation's worker threads (and forked processes) must see it


def texts_kept() -> bool:
    return _keep_texts[0] > 0


@contextlib.contextmanager
def keeping_call_texts(on: bool = True) -> Iterator[None]:
    """While on, each LM call's record keeps its prompt messages and reply (`LMCallRecord.prompt`, `.reply`),
    so a run record can show what the model saw (`ragzoo evaluate --keep-prompts`, `report --html`)."""
    _keep_texts[0] += 1 if on else 0
    try:
        yield
    finally:
        _keep_texts[0] -= 1 if on else 0


def record_retrieval(query: str, k: int, pids: list[str], latency: float = 0.0) -> None:
    trace = _current.get()
    if trace is not None:
        trace.retrievals.append(RetrievalRecord(query=query, k=k, pids=pids, latency=latency))


def record_lm_call(record: LMCallRecord) -> None:
    trace = _current.get()
    if trace is not None:
        trace.lm_calls.append(record)


def record_reask(predictor: str, reason: str) -> None:
    trace = _current.get()
    if trace is not None:
        trace.reasks.append({"predictor": predictor, "reason": redact(reason)[:200]})


def record_lenient(predictor: str, how: str) -> None:
    trace = _current.get()
    if trace is not None:
        trace.lenient.append({"predictor": predictor, "how": how})


def record_degradation(where: str, what: str) -> None:
    """Record that a method went on without a call's output, and how (e.g. `record_degradation("filter",
    "kept the set unfiltered: the filter's reply could not be read")`). Programs call this where they catch
    `ragzoo.adapters.UnreadableOutput`; the run record counts and lists it per example."""
    trace = _current.get()
    if trace is not None:
        trace.degradations.append({"where": where, "what": redact(what)[:300]})


# Whether a cache answered the LM call running in this context: DSPy's history gives a cache hit and a reply
# without `usage` alike no usage, so the usage meter opens a mark as a call starts and the cache sets it
_CACHE_MARK: contextvars.ContextVar = contextvars.ContextVar("ragzoo_cache_mark", default=None)


def open_cache_mark() -> list:
    """A fresh mark ([False]) for the LM call starting in this context."""
    mark = [False]
    _CACHE_MARK.set(mark)
    return mark


def mark_cache_hit() -> None:
    """Mark the LM call running in this context as answered from a cache (DSPy's response cache, or the dry-run
    estimate's model of it: a repeated identical request is free)."""
    mark = _CACHE_MARK.get()
    if mark is not None:
        mark[0] = True
