"""Query tokenisation for bm25 (ragzoo.retrieval.query_terms): the same token ids as bm25s's tokenizer, on every
HotPotQA question of the data folder and on adversarial strings, from a cache that stays bounded."""

from __future__ import annotations

import json

import pytest

from ragzoo.retrieval.bm25 import BM25Settings, make_tokenizer
from ragzoo.retrieval.query_terms import QueryTerms

ADVERSARIAL = [
    "", " ", "\n\t", "the of and a an is", "THE Of AnD", "!!! ??? ... --- ,,,", "a b c d e", "x y z",
    "Who wrote 'Ulysses'?", "naïve café résumé Ångström", "İstanbul ISTANBUL ıstanbul", "Straße STRASSE strasse",
    "東京 北京市 서울", "emoji 🙂🙂 test🙂ing", "e\u0301cole ecole", "ﬁnance ﬁnancial", "under_score __init__ snake_case",
    "1990s 1,000,000 3.14 007 2nd", "running runs ran runner", "films film filming filmed",
    "Arthur's Magazine or First for Women?", "don't won't can't", "a" * 300, "word " * 50,
    "ΣΊΣΥΦΟΣ σίσυφος", "ǅemal Ǆ", "zzyzx qqqqq", "the the the film film", "\u200bzero\u200bwidth",
    # the separators str.split() splits on besides the space (a query is split on whitespace first)
    "film\u3000river\u00a0Paris", "film\x1criver\x1dParis\x1eopera\x1fharbor",
    "film\u2028river\u2029Paris\u0085opera",
    "film\u180eriver", "  film\t\triver\r\nParis\x0b\x0copera  ", "film,river;Paris.(opera)", "Film, film. FILM!",
]


def _questions(data_dir) -> list[str]:
    questions = []
    for path in sorted((data_dir / "hotpotqa").glob("*.jsonl")):
        for line in open(path, encoding="utf-8"):
            row = json.loads(line)
            if "question" in row:
                questions.append(row["question"])
    return questions


@pytest.fixture(scope="module")
def indexed(wiki17_corpus):
    """bm25s's tokenizer after indexing the sample (its vocabulary is the index's), as the benchmark uses it."""
    from ragzoo.retrieval.corpus import iter_corpus

    tokenizer = make_tokenizer(BM25Settings())
    texts = [p.long_text for p in iter_corpus(wiki17_corpus)] + ADVERSARIAL
    list(tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=False))
    return tokenizer


def _bm25s_ids(tokenizer, texts):
    return list(tokenizer.streaming_tokenize(texts, update_vocab=False, allow_empty=False))


def _fresh(settings: BM25Settings, vocab: dict):
    """A query-only bm25s tokenizer over `vocab`, as BM25Retriever set one up."""
    tokenizer = make_tokenizer(settings)
    if tokenizer.stemmer:
        tokenizer.stem_to_sid = vocab
    else:
        tokenizer.word_to_id = dict(vocab)
    return tokenizer


def test_same_ids_as_bm25s_on_every_hotpotqa_question(indexed, data_dir):
    questions = _questions(data_dir)
    assert len(questions) >= 500
    terms = QueryTerms.from_tokenizer(indexed)
    ours = terms.many(questions)
    assert ours == _bm25s_ids(_fresh(BM25Settings(), indexed.stem_to_sid), questions)
    assert ours == _bm25s_ids(indexed, questions)
    assert sum(map(len, ours)) > 3 * len(questions)  # not trivially equal: the questions have known terms
    assert terms.many(questions) == ours  # from the cache, the same again


@pytest.mark.parametrize("settings", [BM25Settings(), BM25Settings(stemmer=""), BM25Settings(stopwords=None),
                                      BM25Settings(stemmer="", stopwords=None)],
                         ids=["default", "no-stemmer", "no-stopwords", "neither"])
def test_same_ids_as_bm25s_on_adversarial_strings(settings):
    indexer = make_tokenizer(settings)
    corpus = ADVERSARIAL + ["the film runs in Istanbul and Straße; the naïve résumé", "東京 ecole ﬁnance 1990s"]
    list(indexer.streaming_tokenize(corpus, update_vocab=True, allow_empty=False))
    vocab = indexer.stem_to_sid if indexer.stemmer else indexer.word_to_id
    terms = QueryTerms.from_tokenizer(_fresh(settings, vocab))
    for text in ADVERSARIAL + [t.upper() for t in ADVERSARIAL]:
        expected = _bm25s_ids(_fresh(settings, vocab), [text])[0]
        assert terms(text) == expected, text
        assert terms(text) == expected, text  # cached words answer the same
    assert terms("") == [] and terms("the of and") == ([] if settings.stopwords else terms("the of and"))
    assert terms("film film") == 2 * terms("film") != []  # repeats are kept: bm25 counts them


def test_the_word_cache_stays_bounded_and_right(indexed):
    terms = QueryTerms.from_tokenizer(indexed, cache_words=50)
    reference = _fresh(BM25Settings(), indexed.stem_to_sid)
    words = [f"film{i}" for i in range(400)] + ["film", "river", "the"] * 10
    for word in words:
        assert terms(word) == _bm25s_ids(reference, [word])[0]
        assert len(terms._cache) <= 50 and len(terms._pieces) <= 50


def test_threads_sharing_tiny_caches_get_the_right_ids(indexed, data_dir):
    """A server's worker threads share one QueryTerms; caches that keep starting over under them never give a
    wrong id nor fail (a cache cleared between a membership test and a read used to be a KeyError)."""
    import threading

    questions = _questions(data_dir)[:300]
    expected = _bm25s_ids(_fresh(BM25Settings(), indexed.stem_to_sid), questions)
    terms = QueryTerms.from_tokenizer(indexed, cache_words=16)
    failures, barrier = [], threading.Barrier(4)

    def worker(offset):
        barrier.wait()
        for _ in range(3):
            for n in range(offset, len(questions), 2):
                try:
                    if terms(questions[n]) != expected[n]:
                        failures.append(n)
                except Exception as error:  # noqa: BLE001 -- any failure is the finding
                    failures.append(repr(error))

    threads = [threading.Thread(target=worker, args=(i % 2,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(terms._pieces) <= 16 and len(terms._cache) <= 16


def test_retriever_queries_leave_no_growing_word_caches(wiki17_corpus):
    """bm25s's tokenizer remembers every word a query ever brought (word_to_stem, word_to_id): a server's memory
    grew with each new word. The retriever's word cache is bounded, and bm25s's stay empty."""
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.query_terms import CACHE_WORDS

    retriever = make_retriever(f"bm25:{wiki17_corpus}", show_progress=False)
    queries = [f"river{i} film{i} xq{i}zz" for i in range(2000)]
    before = retriever.tokenize(["film river Paris"])
    retriever.batch(queries, 5)
    assert len(retriever.tokenizer.word_to_stem) == 0 and len(retriever.tokenizer.word_to_id) == 0
    assert len(retriever._query_terms._cache) <= CACHE_WORDS
    assert retriever.tokenize(["film river Paris"]) == before and before[0]


def test_a_batch_of_known_queries_is_split_on_whitespace_and_answered_from_the_cache(indexed, data_dir):
    """Once a query stream's words are known, a batch costs a whitespace split and cache lookups per query: no
    regex split, no stemming (they were ~3 of the ~5 us a HotPotQA question spent in tokenising)."""
    questions = _questions(data_dir)[:500]
    terms = QueryTerms.from_tokenizer(indexed)
    expected = _bm25s_ids(_fresh(BM25Settings(), indexed.stem_to_sid), questions)
    assert terms.many(questions) == expected
    calls = {"split": 0, "stem": 0}
    split, stem = terms.split, terms.stemmer

    def counted_split(text):
        calls["split"] += 1
        return split(text)

    def counted_stem(word):
        calls["stem"] += 1
        return stem(word)

    terms.split, terms.stemmer = counted_split, counted_stem
    assert terms.many(questions) == expected
    assert calls == {"split": 0, "stem": 0}
    # a query with a new word pays for that word only
    assert terms(questions[0] + " zzyzxunknownword") == expected[0]
    assert calls == {"split": 1, "stem": 1}


def test_whitespace_never_falls_inside_a_token_of_the_default_splitter():
    """Why splitting on whitespace first is the bm25s split: no character str.split() cuts at is a word character,
    so no match of bm25s's pattern spans one."""
    import re
    import sys

    from bm25s.tokenization import Tokenizer

    spaces = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    assert len(spaces) > 20 and re.search(r"\w", spaces) is None
    assert Tokenizer().splitter.__self__.pattern == r"(?u)\b\w\w+\b"


def test_a_splitter_that_may_match_across_spaces_is_used_whole():
    """Only bm25s's own pattern is known to respect whitespace: any other splitter sees the whole text."""
    import re

    terms = QueryTerms({"new york": 1, "york": 2, "film": 3}, re.compile(r"new york|\w+").findall)
    assert terms("New York film") == [1, 3] and terms("New York film") == [1, 3]
    assert terms("york") == [2]
