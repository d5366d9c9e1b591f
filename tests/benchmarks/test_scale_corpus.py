"""The scale benchmark's synthetic corpus: the sample first, then resampled abstracts whose names mostly
become look-alikes (so question entities stay rare), or plain resampling with keep_names=1."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.scale import _names, synthetic_corpus

WORD = re.compile(r"\w+")


@pytest.fixture(scope="module")
def sample_titles(wiki17_corpus):
    return [json.loads(line)["title"] for line in open(wiki17_corpus, encoding="utf-8")]


def _lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _passages_with(rows, word):
    return sum(word in WORD.findall(row["title"] + " " + " ".join(row["text"])) for row in rows)


def test_sample_comes_first_then_resampled_passages_with_rare_names(tmp_path, wiki17_corpus, sample_titles):
    path = tmp_path / "corpus.jsonl"
    info = synthetic_corpus(wiki17_corpus, path, 40_000, keep_names=0.02)
    rows = _lines(path)
    assert len(rows) == 40_000 and info["sample names"] > 1000
    assert [row["title"] for row in rows[:len(sample_titles)]] == sample_titles  # passage i = sample abstract i
    assert all(set(row) == {"title", "text"} and isinstance(row["text"], list) for row in rows[-100:])
    sample, resampled = rows[:len(sample_titles)], rows[len(sample_titles):]
    # a name (Kerensky) is in a handful of resampled passages; a common word (war) in as many as resampling gives
    name_ratio = _passages_with(resampled, "Kerensky") / max(1, _passages_with(sample, "Kerensky"))
    word_ratio = _passages_with(resampled, "war") / _passages_with(sample, "war")
    assert name_ratio < 0.3 * word_ratio
    assert word_ratio > 0.8  # ~22k resampled vs 17.7k sample passages
    assert any(re.search(r"\w+zq[0-9a-f]+\b", " ".join(row["text"])) for row in resampled[:200])


def test_keep_names_one_is_plain_resampling(tmp_path, wiki17_corpus, sample_titles):
    path = tmp_path / "plain.jsonl"
    synthetic_corpus(wiki17_corpus, path, 20_000, keep_names=1.0)
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"[A-Za-z]zq[0-9a-f]+\b", text)


def test_names_are_capitalized_words_of_few_occurrences():
    sentences = ["Kerensky led the party.", "The party of Kerensky fell.", "It was Kerensky again.",
                 "A big River flows.", "The river is long.", "Paris is big."] + ["In Paris it rains."] * 60
    names = _names(sentences)
    assert "Kerensky" in names
    assert "River" not in names  # written lower-case too
    assert "Paris" not in names  # more than 50 times: scales like a common word
    assert "The" not in names and "A" not in names  # only ever the first word
