"""Replay of recorded retrievals: passages given per question (e.g. ActiveRAG's top-5 `retrieved` field),
so an experiment can reuse a paper's exact retrieval. Any other query is an error, never a guess.

A k above what was recorded returns every recorded passage, fewer than k (ActiveRAG's samples hold 5, so a
top-10 run over them is a top-5 run); the program says so once per run (`RagProgram.retrieve` logs any
retriever that returns fewer than k), and the grids retrieve top-10 with a real retriever instead."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping, Sequence

from ragzoo.errors import ConfigError, DataError, RetrieverError
from ragzoo.retrieval.base import BaseRetriever, Passage


def _normalize(question: str) -> str:
    return " ".join(question.split())


def _as_passage(item: Any) -> Passage:
    if isinstance(item, Passage):
        return item
    if isinstance(item, str):
        passage = Passage.from_long_text(item)
    elif isinstance(item, Mapping):
        text = item.get("text", item.get("contents", ""))
        if isinstance(text, list):
            text = " ".join(text)
        passage = Passage(pid=str(item.get("pid", item.get("id", ""))), title=str(item.get("title", "")),
                          text=str(text), score=float(item.get("score", 0.0) or 0.0))
    else:
        raise ConfigError(f"a recorded passage must be a dict with title/text or a string, got {type(item).__name__}")
    if not passage.pid:  # a stable id from the content, so dedup and traces work
        digest = hashlib.sha1(passage.long_text.encode("utf-8")).hexdigest()[:12]
        passage = Passage(f"fixed-{digest}", passage.title, passage.text, passage.score, passage.meta)
    return passage


class FixedRetriever(BaseRetriever):
    spec = "fixed"

    def __init__(self, by_question: Mapping[str, Sequence[Passage | Mapping | str]]):
        self.by_question = {_normalize(question): [_as_passage(item) for item in items]
                            for question, items in by_question.items()}

    @classmethod
    def from_examples(cls, examples: Iterable[Any], field: str = "retrieved",
                      question_field: str = "question") -> "FixedRetriever":
        by_question: dict[str, list] = {}
        for example in examples:
            get = example.get if hasattr(example, "get") else lambda name, default=None: getattr(example, name, default)
            question, recorded = get(question_field), get(field)
            if question is None or recorded is None:
                continue
            if isinstance(recorded, (str, bytes, dict)) or not hasattr(recorded, "__iter__"):
                raise DataError(f"the fixed retriever's {field!r} of question {str(question)[:80]!r} must be a list of "
                                f"passages, got {type(recorded).__name__}")
            by_question[question] = list(recorded)
        if not by_question:
            raise ConfigError(f"the fixed retriever found no examples with both {question_field!r} and "
                              f"{field!r}; use a dataset that records its retrieved passages "
                              f"(e.g. nq_open/dev_activerag500.jsonl)")
        return cls(by_question)

    def __len__(self) -> int:
        return len(self.by_question)

    def _search(self, query: str, k: int) -> list[Passage]:
        recorded = self.by_question.get(_normalize(query))
        if recorded is None:
            raise RetrieverError(f"the fixed retriever has no recorded passages for {query[:80]!r}; it only "
                                 f"replays the retrievals recorded for its dataset's questions "
                                 f"(methods that rewrite queries need a real retriever)")
        return list(recorded[:k])
