"""Which questions a compiled program has seen, so that nobody scores it on them without knowing.

A compile trains on some questions and validates (selects demos, candidates or instructions) on others: a
score on any of them is not a held-out score. `compile_program` marks the program with what it saw
(`mark_seen`), `ragzoo.artifacts.save` writes that into the manifest and `load` reads it back, and an
evaluation counts the overlap with its own questions (`overlap`): `ragzoo evaluate` warns loudly and records
the count in the run, and refuses with `--refuse-leakage` (what grids use).

Questions are matched by their normalised text (lower case, punctuation and extra spaces dropped), not by id:
ids are per split in some datasets, and the same question in two splits (StrategyQA's train and its paper's
evaluation subset, for one) is the leak that matters. A short hash of each question is stored, not the text.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

_ATTRIBUTE = "_ragzoo_seen_questions"
_PUNCTUATION = re.compile(r"[^\w\s]")
MAX_RECORDED = 100_000  # bounded: a manifest stays small whatever the compile pool


def question_key(question: str) -> str:
    text = " ".join(_PUNCTUATION.sub(" ", str(question).lower()).split())
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _questions(examples: Iterable) -> list[str]:
    keys = []
    for example in examples:
        question = example.get("question") if hasattr(example, "get") else None
        if question:
            keys.append(question_key(question))
    return keys


def mark_seen(program, trainset: Iterable = (), valset: Iterable = ()) -> None:
    """Remember on `program` the questions a compile trained and validated on (added to what it saw before)."""
    seen = dict(seen_by(program) or {})
    for role, examples in (("train", trainset), ("dev", valset)):
        keys = list(dict.fromkeys([*seen.get(role, []), *_questions(examples)]))
        if keys:
            seen[role] = keys[:MAX_RECORDED]
    if seen:
        object.__setattr__(program, _ATTRIBUTE, seen)


def seen_by(program) -> dict[str, list[str]] | None:
    """{"train": [...], "dev": [...]} question hashes, or None for a program no compile marked."""
    seen = getattr(program, _ATTRIBUTE, None)
    return seen if isinstance(seen, dict) else None


def restore(program, recorded) -> None:
    """Put back what a manifest recorded (ignored unless it has the expected shape)."""
    if isinstance(recorded, dict) and all(isinstance(v, list) and all(isinstance(k, str) for k in v)
                                          for v in recorded.values()):
        object.__setattr__(program, _ATTRIBUTE, {str(role): list(keys)[:MAX_RECORDED]
                                                 for role, keys in recorded.items()})


def overlap(program, examples: Iterable) -> dict[str, int]:
    """How many of `examples` the program trained / validated on: {"train": n, "dev": m} (empty: none)."""
    seen = seen_by(program)
    if not seen:
        return {}
    keys = _questions(examples)
    counts = {}
    for role, recorded in seen.items():
        recorded_set = set(recorded)
        hits = sum(1 for key in keys if key in recorded_set)
        if hits:
            counts[role] = hits
    return counts
