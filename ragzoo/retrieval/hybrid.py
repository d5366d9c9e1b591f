"""Hybrid retrieval: reciprocal-rank fusion (Cormack et al., 2009) of BM25 and dense rankings.
score(d) = sum over rankings of 1 / (c + rank(d)), rank from 1, each ranking cut at `depth`; c = 60 and
depth = 100 as in the reference measurements. Ties keep the order of first appearance (bm25 first)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ragzoo.retrieval.base import MAX_K, BaseRetriever, Passage, Retriever


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int, c: float = 60.0) -> list[Passage]:
    fused: dict[str, float] = {}
    first_seen: dict[str, Passage] = {}
    for ranking in rankings:
        for rank, passage in enumerate(ranking, start=1):
            fused[passage.pid] = fused.get(passage.pid, 0.0) + 1.0 / (c + rank)
            first_seen.setdefault(passage.pid, passage)
    order = sorted(fused, key=lambda pid: -fused[pid])  # sorted() is stable: ties keep first appearance
    return [Passage(pid, first_seen[pid].title, first_seen[pid].text, fused[pid], first_seen[pid].meta)
            for pid in order[:k]]


class HybridRetriever(BaseRetriever):
    def __init__(self, retrievers: Sequence[Retriever], spec: str = "hybrid", c: float = 60.0,
                 depth: int = MAX_K):
        self.retrievers = list(retrievers)
        self.spec = spec
        self.c = c
        self.depth = depth

    @classmethod
    def from_corpus(cls, corpus: str | Path, spec: str = "", model: str | None = None,
                    show_progress: bool = True, **kwargs) -> "HybridRetriever":
        from ragzoo.retrieval.bm25 import BM25Retriever
        from ragzoo.retrieval.dense import DEFAULT_MODEL, DenseRetriever

        sparse = BM25Retriever.from_corpus(corpus, show_progress=show_progress)
        dense = DenseRetriever.from_corpus(corpus, model=model or DEFAULT_MODEL, show_progress=show_progress)
        return cls([sparse, dense], spec=spec or f"hybrid:{corpus}", **kwargs)

    @property
    def native_threads(self) -> bool:
        return any(getattr(retriever, "native_threads", False) for retriever in self.retrievers)

    def __len__(self) -> int:
        return len(self.retrievers[0])  # type: ignore[arg-type]

    def _search(self, query: str, k: int) -> list[Passage]:
        return reciprocal_rank_fusion([r(query, max(k, self.depth)) for r in self.retrievers], k, self.c)

    def _search_batch(self, queries: list[str], k: int) -> list[list[Passage]]:
        per_retriever = [r.batch(queries, max(k, self.depth)) for r in self.retrievers]
        return [reciprocal_rank_fusion([rankings[i] for rankings in per_retriever], k, self.c)
                for i in range(len(queries))]
