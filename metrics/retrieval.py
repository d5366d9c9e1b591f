"""Retrieval metrics at the title level, as BlendFilter reports them (Fig. 3) and as the design's reference
figures count them.

A passage is identified by its title: a `Passage` (`.title`), a dict with `title` (or `long_text`), or a
"Title | text" string (the wiki17 / ColBERTv2 form). Titles are compared after `normalize_title` (Unicode
NFC, case-folded, whitespace collapsed; no article or punctuation removal, which would merge "A" with "" and
"Cars (film)" with "Cars film"), and de-duplicated keeping the first occurrence (several chunks of one article
count once).

Per question (the dataset figure is the mean over questions that have gold titles):
- recall: |retrieved titles ∩ gold| / |gold|;
- precision: |retrieved titles ∩ gold| / |retrieved titles| (0 when nothing was retrieved);
- S-precision: 1 when the retrieved title set equals the gold set exactly (BlendFilter: "the proportion of
  questions for which the retrieved documents precisely match the golden relevant documents");
- all-gold@k: 1 when every gold title is among the first k retrieved ("both titles in top-k" for HotPotQA).
For BlendFilter the "retrieved" set is the one the answer step sees (after filtering), i.e. `pred.passages`.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Iterable, Sequence

from ragzoo.errors import DataError
from ragzoo.metrics.fields import field


def normalize_title(title: str) -> str:
    """Unicode NFC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", title).casefold().split())


def passage_title(passage: Any) -> str:
    """The title of a Passage, dict or "Title | text" string ("" when it has none)."""
    if isinstance(passage, str):
        title, sep, _ = passage.partition(" | ")
        return title if sep else ""
    if isinstance(passage, dict):
        if passage.get("title") is not None:
            return str(passage["title"])
        return passage_title(str(passage.get("long_text", "")))
    title = getattr(passage, "title", None)
    return "" if title is None else str(title)


def _titles(items: Iterable[Any], k: int | None = None, *, from_passages: bool) -> list[str]:
    items = list(items or [])
    if k is not None:
        items = items[:k]
    seen: dict[str, None] = {}
    for item in items:
        title = normalize_title(passage_title(item) if from_passages else str(item))
        if title:
            seen.setdefault(title, None)
    return list(seen)


def retrieved_titles(passages: Iterable[Any], k: int | None = None) -> list[str]:
    """Normalized, de-duplicated titles of the first k passages, in retrieval order."""
    return _titles(passages, k, from_passages=True)


def _gold(gold_titles: Iterable[str]) -> set[str]:
    gold = set(_titles(gold_titles, from_passages=False))
    if not gold:
        raise ValueError("retrieval metrics need at least one gold title")
    return gold


def title_recall(passages: Sequence[Any], gold_titles: Iterable[str], k: int | None = None) -> float:
    gold = _gold(gold_titles)
    return len(gold.intersection(retrieved_titles(passages, k))) / len(gold)


def title_precision(passages: Sequence[Any], gold_titles: Iterable[str], k: int | None = None) -> float:
    gold = _gold(gold_titles)
    found = retrieved_titles(passages, k)
    return len(gold.intersection(found)) / len(found) if found else 0.0


def s_precision(passages: Sequence[Any], gold_titles: Iterable[str], k: int | None = None) -> float:
    return float(set(retrieved_titles(passages, k)) == _gold(gold_titles))


def all_gold_retrieved(passages: Sequence[Any], gold_titles: Iterable[str], k: int | None = None) -> float:
    return float(_gold(gold_titles).issubset(retrieved_titles(passages, k)))


# --- DSPy-metric forms -------------------------------------------------------------------------------

def gold_titles(example: Any) -> list[str]:
    """`supporting_titles`, else `gold_titles`, else the titles of `supporting_facts`; a `DataError` when the
    example has none (retrieval metrics need a split with gold titles, e.g. hotpotqa dev_distractor)."""
    titles = gold_titles_if_any(example)
    if titles is None:
        raise DataError(f"example {field(example, 'id', '?')!r} has no gold titles (supporting_titles); use a "
                        f"split that has them, e.g. hotpotqa dev_distractor")
    return titles


def gold_titles_if_any(example: Any) -> list[str] | None:
    """`gold_titles`, or None where it would raise (stage diagnostics ask it of every question of a run)."""
    for name in ("supporting_titles", "gold_titles"):
        value = field(example, name)
        if value:  # one title as a string (a CSV cell) is one title, not its letters
            return [value] if isinstance(value, str) else [str(title) for title in value]
    facts = field(example, "supporting_facts")
    if facts:
        return list(dict.fromkeys(str(fact[0]) for fact in facts if fact))
    return None


# the metrics that score retrieved titles against the gold ones: a question set without gold titles cannot have them
TITLE_METRICS = ("recall", "precision", "s_precision", "all_gold")


def check_gold_titles(metric_names: list[str], examples: list) -> None:
    """Before a run: a title metric asked of questions that have no gold titles would score 0 on every one (its
    error is a metric failure, which scores 0), so it is refused in one line, naming how many lack them."""
    asked = [name for name in metric_names if name in TITLE_METRICS]
    if not asked or not examples:
        return
    lacking = 0
    for example in examples:
        try:
            gold_titles(example)
        except DataError:
            lacking += 1
    if lacking:
        raise DataError(f"--metric {','.join(asked)} scores retrieved titles against gold titles, which {lacking} of "
                        f"these {len(examples)} questions lack (supporting_titles); use a split that has them, e.g. "
                        f"hotpotqa dev_distractor, or drop {'it' if len(asked) == 1 else 'them'}")


def predicted_passages(pred: Any) -> list:
    """`pred.passages`, else `pred.context` (DSPy's list of "Title | text"); [] for a failed prediction."""
    for name in ("passages", "context"):
        value = field(pred, name)
        if isinstance(value, (list, tuple)):
            return list(value)
    return []


def recall_metric(example, pred, trace=None) -> float:
    return title_recall(predicted_passages(pred), gold_titles(example))


def precision_metric(example, pred, trace=None) -> float:
    return title_precision(predicted_passages(pred), gold_titles(example))


def s_precision_metric(example, pred, trace=None) -> float:
    return s_precision(predicted_passages(pred), gold_titles(example))


def all_gold_metric(example, pred, trace=None) -> float:
    return all_gold_retrieved(predicted_passages(pred), gold_titles(example))


def retrieval_report(examples: Sequence[Any], preds: Sequence[Any], k: int | None = None) -> dict:
    """Mean recall, precision, S-precision and all-gold rate over the examples that have gold titles
    (`n` = how many counted, `skipped` = how many had no gold titles)."""
    totals = {"recall": 0.0, "precision": 0.0, "s_precision": 0.0, "all_gold": 0.0}
    counted = skipped = 0
    for example, pred in zip(examples, preds, strict=True):
        try:
            gold = gold_titles(example)
        except DataError:
            skipped += 1
            continue
        passages = predicted_passages(pred)
        totals["recall"] += title_recall(passages, gold, k)
        totals["precision"] += title_precision(passages, gold, k)
        totals["s_precision"] += s_precision(passages, gold, k)
        totals["all_gold"] += all_gold_retrieved(passages, gold, k)
        counted += 1
    means = {name: (value / counted if counted else 0.0) for name, value in totals.items()}
    return {**means, "n": counted, "skipped": skipped}
