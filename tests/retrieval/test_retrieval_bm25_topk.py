"""The pruned BM25 top-k (MaxScore) returns bm25s's exhaustive top k, and really prunes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragzoo.retrieval.bm25 import BM25Retriever, ensure_bm25_index
from ragzoo.retrieval.bm25_topk import PrunedTopK

COMMON = ["river", "city", "film", "album", "band", "school"]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """3,000 passages: six common words nearly everywhere, and rare names a few passages each."""
    rng = np.random.default_rng(7)
    corpus = tmp_path_factory.mktemp("topk") / "corpus.jsonl"
    with open(corpus, "w") as handle:
        for i in range(3000):
            words = list(rng.choice(COMMON, size=int(rng.integers(3, 12))))
            words += [f"name{int(rng.zipf(1.5)) % 400}" for _ in range(int(rng.integers(0, 3)))]
            handle.write(json.dumps({"id": f"d{i}", "title": f"T{i % 50}", "text": " ".join(words)}) + "\n")
    folder, _meta, _built = ensure_bm25_index(corpus, show_progress=False)
    return folder


def _queries(rng, n=200):
    queries = []
    for _ in range(n):
        terms = list(rng.choice(COMMON, size=int(rng.integers(1, 4))))
        terms += [f"name{int(rng.integers(0, 60))}" for _ in range(int(rng.integers(0, 3)))]
        if rng.random() < 0.2:
            terms.append(terms[0])  # a repeated query term counts twice, as in bm25s
        queries.append(" ".join(terms))
    return queries


def _exhaustive(retriever, token_ids, k):
    rows, scores = retriever.model.retrieve([token_ids], k=k, show_progress=False)
    return [(int(r), float(s)) for r, s in zip(rows[0], scores[0]) if s > 0]


@pytest.mark.parametrize("kernels", ["numpy", "numba"])
def test_same_top_k_as_bm25s_exhaustive(index, kernels):
    retriever = BM25Retriever(index, backend=kernels)
    pruned = retriever.pruned
    assert isinstance(pruned, PrunedTopK) and type(pruned.kernels).__name__.lower().startswith(kernels)
    rng = np.random.default_rng(0)
    for query in _queries(rng):
        ids = retriever.tokenize([query])[0]
        for k in (1, 5, 10, 50):
            expected = _exhaustive(retriever, ids, k)
            rows, scores = pruned.top_k(ids, k)
            assert np.allclose(scores, [s for _, s in expected], rtol=1e-5), query
            # the same passages, except where exact ties straddle the k-th place
            cutoff = expected[-1][1]
            assert {r for r, s in zip(rows, scores) if s > cutoff + 1e-4} == \
                {r for r, s in expected if s > cutoff + 1e-4}, query
            assert all(scores[:-1] >= scores[1:])
            # ties go to the lower row
            assert all(rows[i] < rows[i + 1] for i in range(len(rows) - 1) if scores[i] == scores[i + 1])


@pytest.mark.parametrize("kernels", ["numpy", "numba"])
def test_frequent_terms_are_looked_up_not_scanned(index, kernels):
    retriever = BM25Retriever(index, backend=kernels)
    pruned = retriever.pruned
    lengths = {f"name{i}": int(np.diff(pruned.indptr[retriever.tokenize([f"name{i}"])[0][0]:][:2])[0])
               for i in range(60) if retriever.tokenize([f"name{i}"])[0]}
    rare_name = min((name for name, n in lengths.items() if n >= 3), key=lengths.get)
    ids = retriever.tokenize([f"{rare_name} river city"])[0]
    starts, ends = pruned.indptr[ids], pruned.indptr[np.asarray(ids) + 1]
    rare = int(min(ends - starts))
    before_scanned, before_searched = pruned.postings_scanned, pruned.terms_searched
    passes = []  # few candidates against long columns: binary search, never a pass over a whole column
    real_pass = pruned.kernels.add_to_reached
    pruned.kernels.add_to_reached = lambda *args: (passes.append(args[2:4]), real_pass(*args))
    rows, _scores = pruned.top_k(ids, 3)
    assert passes == []
    assert len(rows) == 3
    # only the rare name's postings were added in full; the two common words were searched for candidates
    assert pruned.postings_scanned - before_scanned == rare
    assert pruned.terms_searched - before_searched == 2


def test_no_pruning_when_it_would_be_wrong(index):
    """Asking for more passages than the rare term matches: the common terms must be scanned in full."""
    retriever = BM25Retriever(index)
    pruned = retriever.pruned
    ids = retriever.tokenize(["name3 river"])[0]
    rare = int(min(pruned.indptr[t + 1] - pruned.indptr[t] for t in ids))
    k = rare + 10
    before = pruned.terms_searched
    expected = _exhaustive(retriever, ids, k)
    rows, scores = pruned.top_k(ids, k)
    assert pruned.terms_searched == before
    assert len(rows) == len(expected) == k
    assert np.allclose(scores, [s for _, s in expected], rtol=1e-5)


def test_unsorted_columns_are_scanned_not_searched():
    # column 0: rows 2, 0 (unsorted); column 1: row 1 only, with a large weight
    data = np.array([1.0, 0.5, 9.0], dtype=np.float32)
    indices = np.array([2, 0, 1], dtype=np.int32)
    indptr = np.array([0, 2, 3])
    pruned = PrunedTopK(data, indices, indptr, num_docs=3)
    rows, scores = pruned.top_k([0, 1], 1)
    assert rows.tolist() == [1] and scores.tolist() == [9.0]
    assert pruned.terms_searched == 0
    rows, scores = pruned.top_k([0, 1], 3)
    assert rows.tolist() == [1, 2, 0] and scores.tolist() == [9.0, 1.0, 0.5]


def test_scratch_is_reset_between_queries(index):
    retriever = BM25Retriever(index)
    pruned = retriever.pruned
    ids_a, ids_b = retriever.tokenize(["river film name5", "school"])
    first = pruned.top_k(ids_b, 10)
    pruned.top_k(ids_a, 10)
    again = pruned.top_k(ids_b, 10)
    assert first[0].tolist() == again[0].tolist() and np.array_equal(first[1], again[1])
    assert not pruned._scratch().any()
    assert pruned.top_k([], 5)[0].tolist() == []


def test_threads_option_answers_batches_on_a_pool_with_the_same_results(index):
    from ragzoo.errors import ConfigError
    from ragzoo.retrieval import make_retriever

    plain = make_retriever(f"bm25:{index}")
    pooled = make_retriever(f"bm25:{index}?threads=2")
    assert (plain.n_threads, pooled.n_threads) == (0, 2)
    queries = _queries(np.random.default_rng(3), 40)
    assert [[p.pid for p in r] for r in pooled.batch(queries, 10)] == \
        [[p.pid for p in r] for r in plain.batch(queries, 10)]
    assert pooled._pool is not None  # the batch really went through the pool
    for bad in ("0", "two", "-1", "65"):
        with pytest.raises(ConfigError, match="threads must be"):
            make_retriever(f"bm25:{index}?threads={bad}")


def test_the_build_writes_each_terms_largest_weight_and_the_scorer_uses_it(index):
    retriever = BM25Retriever(index)
    written = np.load(index / "term_max.npy")
    data, indptr = retriever.model.scores["data"], retriever.model.scores["indptr"]
    assert len(written) == len(indptr) - 1
    for term in range(len(written)):
        column = data[indptr[term]:indptr[term + 1]]
        assert written[term] == (column.max() if len(column) else 0)
    assert retriever.pruned.term_max is not None
    # without the file (an index built before it existed) the bounds come from the columns, same results
    lazy = PrunedTopK(data, retriever.model.scores["indices"], indptr, len(retriever))
    for query in _queries(np.random.default_rng(5), 30):
        ids = retriever.tokenize([query])[0]
        got, expected = lazy.top_k(ids, 10), retriever.pruned.top_k(ids, 10)
        assert got[0].tolist() == expected[0].tolist() and np.array_equal(got[1], expected[1])
    assert lazy._term_stats and not retriever.pruned._term_stats
