"""The retrieval contract every backend and every program shares."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from ragzoo.errors import RetrieverError

MAX_K = 100


def _one_native_thread_after_fork() -> None:
    """In a forked child (evaluate's worker processes): the forking thread's faiss and torch parallel regions run
    on one thread. fork() copies only the forking thread, so the OpenMP pool a parent search started is not in the
    child, and libgomp's next parallel region in that thread waits for it for ever (measured: faiss 1.15.1 on
    20,000+ vectors, torch on 64 queries); one thread needs no pool. A thread the child starts has no such pool and
    makes its own (checked: a 40,000-vector search on 2 threads in a new thread of the child finishes), capped to
    the usable CPUs by `ragzoo.machine.cap_faiss_in_this_thread`.
    Registered here, where every retriever's contract lives, so it holds for any backend that runs them (dense,
    hybrid, colbert), imported or not before the fork."""
    faiss = sys.modules.get("faiss")  # one not imported yet starts its pool afresh in the child
    if faiss is not None:
        faiss.omp_set_num_threads(1)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_one_native_thread_after_fork)


@dataclass(frozen=True)
class Passage:
    """One retrieved passage. `long_text` is "Title | text", the form the wiki17 abstracts collection and
    DSPy's ColBERTv2 client use."""

    pid: str
    title: str
    text: str
    score: float = 0.0
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def long_text(self) -> str:
        return f"{self.title} | {self.text}" if self.title else self.text

    def to_dict(self) -> dict:
        data = asdict(self)
        if not data["meta"]:
            data.pop("meta")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Passage":
        return cls(pid=str(data["pid"]), title=data.get("title", ""), text=data.get("text", ""),
                   score=float(data.get("score", 0.0)), meta=dict(data.get("meta", {})))

    @classmethod
    def from_long_text(cls, long_text: str, pid: str = "", score: float = 0.0) -> "Passage":
        title, sep, text = long_text.partition(" | ")
        if not sep:
            return cls(pid=pid, title="", text=long_text, score=score)
        return cls(pid=pid, title=title, text=text, score=score)


@runtime_checkable
class Retriever(Protocol):
    """`retriever(query, k)` returns the top-k passages, best first; `batch` does many queries at once."""

    spec: str

    def __call__(self, query: str, k: int) -> list[Passage]: ...

    def batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


def check_k(k: int, max_k: int = MAX_K) -> int:
    """Validate k: an int in 1..max_k."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise RetrieverError(f"k must be an integer in 1..{max_k}, got {k!r}")
    if not 1 <= k <= max_k:
        raise RetrieverError(f"k must be in 1..{max_k}, got {k}")
    return k


def cut_to_tokens(query: str, tokenizer, budget: int) -> str:
    """The prefix of `query` that holds its first `budget` tokens under a (fast) Hugging Face tokenizer,
    special tokens aside; the whole query if it has no more."""
    encoded = tokenizer(query, add_special_tokens=False, truncation=False, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    if len(offsets) <= budget:
        return query
    return query[:offsets[max(1, budget) - 1][1]]


def check_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise RetrieverError("the query is empty")
    return query


class BaseRetriever:
    """Shared validation and a default batch form for backends."""

    spec: str = ""
    # True when searching runs native thread pools (OpenMP, torch): a pool the process used does not survive
    # fork(), so `runs.auto_processes` keeps such a retriever in one process.
    native_threads: bool = False

    def __call__(self, query: str, k: int) -> list[Passage]:
        check_query(query)
        check_k(k)
        return self._search(query, k)

    def batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        check_k(k)
        for query in queries:
            check_query(query)
        return self._search_batch(list(queries), k)

    def warm_up(self) -> None:
        """Do once, before serving, what would otherwise slow the first queries (a server calls it before it
        says ready). Nothing by default."""

    def truncate_query(self, query: str) -> str | None:
        """The leading part of `query` this backend actually reads, when it cuts long queries itself (a
        token budget: colbert, dense encoders), so a server may cut an over-long query there instead of
        refusing it. None (the default): every character counts (bm25), nothing may be cut."""
        return None

    def _search(self, query: str, k: int) -> list[Passage]:
        raise NotImplementedError

    def _search_batch(self, queries: list[str], k: int) -> list[list[Passage]]:
        return [self._search(query, k) for query in queries]
