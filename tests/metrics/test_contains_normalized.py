"""`metrics.answer.contains_normalized`, the evidence judge of stage diagnostics: the same verdict as normalizing
the whole text (SQuAD's rule, character by character) on texts built to catch a shortcut that is not exact:
articles glued to punctuation or to non-ASCII marks, decomposed accents, odd whitespace, golds split by
punctuation in the text."""

from __future__ import annotations

import random
import re
import string

import pytest

from ragzoo.metrics.answer import contains, contains_normalized, normalize_answer

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def reference_normalize(text: str) -> str:
    """The official normalization, written out as SQuAD's script does it."""
    import unicodedata

    text = unicodedata.normalize("NFD", text).lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


PIECES = ["the", "The", "a", "an", "A.", "o.bama", "Obama", "barack", "thé", "the\u0301", "–", "’", "\u00a0", "\t",
          "\n", " ", "  ", ",", "(", ")", "\"", "l’a", "x", "an-", "-the", "ÉCOLE", "e\u0301cole", "U.S.", "us",
          "1999", "19.99", "new york", "new-york", "\ud800", "ﬁ", "Ａ", "the–end", "_the_", "ca", "t", "he"]
GOLDS = ["Barack Obama", "the Obama", "New York", "U.S.", "1999", "école", "the end", "A", "x x", "he t",
         "l’a", "an"]


def texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(0, 14)))
            for _ in range(count)]


@pytest.mark.parametrize("seed", range(4))
def test_contains_normalized_agrees_with_normalizing_the_whole_text(seed):
    golds = [reference_normalize(gold) for gold in GOLDS]
    golds = [gold for gold in golds if gold]
    found = 0
    for text in texts(seed, 1500):
        for gold in golds:
            expected = gold in reference_normalize(text)
            assert contains_normalized(text, [gold]) is expected, (text, gold)
            found += expected
        assert contains_normalized(text, golds) is any(gold in reference_normalize(text) for gold in golds)
    assert found > 100  # the texts do hold golds, often in shapes only the full normalization finds


def test_normalize_answer_is_still_the_official_one():
    for text in texts(99, 3000):
        assert normalize_answer(text) == reference_normalize(text), text


def test_contains_keeps_its_rules():
    assert contains("He was born in Honolulu, Hawaii.", ["honolulu"]) == 1.0
    assert contains("Barack O.bama", ["Obama"]) == 1.0  # punctuation inside a word goes before the match
    assert contains("the end", ["The"]) == 0.0  # a gold that normalizes to nothing never matches
    assert contains(None, ["x"]) == 0.0 and contains("x", []) == 0.0
