"""Per-example accounting: LM calls and retrievals made while one example runs.

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


@dataclass
class LMCallRecord:
    signature: str
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    cached: bool = False


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


def record_retrieval(query: str, k: int, pids: list[str], latency: float = 0.0) -> None:
    trace = _current.get()
    if trace is not None:
        trace.retrievals.append(RetrievalRecord(query=query, k=k, pids=pids, latency=latency))


def record_lm_call(record: LMCallRecord) -> None:
    trace = _current.get()
    if trace is not None:
        trace.lm_calls.append(record)
