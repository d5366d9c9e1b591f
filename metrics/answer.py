"""Answer metrics on plain strings: exact match, token F1, yes/no accuracy, substring match.

Normalization is the official SQuAD / HotPotQA `normalize_answer` (lower-case, drop ASCII punctuation, drop
the articles a/an/the, collapse whitespace), preceded by Unicode NFD exactly as DSPy's `normalize_text`, so
composed and decomposed forms of "é" compare equal and our EM/F1 agree with DSPy's. Every function takes the
gold answers as a list (or one string) and returns the best score over them, as a float in [0, 1].
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import Iterable

_PUNCTUATION_BYTES = string.punctuation.encode("ascii")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# HotPotQA's official F1 scores 0 when either side is one of these and they differ.
_SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})
_YES = frozenset({"yes", "true"})
_NO = frozenset({"no", "false"})


def _unpunctuated(text: str) -> str:
    """NFD, lower-case, ASCII punctuation removed: `normalize_answer` before its article and whitespace passes."""
    text = unicodedata.normalize("NFD", text).lower()
    # dropped from the UTF-8 bytes in one C pass (an ASCII byte is never part of a multi-byte character):
    # stage diagnostics normalize every passage a question retrieved, and character by character this was most
    # of their cost
    return text.encode("utf-8", "surrogatepass").translate(None, _PUNCTUATION_BYTES).decode("utf-8", "surrogatepass")


def normalize_answer(text: str) -> str:
    """NFD, lower-case, remove punctuation, remove articles, collapse whitespace (SQuAD/HotPotQA order)."""
    return " ".join(_ARTICLES.sub(" ", _unpunctuated(text)).split())


def contains_normalized(text: str, expected: Iterable[str]) -> bool:
    """Whether one of `expected` (golds already `normalize_answer`ed, non-empty) is a substring of the normalized
    `text`. The article and whitespace passes only turn characters into spaces, so each space-free piece of a
    match is a substring of the text before them: a text that lacks a piece of every gold (most passages of a
    question) is judged without those passes."""
    unpunctuated = _unpunctuated(text)
    candidates = [gold for gold in expected if all(piece in unpunctuated for piece in gold.split())]
    if not candidates:
        return False
    normalized = " ".join(_ARTICLES.sub(" ", unpunctuated).split())
    return any(gold in normalized for gold in candidates)


def _golds(golds: str | Iterable[str] | None) -> list[str]:
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    return [str(gold) for gold in golds if gold is not None]


def _text(prediction) -> str:
    return "" if prediction is None else str(prediction)


def exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 when the normalized prediction equals a normalized gold answer, else 0.0."""
    normalized = normalize_answer(_text(prediction))
    return float(any(normalized == normalize_answer(gold) for gold in _golds(golds)))


def token_f1(prediction: str | None, gold: str, *, hotpot_special_case: bool = True) -> float:
    """Token-level F1 of one prediction against one gold answer, after normalization.

    hotpot_special_case: HotPotQA's official rule, a yes/no/noanswer mismatch scores 0 (plain SQuAD F1
    would give partial credit to, say, "no" against "no way"). Two empty strings score 0, as in DSPy."""
    predicted, expected = normalize_answer(_text(prediction)), normalize_answer(gold)
    if hotpot_special_case and (predicted in _SPECIAL_ANSWERS or expected in _SPECIAL_ANSWERS) \
            and predicted != expected:
        return 0.0
    predicted_tokens, expected_tokens = predicted.split(), expected.split()
    overlap = sum((Counter(predicted_tokens) & Counter(expected_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(expected_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str | None, golds: str | Iterable[str], *, hotpot_special_case: bool = True) -> float:
    """Best token F1 over the gold answers (0.0 without golds)."""
    return max((token_f1(prediction, gold, hotpot_special_case=hotpot_special_case) for gold in _golds(golds)),
               default=0.0)


def yes_no(value) -> bool | None:
    """Read a yes/no answer: a bool as is; a string by its leading word after normalization
    (yes/true -> True, no/false -> False; "Yes, because ..." -> True); anything else -> None."""
    if isinstance(value, bool):
        return value
    if value is None:
        return None
    words = normalize_answer(str(value)).split()
    if not words:
        return None
    if words[0] in _YES:
        return True
    if words[0] in _NO:
        return False
    return None


def accuracy(prediction, gold) -> float:
    """Yes/no accuracy (StrategyQA): 1.0 when the prediction's leading yes/no/true/false agrees with the gold
    label (a bool, "yes"/"no", or a list whose first element is one). An unreadable side scores 0."""
    if isinstance(gold, (list, tuple)):
        gold = gold[0] if gold else None
    expected, predicted = yes_no(gold), yes_no(prediction)
    return float(expected is not None and predicted is not None and expected == predicted)


def contains(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 when a normalized gold answer is a substring of the normalized prediction ("acc" as FlashRAG and
    ActiveRAG report it). Golds that normalize to nothing (e.g. "The") never match."""
    expected = [normalized for normalized in map(normalize_answer, _golds(golds)) if normalized]
    return float(bool(expected) and contains_normalized(_text(prediction), expected))
