"""The numba path of the csc scorer answers a query in one compiled call (`bm25_packed._top_k_csc`, or window by
window, `bm25_packed.CscWindows`, from `bm25_topk.WINDOWED_FROM` passages on), with the exhaustive top k: bit for
bit the numpy path's answer, and bm25s's up to float32 summation order."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba")

from ragzoo.errors import ConfigError  # noqa: E402
from ragzoo.retrieval import bm25_packed, bm25_topk  # noqa: E402
from ragzoo.retrieval.bm25 import BM25Retriever, ensure_bm25_index  # noqa: E402
from ragzoo.retrieval.bm25_topk import PrunedTopK, term_maxima  # noqa: E402


def _dense_top_k(dense, token_ids, k):
    """Every passage scored, terms summed rarest first (ties by term id) in float32; best first, ties by row."""
    terms, repeats = np.unique([t for t in token_ids if 0 <= t < dense.shape[1]], return_counts=True)
    lengths = (dense[:, terms] > 0).sum(axis=0)
    order = np.argsort(lengths, kind="stable")
    scores = np.zeros(dense.shape[0], dtype=np.float32)
    for term, repeat in zip(terms[order], repeats[order]):
        column = dense[:, term]
        scores = np.where(column > 0, scores + column * np.float32(repeat), scores).astype(np.float32)
    rows = np.flatnonzero(scores > 0)
    ranking = np.lexsort((rows, -scores[rows]))[:k]
    return rows[ranking].tolist(), scores[rows][ranking].tolist()


@pytest.mark.parametrize("window", [None, 64, 1000], ids=["whole index", "windows of 64", "windows of 1000"])
@pytest.mark.parametrize("seed", range(4))
def test_one_call_kernel_is_exact_with_ties_repeats_and_unknown_ids(seed, window):
    rng = np.random.default_rng(seed)
    densities = np.concatenate([[0.9, 0.7, 0.5], rng.uniform(0.002, 0.05, size=17)])
    columns = [rng.random(4000) < d for d in densities]
    dense = np.stack([np.where(c, rng.choice(np.array([0.5, 1.0, 1.25], dtype=np.float32), 4000), 0)
                      for c in columns], axis=1).astype(np.float32)
    dense[:, 7] = 0  # an empty column: a known term no passage has
    indptr = np.zeros(21, dtype=np.int64)
    indptr[1:] = np.cumsum((dense > 0).sum(axis=0))
    indices = np.concatenate([np.flatnonzero(dense[:, t]) for t in range(20)]).astype(np.int32)
    data = np.concatenate([dense[np.flatnonzero(dense[:, t]), t] for t in range(20)]).astype(np.float32)
    for array in (data, indices, indptr):
        # read-only, as an index loaded from disk (mmap_mode="r") hands them over: numba compiles a kernel once per
        # array type, and a writable variant only for this test cost a fresh clone's run ~6 s of CPU
        array.setflags(write=False)
    one_call = PrunedTopK(data, indices, indptr, 4000, kernels="numba", term_max=term_maxima(data, indptr),
                          windowed=window is not None, window=window)
    assert (one_call._windows is not None) == (window is not None)
    numpy_path = PrunedTopK(data, indices, indptr, 4000, kernels="numpy", term_max=term_maxima(data, indptr))
    for _ in range(150):
        query = list(rng.choice(20, size=int(rng.integers(1, 6))))
        if rng.random() < 0.3:
            query.append(query[0])  # a repeated term counts twice
        known = list(query)
        if rng.random() < 0.3:
            query += [20, 10**6, -1]  # ids no column has: ignored
        for k in (1, 3, 10, 100):
            rows, scores = one_call.top_k(query, k)
            assert (rows.tolist(), scores.tolist()) == _dense_top_k(dense, known, k), (query, k)
            expected = numpy_path.top_k(known, k)
            assert rows.tolist() == expected[0].tolist() and np.array_equal(scores, expected[1])
    assert one_call.terms_searched > 0  # the frequent columns were looked up, not only scanned
    assert not one_call._scratch().any()
    if window is not None:  # the window's accumulator, bitsets, marks and weights left zero for the next query
        acc, bits, _cands, has, tf_of, _marked, w_of = one_call._windows._scratch()
        assert not (acc.any() or bits.any() or has.any() or tf_of.any() or w_of.any())
    assert one_call.top_k([], 5)[0].tolist() == [] and one_call.top_k([7, 99], 5)[0].tolist() == []
    assert one_call.top_k([0], 0)[0].tolist() == []


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """2,000 passages: a few common words, rare names, and duplicated passages (exact ties)."""
    rng = np.random.default_rng(11)
    corpus = tmp_path_factory.mktemp("onecall") / "corpus.jsonl"
    common = ["river", "city", "film", "album", "band"]
    with open(corpus, "w") as handle:
        for i in range(2000):
            if i % 10 == 9:
                text = "river city name1 name2"  # the same passage many times: its scores tie
            else:
                words = list(rng.choice(common, size=int(rng.integers(2, 9))))
                words += [f"name{int(rng.zipf(1.6)) % 300}" for _ in range(int(rng.integers(0, 3)))]
                text = " ".join(words)
            handle.write(json.dumps({"id": f"d{i}", "title": "", "text": text}) + "\n")
    folder, _meta, _built = ensure_bm25_index(corpus, show_progress=False)
    return folder


def test_the_numba_csc_path_is_one_compiled_call_per_query(index):
    retriever = BM25Retriever(index, backend="numba")
    pruned = retriever.pruned
    assert isinstance(pruned, PrunedTopK) and pruned.term_max is not None

    def per_term_loop(*_args):
        raise AssertionError("the per-term Python loop ran")

    pruned.kernels.scan = pruned.kernels.still_in_reach = pruned.kernels.add_to_reached = per_term_loop
    numpy_path = BM25Retriever(index, backend="numpy").pruned
    queries = ["river city name1 name2", "name3 film film", "band album river city film", "zzzunknown river",
               "name1", "city name40 name7"]
    before = pruned.one_call_queries
    for query in queries:
        ids = retriever.tokenize([query])[0]
        for k in (1, 10, 300):
            rows, scores = pruned.top_k(ids, k)
            expected_rows, expected_scores = numpy_path.top_k(ids, k)
            assert rows.tolist() == expected_rows.tolist() and np.array_equal(scores, expected_scores), query
            their_rows, their_scores = retriever.model.retrieve([ids], k=k, show_progress=False)
            theirs = their_scores[0][their_scores[0] > 0]
            assert np.allclose(scores, theirs, rtol=1e-5)
    assert pruned.one_call_queries - before == len(queries) * 3
    # the retriever end to end: the tied duplicates come back lowest row first
    hits = retriever.batch(["river city name1 name2"], 5)[0]
    assert [p.pid for p in hits] == [f"d{i}" for i in (9, 19, 29, 39, 49)]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_top_k_many_answers_query_after_query_as_top_k(index, backend):
    """The batch method the retriever calls (`PrunedTopK.top_k_many`): every query's top k, one after another,
    each query's count, and the running totals as query-by-query calls would leave them."""
    retriever = BM25Retriever(index, backend=backend)
    pruned = retriever.pruned
    ids = retriever.tokenize(["river city name1 name2", "name3 film film", "zzzunknown river", "name1",
                              "band album river city film"])
    singles = [pruned.top_k(query, 10) for query in ids]
    totals = (pruned.postings_scanned, pruned.terms_searched, pruned.one_call_queries)
    rows, scores, counts = pruned.top_k_many(ids, 10)
    assert counts == [len(query_rows) for query_rows, _ in singles] and sum(counts) > 10
    assert rows.tolist() == np.concatenate([query_rows for query_rows, _ in singles]).tolist()
    assert np.array_equal(scores, np.concatenate([query_scores for _, query_scores in singles]))
    assert (pruned.postings_scanned, pruned.terms_searched, pruned.one_call_queries) == tuple(2 * n for n in totals)
    assert pruned.top_k_many([], 10)[2] == [] and pruned.top_k_many([ids[3]], 10)[2] == counts[3:4]


def test_the_retriever_uses_no_private_of_its_scorers():
    """bm25.py talks to the scorers through their public methods (it used to reach into PrunedTopK's scratch,
    stats lock and totals)."""
    import re
    from pathlib import Path

    import ragzoo.retrieval.bm25 as bm25

    source = Path(bm25.__file__).read_text(encoding="utf-8")
    assert re.findall(r"pruned\._\w+|getattr\(pruned, \"_\w+", source) == []


def test_the_builder_writes_the_block_bounds_the_windowed_scorer_reads(index, tmp_path, monkeypatch):
    """A csc index carries the bounds of its blocks of 128 postings (each block's last row and largest weight); the
    retriever scores window by window from `WINDOWED_FROM` passages on, with the same answers as the numpy path,
    over the builder's block files or, for an index built without them, over bounds computed at load."""
    blocks = bm25_packed.read_csc_blocks(index)
    assert blocks is not None
    data, indices, indptr = (np.load(index / f"{name}.csc.index.npy") for name in ("data", "indices", "indptr"))
    for t in range(len(indptr) - 1):  # each column's blocks: every 128th posting's row and the largest weight
        first = int(bm25_packed.csc_block_layout(indptr)[0][t])
        for j, start in enumerate(range(int(indptr[t]), int(indptr[t + 1]), 128)):
            end = min(start + 128, int(indptr[t + 1]))
            assert blocks[0][first + j] == indices[end - 1] and blocks[1][first + j] == data[start:end].max()
    monkeypatch.setattr(bm25_topk, "WINDOWED_FROM", 1000)
    numpy_path = BM25Retriever(index, backend="numpy").pruned
    copy = tmp_path / "without-blocks"
    copy.mkdir()
    for path in index.iterdir():
        if path.is_file() and not path.name.startswith("csc_block"):
            (copy / path.name).write_bytes(path.read_bytes())
    queries = ["river city name1 name2", "name3 film film", "band album river city film", "zzzunknown river"]
    for folder in (index, copy):
        retriever = BM25Retriever(folder, backend="numba", check_stale=False)
        windowed = retriever.pruned._windows
        assert windowed is not None and windowed.window == bm25_packed.WINDOW
        ids = retriever.tokenize(queries)
        for query in ids:
            for k in (1, 10, 300):
                rows, scores = retriever.pruned.top_k(query, k)
                expected_rows, expected_scores = numpy_path.top_k(query, k)
                assert rows.tolist() == expected_rows.tolist() and np.array_equal(scores, expected_scores)
        assert windowed.stats[3] > 0  # windows were scored: the windowed kernel answered
        rows, _scores, counts = retriever.pruned.top_k_many(ids, 10)
        assert rows.tolist() == np.concatenate([retriever.pruned.top_k(q, 10)[0] for q in ids]).tolist()
    with pytest.raises(ConfigError, match="block files"):
        bm25_packed.CscWindows(data, indices, indptr, blocks=(blocks[0][:-1], blocks[1][:-1]))
    # block files left from other weights (as many blocks): their maxima no longer match term_max.npy
    np.save(copy / bm25_packed.CSC_BLOCK_LAST, blocks[0])
    np.save(copy / bm25_packed.CSC_BLOCK_MAX, np.asarray(blocks[1]) * np.float32(0.5))
    with pytest.raises(ConfigError, match="block files do not match"):
        BM25Retriever(copy, backend="numba", check_stale=False)


def test_the_whole_index_kernel_stays_inside_its_buffers_when_every_passage_is_reached():
    """The kernel lists first reaches branch-free: it stores every posting's row at found[n_found] and advances only
    on a first reach, so once every passage is reached the next posting is stored one past the last passage. Run as
    plain Python (numpy checks every index; compiled, that store corrupted the heap: glibc aborted at 130 passages)."""
    n_docs = 3
    indptr = np.array([0, n_docs, 2 * n_docs], dtype=np.int64)  # two terms, both in every passage
    indices = np.tile(np.arange(n_docs, dtype=np.int32), 2)
    data = np.array([1.0, 2.0, 3.0, 5.0, 4.0, 0.5], dtype=np.float32)  # the second term can lift any: scanned too
    pruned = PrunedTopK(data, indices, indptr, n_docs, kernels="numba", term_max=term_maxima(data, indptr))
    stats = np.zeros(3, dtype=np.int64)
    rows, scores = bm25_packed._top_k_csc(np.array([0, 1], dtype=np.int64), 2, data, indices, indptr,
                                          pruned.term_max, pruned._scratch(), pruned._found(), stats)
    assert rows.tolist() == [0, 1] and scores.tolist() == [6.0, 6.0]  # 1 + 5 and 2 + 4 tie: lower row first
    assert not pruned._scratch().any()
