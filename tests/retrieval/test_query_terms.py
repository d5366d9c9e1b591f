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
        assert len(terms._cache) <= 50


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
