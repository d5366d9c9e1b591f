"""What every ragzoo program shares: a retriever held as configuration, and retrieval that is recorded
in the per-example trace."""

from __future__ import annotations

import time

import dspy

from ragzoo.retrieval.base import Passage, check_k
from ragzoo.tracing import record_retrieval


class _SharedRetriever:
    """Wraps a retriever so that copying a program (DSPy optimizers deep-copy students many times)
    shares the index instead of copying it: a retriever is configuration, not learnable state."""

    __slots__ = ("inner",)

    def __init__(self, inner):
        self.inner = inner

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __call__(self, query: str, k: int) -> list[Passage]:
        return self.inner(query, k)

    @property
    def spec(self) -> str:
        return getattr(self.inner, "spec", type(self.inner).__name__)


class RagProgram(dspy.Module):
    """Base of retrieval-augmented programs. Subclasses declare predictors in `__init__` (after calling
    `super().__init__(retriever)`) and write the paper's control flow in `forward`."""

    def __init__(self, retriever=None):
        super().__init__()
        self._retriever = None if retriever is None else (
            retriever if isinstance(retriever, _SharedRetriever) else _SharedRetriever(retriever))

    @property
    def retriever(self):
        return self._retriever

    def retrieve(self, query: str, k: int) -> list[Passage]:
        """Retrieve top-k passages for `query` and record the retrieval in the current trace."""
        if self._retriever is None:
            raise RuntimeError(f"{type(self).__name__} was built without a retriever")
        check_k(k)
        started = time.perf_counter()
        passages = list(self._retriever(query, k))
        record_retrieval(query, k, [p.pid for p in passages], time.perf_counter() - started)
        return passages


def passages_as_context(passages: list[Passage]) -> list[str]:
    """The context list a signature sees: "Title | text" per passage, in order."""
    return [p.long_text for p in passages]


def dedup_passages(*groups: list[Passage]) -> list[Passage]:
    """Union of passage lists, first occurrence wins, order kept (by pid, else by long_text)."""
    seen: set[str] = set()
    merged: list[Passage] = []
    for group in groups:
        for passage in group:
            key = passage.pid or passage.long_text
            if key not in seen:
                seen.add(key)
                merged.append(passage)
    return merged
