"""The packed bm25 index (`format=packed`): exactly the exhaustive top k with scores bit-identical to the csc
index's, through blocks of 128 postings, block-max skipping, the retriever, `ragzoo serve`, and a build that
spools postings to buckets within a memory budget and leaves nothing behind when killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("numba")

from ragzoo.cli import main  # noqa: E402
from ragzoo.errors import ConfigError  # noqa: E402
from ragzoo.retrieval import bm25, bm25_packed, make_retriever  # noqa: E402
from ragzoo.retrieval.bm25 import BM25Retriever, build_bm25_index, ensure_bm25_index  # noqa: E402

WORDS = [f"w{i}" for i in range(40)]


def _write(path, texts):
    path.write_text("".join(json.dumps({"id": f"d{i}", "title": "", "text": text}) + "\n"
                            for i, text in enumerate(texts)))
    return path


def _random_corpus(path, seed, n_docs):
    """Zipf-ish words, some passages duplicated (exact score ties), lengths 1..30."""
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(n_docs):
        if texts and rng.random() < 0.1:
            texts.append(texts[int(rng.integers(0, len(texts)))])  # an exact duplicate: tied scores
            continue
        size = int(rng.integers(1, 30))
        texts.append(" ".join(WORDS[min(int(rng.zipf(1.3)) - 1, len(WORDS) - 1)] for _ in range(size)))
    return _write(path, texts)


def _both(tmp_path, corpus, **packed_options):
    csc = build_bm25_index(corpus, tmp_path / "csc", show_progress=False)
    assert csc["index_format"] == "csc"
    build_bm25_index(corpus, tmp_path / "packed", show_progress=False, index_format="packed", **packed_options)
    return BM25Retriever(tmp_path / "csc"), BM25Retriever(tmp_path / "packed")


def _exhaustive(csc, token_ids, k):
    """Every posting of every query term added into a dense array, terms rarest first (the order both scorers
    sum in), then the k best, exact ties by lower row."""
    data, indices, indptr = csc.pruned.data, csc.pruned.indices, csc.pruned.indptr
    terms, repeats = np.unique(np.asarray(token_ids, dtype=np.int64), return_counts=True)
    known = (terms >= 0) & (terms < len(indptr) - 1)
    terms, repeats = terms[known], repeats[known]
    terms, repeats = terms[indptr[terms + 1] > indptr[terms]], repeats[indptr[terms + 1] > indptr[terms]]
    order = np.argsort(indptr[terms + 1] - indptr[terms], kind="stable")
    dense = np.zeros(csc.num_docs, dtype=np.float32)
    for term, repeat in zip(terms[order], repeats[order].astype(np.float32)):
        lo, hi = indptr[term], indptr[term + 1]
        dense[indices[lo:hi]] += data[lo:hi] * repeat
    rows = np.flatnonzero(dense > 0)
    ranked = np.lexsort((rows, -dense[rows]))[:k]
    return rows[ranked], dense[rows][ranked]


def _queries(rng, vocab_ids, n):
    queries = []
    for _ in range(n):
        ids = [int(t) for t in rng.choice(vocab_ids, size=int(rng.integers(1, 6)))]
        if rng.random() < 0.3:
            ids.append(ids[0])  # a repeated query term counts twice
        if rng.random() < 0.2:
            ids.append(10**6)  # an id no passage has
        queries.append(ids)
    return queries


@pytest.mark.parametrize("seed", [0, 1])
def test_top_k_is_the_exhaustive_top_k_with_scores_bit_identical_to_csc(tmp_path, seed):
    import bm25s

    corpus = _random_corpus(tmp_path / "c.jsonl", seed, 1500)
    csc, packed = _both(tmp_path, corpus)
    rng = np.random.default_rng(seed)
    vocab_ids = np.asarray(sorted(csc.vocab.values()))
    raw = bm25s.BM25.load(str(tmp_path / "csc"), mmap=True, load_corpus=False)
    checked = 0
    for ids in _queries(rng, vocab_ids, 150) + [[int(t)] for t in vocab_ids]:
        for k in (1, 3, 10, 2000):  # 2000 > matches: every matching passage
            rows, scores = packed.pruned.top_k(ids, k)
            expected_rows, expected_scores = _exhaustive(csc, ids, k)
            assert rows.tolist() == expected_rows.tolist(), (ids, k)
            assert scores.tobytes() == expected_scores.tobytes(), (ids, k)  # bit-identical
            # the csc index's pruned scorer: the same contract (ties straddling the k-th place: lower rows)
            csc_rows, csc_scores = csc.pruned.top_k([t for t in ids if t < 10**6], k)
            assert csc_rows.tolist() == rows.tolist() and csc_scores.tobytes() == scores.tobytes(), (ids, k)
            checked += 1
        known = [t for t in ids if t < 10**6]
        # bm25s's own exhaustive retrieve on the csc (it sums in query order: equal up to float32 rounding)
        bm_rows, bm_scores = raw.retrieve([known], k=10, show_progress=False)
        matched = bm_scores[0] > 0
        rows, scores = packed.pruned.top_k(ids, 10)
        assert np.allclose(scores, bm_scores[0][matched], rtol=1e-5)
        clear = scores > scores[-1] + 1e-4  # above ties at the cut, the same passages
        assert set(rows[clear].tolist()) == set(bm_rows[0][matched][bm_scores[0][matched] > scores[-1] + 1e-4].tolist())
    assert checked > 500


def test_unknown_and_empty_queries(tmp_path):
    corpus = _random_corpus(tmp_path / "c.jsonl", 3, 200)
    _csc, packed = _both(tmp_path, corpus)
    for ids in ([], [10**6], [-1, 10**7]):
        rows, scores = packed.pruned.top_k(ids, 10)
        assert rows.tolist() == [] and scores.tolist() == []
    assert packed.pruned.top_k([0], 0)[0].tolist() == []
    assert packed.batch(["the of", "zzzunknown"], 5) == [[], []]  # stopwords only; no known term


@pytest.mark.parametrize("df", [1, 127, 128, 129, 256, 300])
def test_block_boundaries_decode_to_the_csc_columns(tmp_path, df):
    """A term in exactly df passages (blocks of 128: a last block of 1, 127, 128 or 2 postings), tfs that need
    0..3 bits and runs of consecutive passages (0-bit gaps): the export decodes every posting back to the csc
    index's rows and weights, bit for bit."""
    rng = np.random.default_rng(df)
    n_docs = 700
    holders = set(rng.choice(n_docs, size=df, replace=False).tolist())
    texts = []
    for i in range(n_docs):
        words = ["filler"] * int(rng.integers(1, 9))
        if i in holders:
            words += ["target"] * int(rng.choice([1, 1, 1, 2, 5]))
        if i < 200:
            words.append("run")  # 200 consecutive passages
        texts.append(" ".join(words))
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    bm25_packed.to_csc(tmp_path / "packed", tmp_path / "export")
    for name in ("data", "indices", "indptr"):
        exported = np.load(tmp_path / "export" / f"{name}.csc.index.npy")
        built = np.load(tmp_path / "csc" / f"{name}.csc.index.npy")
        assert exported.dtype == built.dtype and exported.tobytes() == built.tobytes(), name
    target = csc.vocab["target"]
    assert int(packed.pruned.df[target]) == df
    rows, scores = packed.pruned.top_k([target], 1000)
    assert sorted(rows.tolist()) == sorted(holders)


def test_bit_fields_up_to_32_bits_round_trip():
    """Gaps needing 31 bits (doc ids near 2**31) and every width 0..32 pack and unpack exactly, across word
    boundaries."""
    kernels = bm25_packed._compiled()
    assert kernels
    pack, unpack = bm25_packed._pack, bm25_packed._unpack
    rng = np.random.default_rng(5)
    for width in range(33):
        for count in (1, 5, 127, 128):
            values = rng.integers(0, 2**width, size=count, dtype=np.int64) if width else np.zeros(count, np.int64)
            values[0] = 2**width - 1
            words = np.zeros((count * width + 31) // 32 + 1, dtype=np.uint32)
            pack(words, 0, values, count, width)
            out = np.empty(count, dtype=np.int64)
            unpack(words, 0, count, width, out)
            assert out.tolist() == values.tolist(), (width, count)
    # a block of doc ids 5, 2**31 - 2 (a gap of 2**31 - 8, 31 bits) decodes back
    docs = np.asarray([5, 2**31 - 2], dtype=np.int64)
    gaps = np.asarray([docs[0] - (-1) - 1, docs[1] - docs[0] - 1], dtype=np.int64)
    width = int(gaps.max()).bit_length()
    assert width == 31
    words = np.zeros(4, dtype=np.uint32)
    pack(words, 0, gaps, 2, width)
    out = np.empty(128, dtype=np.int64)
    bm25_packed._decode_block(words, np.zeros(1, np.int64), np.asarray([[width, 0]], np.uint8),
                              np.asarray([docs[1]], np.int32), 0, 0, 2, out)
    assert out[:2].tolist() == docs.tolist()


def _stats(index, before):
    return dict(zip(bm25_packed.STATS, (index.stats - before).tolist()))


def _check(csc, packed, ids, ks=(1, 2, 3, 5, 10, 1000)):
    for k in ks:
        rows, scores = packed.pruned.top_k(ids, k)
        expected_rows, expected_scores = _exhaustive(csc, ids, k)
        assert rows.tolist() == expected_rows.tolist(), (ids, k)
        assert scores.tobytes() == expected_scores.tobytes(), (ids, k)


@pytest.mark.parametrize("window", [64, 100, 128, 1000])
def test_windows_of_any_size_give_the_exhaustive_top_k(tmp_path, window):
    """Passages scored a window at a time, windows skipped by their bounds, terms only looked up where their
    bounds in a window cannot lift a passage to theta: still the exhaustive top k, bit for bit, for windows smaller
    than a block, not a multiple of 64, or spanning several blocks."""
    corpus = _random_corpus(tmp_path / "c.jsonl", 11, 3000)
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = window
    rng = np.random.default_rng(window)
    vocab_ids = np.asarray(sorted(csc.vocab.values()))
    before = packed.pruned.stats.copy()
    for ids in _queries(rng, vocab_ids, 60):
        _check(csc, packed, ids)
    done = _stats(packed.pruned, before)
    # the windowed machinery was exercised, not only the first window
    assert done["windows skipped"] > 0 and done["terms looked up in a window"] > 0, done


def test_passages_at_window_boundaries(tmp_path):
    """Window 64: a term in the passages either side of each window edge (63, 64, 65, 127, 128, ...), a term whose one
    block of 128 postings spans 40 windows, a term with a single posting in a far window, in one query and in pairs."""
    n_docs = 64 * 50
    texts = [["filler"] * (1 + i % 7) for i in range(n_docs)]
    for edge in range(64, n_docs, 64):
        for d in (edge - 1, edge, edge + 1):
            texts[d].append("edge")
    for d in range(0, 128 * 20, 20):  # 128 postings, one block, docs 0..2540: 40 windows
        texts[d] += ["wide"] * (1 + d % 3)
    texts[64 * 45 + 7].append("far")
    texts[64 * 45 + 7].append("edge")
    corpus = _write(tmp_path / "c.jsonl", [" ".join(words) for words in texts])
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = 64
    edge, wide, far = (packed.tokenize([word])[0][0] for word in ("edge", "wide", "far"))
    assert packed.pruned.df[wide] == 128
    for ids in ([edge], [wide], [far], [edge, wide], [wide, far], [edge, far], [edge, wide, far], [far, far, wide]):
        _check(csc, packed, ids)
    rows, _ = packed.pruned.top_k([far, edge], 1)
    assert rows.tolist() == [64 * 45 + 7]


def test_a_window_skipped_wholesale_before_the_one_holding_the_top_1(tmp_path):
    """Window 128. Window 0: 10 passages with "alpha" set theta. Windows 1-4: "beta" alone, whose bound stays
    below theta: skipped, their blocks never decoded. Window 5: the one passage with all three terms, the top 1."""
    texts = ["noise"] * (128 * 6)
    for d in range(10):
        texts[d] = "alpha words"
    for d in range(128, 128 * 5):
        texts[d] = "beta " + "pad " * 30
    texts[128 * 5 + 50] = "alpha beta gamma"
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = 128
    ids = packed.tokenize(["alpha beta gamma"])[0]
    for k in (1, 5, 10):
        before = packed.pruned.stats.copy()
        rows, scores = packed.pruned.top_k(ids, k)
        done = _stats(packed.pruned, before)
        expected_rows, expected_scores = _exhaustive(csc, ids, k)
        assert rows.tolist() == expected_rows.tolist() and scores.tobytes() == expected_scores.tobytes()
        assert rows[0] == 128 * 5 + 50
        assert done["windows skipped"] >= 4, done
        assert done["postings decoded"] < 512, done  # beta's 512 postings in windows 1-4 are not read


def test_ties_across_windows_go_to_the_lower_row(tmp_path):
    """The same passage text in many windows (equal scores, bit for bit): the k best are the lowest rows, whether the
    tie straddles the k-th place or fills it; a later window's passage that only ties theta never enters."""
    texts = [f"other{i % 5} text" for i in range(64 * 12)]
    tied = [5, 63, 64, 130, 200, 257, 400, 700]
    for d in tied:
        texts[d] = "apple pear"
    texts[500] = "apple pear pear"  # better than the tied ones, in a later window
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = 64
    ids = packed.tokenize(["apple pear"])[0]
    for k in range(1, 11):
        rows, scores = packed.pruned.top_k(ids, k)
        expected_rows, expected_scores = _exhaustive(csc, ids, k)
        assert rows.tolist() == expected_rows.tolist() and scores.tobytes() == expected_scores.tobytes()
        assert rows.tolist() == ([500] + tied)[:k]


def test_k_larger_than_the_passages_reached(tmp_path):
    texts = ["nothing here"] * 600
    for d in (3, 64, 65, 300, 599):
        texts[d] = "kiwi"
    texts[64 * 5] = "kiwi kiwi mango"
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = 64
    ids = packed.tokenize(["kiwi mango mango"])[0]
    rows, scores = packed.pruned.top_k(ids, 50)
    assert len(rows) == 6 and rows[0] == 320 and (scores > 0).all()
    _check(csc, packed, ids, ks=(6, 7, 50))


def test_a_term_whose_bound_in_a_window_is_low_is_only_looked_up_there(tmp_path):
    """"common" is in every other passage: short ones with tf 3 in window 0 (its largest weights, theta for k = 1),
    long ones with tf 1 in windows 1-5. In window 5 "rare" reaches two passages: the window is scored, but common's
    bound there (not its global largest weight, which equals theta and would make it essential) cannot lift a
    passage to theta: it is looked up for rare's two passages, its 128 postings there decoded but never weighed."""
    window = 256
    texts = ["pad " * 10 for _ in range(window * 6)]
    for d in range(0, window * 6, 2):
        texts[d] = "common common common" if d < window else "common " + "pad " * 40
    texts[window * 5 + 10] = "rare common " + "pad " * 40
    texts[window * 5 + 200] = "rare common " + "pad " * 40
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    packed.pruned.window = window
    ids = packed.tokenize(["rare common"])[0]
    before = packed.pruned.stats.copy()
    _check(csc, packed, ids, ks=(1,))
    done = _stats(packed.pruned, before)
    assert done["windows skipped"] == 4 and done["terms looked up in a window"] == 1, done
    # window 0's 128 postings of common and rare's 2: nothing of window 5's common
    assert done["postings weighed"] == 128 + 2, done


def test_theta_from_the_first_window_skips_the_later_ones(tmp_path):
    """One term: its first block (window 0 of 128) holds short passages with tf 3 (large weights), its other 15
    blocks long passages (small weights). The k best of window 0 are final scores: theta is their k-th, above every
    later window's bound, so those windows are skipped and their blocks never decoded. With one window for the whole
    index every posting is decoded. The answer is the exhaustive one either way."""
    texts = ["beta beta beta x" if i < 128 else "beta " + "pad " * 60 for i in range(2048)]
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    ids = packed.tokenize(["beta"])[0]
    for window, k, decoded in ((128, 1, 128), (128, 10, 128), (128, 128, 128), (bm25_packed.WINDOW, 10, 2048)):
        packed.pruned.window = window
        before = packed.pruned.stats.copy()
        rows, scores = packed.pruned.top_k(ids, k)
        expected_rows, expected_scores = _exhaustive(csc, ids, k)
        assert rows.tolist() == expected_rows.tolist() and scores.tobytes() == expected_scores.tobytes()
        assert _stats(packed.pruned, before)["postings decoded"] == decoded, (window, k)


def test_a_window_must_be_a_positive_number_of_passages(tmp_path):
    corpus = _random_corpus(tmp_path / "c.jsonl", 2, 50)
    build_bm25_index(corpus, tmp_path / "packed", show_progress=False, index_format="packed")
    with pytest.raises(ConfigError, match="window must be a positive"):
        bm25_packed.PackedIndex(tmp_path / "packed", window=0)


def test_format_packed_through_the_spec_and_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGZOO_CACHE", str(tmp_path / "cache"))
    corpus = _random_corpus(tmp_path / "c.jsonl", 9, 400)
    packed = make_retriever(f"bm25:{corpus}?format=packed", show_progress=False)
    csc = make_retriever(f"bm25:{corpus}?backend=numba", show_progress=False)
    assert packed.index_format == "packed" and csc.index_format == "csc"
    assert packed.index_dir != csc.index_dir  # the cache key includes the format
    queries = [" ".join(WORDS[i:i + 3]) for i in range(0, 30, 2)] + ["w1 w1 w7", "nothing"]
    for a, b in zip(packed.batch(queries, 7), csc.batch(queries, 7)):
        assert [(p.pid, p.score) for p in a] == [(p.pid, p.score) for p in b]
    out = tmp_path / "out"
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(out), "--format", "packed",
                 "--quiet"]) == 0
    assert json.loads((out / "meta.json").read_text())["index_format"] == "packed"
    with pytest.raises(ConfigError, match="csc bm25 index, not packed"):
        BM25Retriever(csc.index_dir, index_format="packed")


def test_format_packed_without_numba_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    corpus = _random_corpus(tmp_path / "c.jsonl", 9, 50)
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.setattr(bm25_packed, "_COMPILED", {})
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--format", "packed",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs numba" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="format must be one of"):
        make_retriever(f"bm25:{corpus}?format=zip")


def test_build_spools_buckets_within_a_tiny_memory_budget(tmp_path, monkeypatch):
    """Postings never sit in memory all at once: with a small budget they go to several bucket spools, each
    holding a part, encoded one at a time; the index is the same as with one bucket."""
    corpus = _random_corpus(tmp_path / "c.jsonl", 4, 800)
    seen = []
    real_write = bm25_packed.write_packed

    def recording(folder, spool, *args, **kwargs):
        seen.append((spool.n_buckets, spool.sizes.copy()))
        return real_write(folder, spool, *args, **kwargs)

    monkeypatch.setattr(bm25_packed, "write_packed", recording)
    meta = build_bm25_index(corpus, tmp_path / "small", show_progress=False, index_format="packed",
                            memory_budget=200_000)
    n_buckets, sizes = seen[0]
    assert n_buckets > 1 and meta["buckets"] == n_buckets
    assert sizes.sum() == meta["postings"] and (sizes > 0).sum() > 1 and sizes.max() < meta["postings"]
    assert not list((tmp_path / "small").glob("spool*"))  # spools removed
    build_bm25_index(corpus, tmp_path / "one", show_progress=False, index_format="packed", memory_budget=1 << 40)
    assert seen[1][0] == 1
    small, one = BM25Retriever(tmp_path / "small"), BM25Retriever(tmp_path / "one")
    for term in range(len(small.vocab)):
        a, b = small.pruned.top_k([term], 50), one.pruned.top_k([term], 50)
        assert a[0].tolist() == b[0].tolist() and a[1].tobytes() == b[1].tobytes()


def test_killed_build_leaves_no_index_and_the_next_build_cleans_up(tmp_path):
    corpus = _random_corpus(tmp_path / "c.jsonl", 6, 3000)
    out = tmp_path / "idx"
    script = ("import sys, time\n"
              "from pathlib import Path\n"
              "from ragzoo.retrieval import bm25, bm25_packed\n"
              "real = bm25_packed.write_packed\n"
              "def stuck(*a, **k):\n"
              "    print('spooled', flush=True)\n"
              "    time.sleep(600)\n"
              "bm25_packed.write_packed = stuck\n"
              "bm25.build_bm25_index(Path(sys.argv[1]), Path(sys.argv[2]), show_progress=False, index_format='packed', memory_budget=100000)\n")
    process = subprocess.Popen([sys.executable, "-c", script, str(corpus), str(out)], stdout=subprocess.PIPE,
                               env={**os.environ, "RAGZOO_CACHE": str(tmp_path / "cache")})
    assert process.stdout.readline().strip() == b"spooled"
    staging = [p for p in tmp_path.iterdir() if ".building-" in p.name]
    assert staging and list(staging[0].glob("spool.bucket*"))
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists()
    time.sleep(0.1)
    bm25.build_bm25_index(corpus, out, show_progress=False, index_format="packed")
    assert [p.name for p in tmp_path.iterdir() if ".building-" in p.name] == []
    assert len(BM25Retriever(out)) == 3000


def test_serve_answers_the_same_passages_for_both_formats(tmp_path):
    import httpx

    corpus = _random_corpus(tmp_path / "c.jsonl", 8, 300)
    results = {}
    for spec in (f"bm25:{corpus}?format=packed", f"bm25:{corpus}"):
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        process = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever", spec,
                                    "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env={**os.environ, "RAGZOO_CACHE": str(tmp_path / "cache")})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, "ragzoo serve exited"
                try:
                    if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "ragzoo serve did not start"
                time.sleep(0.2)
            answers = []
            for query in ("w0 w3", "w5 w5 w2", "w11 w1 w0 w30"):
                reply = httpx.get(url + "/", params={"query": query, "k": 5}, timeout=10).json()
                answers.append([(p["pid"], round(p["score"], 5)) for p in reply["topk"]])
            results[spec] = answers
        finally:
            process.terminate()
            process.wait(timeout=30)
    packed, csc = results.values()
    assert packed == csc and all(packed)


def test_the_vocabulary_loads_as_sorted_arrays_with_the_same_ids(tmp_path):
    """A packed index keeps its vocabulary as sorted, memory-mapped arrays (parsing vocab.index.json took
    2.8-6 s at 1M passages): the same term -> id for every term, none for others, and the same answers."""
    texts = ["Zürich café naïve", "Köln straße", "plain words here", "日本 東京"] * 5
    corpus = _write(tmp_path / "c.jsonl", texts)
    csc, packed = _both(tmp_path, corpus)
    assert isinstance(packed.vocab, bm25_packed.SortedVocab)
    expected = json.loads((tmp_path / "packed" / "vocab.index.json").read_text(encoding="utf-8"))
    assert len(packed.vocab) == len(expected) and dict(packed.vocab.items()) == expected
    assert all(packed.vocab[term] == term_id for term, term_id in expected.items())
    assert packed.vocab.get("absent") is None and "zz" not in packed.vocab and packed.vocab.get("") is None
    queries = ["Zürich", "straße words", "東京", "nothing"]
    assert packed.tokenize(queries) == csc.tokenize(queries)
    for a, b in zip(packed.batch(queries, 3), csc.batch(queries, 3)):
        assert [(p.pid, p.score) for p in a] == [(p.pid, p.score) for p in b]


def test_a_corpus_of_stopwords_builds_without_a_warning_and_finds_nothing(tmp_path):
    """Review: its average length is 0, and the packed build printed numpy's "invalid value encountered in divide"."""
    import json
    import warnings

    corpus = tmp_path / "stop.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "text": text}) + "\n"
                              for i, text in enumerate(["the", "a an the", "of the"])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the build
        _csc, packed = _both(tmp_path, corpus)
    assert packed.batch(["the", "anything"], 3) == [[], []]
