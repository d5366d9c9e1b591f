"""The compressed (block) layout of the passage store: every passage round-trips (unicode, empty, a passage
bigger than a block, block boundaries, a store smaller than the dictionary), bad rows are refused, concurrent
readers agree, a query's hits cost at most one decompression per block, a plain store converts in place (and a
killed conversion leaves a loadable store), and the packed bm25 retriever answers the same hits over both."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from ragzoo import ownership
from ragzoo.retrieval import store as store_module
from ragzoo.retrieval.store import (BLOCK_FILES, BLOCK_ROWS, PLAIN_FILES, PassageStore, PassageStoreWriter,
                                    compress_store, is_blocks, main)


def _rows(count: int, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    words = ["alpha", "Ünïcödé", "東京", "\"quoted\"", "line\nbreak", "tab\t", "\u2028sep", "emoji 🎈", "plain"]
    rows = []
    for i in range(count):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 120)))
        rows.append((f"p{i}", rng.choice(["", "Title", "Ünïcödé | bars"]), text))
    rows[3] = ("p3", "Empty", "")
    huge = min(40, count - 1)
    rows[huge] = (f"p{huge}", "Huge", "x" * 300_000 + " ünï")  # bigger than a block, than the dictionary
    return rows


def _write(folder: Path, rows, compress: bool) -> PassageStore:
    writer = PassageStoreWriter(folder, compress=compress)
    for row in rows:
        writer.add(*row)
    assert writer.close() == len(rows)
    return PassageStore(folder)


def _plain_tuple(p):
    return (p.pid, p.title, p.text, p.score)


@pytest.mark.parametrize("count", [BLOCK_ROWS * 7 + 5, 1000])
def test_every_passage_round_trips_across_block_boundaries(tmp_path, count):
    rows = _rows(count)
    blocks = _write(tmp_path / "blocks", rows, compress=True)
    plain = _write(tmp_path / "plain", rows, compress=False)
    assert is_blocks(tmp_path / "blocks") and not is_blocks(tmp_path / "plain")
    assert not (tmp_path / "blocks" / "passages.jsonl").exists()
    assert len(blocks) == len(plain) == count
    assert [(p.pid, p.title, p.text) for p in blocks] == rows
    everything = np.arange(count)
    scores = np.linspace(9, 1, count).astype(np.float32)
    assert blocks.get_many(everything, scores) == plain.get_many(everything, scores)
    edges = [0, BLOCK_ROWS - 1, BLOCK_ROWS, BLOCK_ROWS + 1, 2 * BLOCK_ROWS - 1, count - 1, 3, 40, 0]
    hits = blocks.get_many(np.array(edges), np.ones(len(edges), dtype=np.float32))
    assert [(p.pid, p.title, p.text) for p in hits] == [rows[i] for i in edges]
    assert [blocks.get(i, 2.0) for i in edges] == [plain.get(i, 2.0) for i in edges]
    # the compressed store is smaller once there is enough text to compress
    size = sum((tmp_path / "blocks" / name).stat().st_size for name in BLOCK_FILES)
    assert size < sum((tmp_path / "plain" / name).stat().st_size for name in PLAIN_FILES)


@pytest.mark.parametrize("count", [0, 1, 2])
def test_tiny_and_empty_stores(tmp_path, count):
    rows = [("a", "T", "ü"), ("b", "", "")][:count]
    store = _write(tmp_path, rows, compress=True)
    assert len(store) == count and [(p.pid, p.title, p.text) for p in store] == rows
    assert store.get_many(np.array([], dtype=np.int64), np.array([], dtype=np.float32)) == []
    with pytest.raises(IndexError):
        store.get_many(np.array([count]), np.ones(1, dtype=np.float32))


def test_rows_outside_the_block_store_are_refused(tmp_path):
    store = _write(tmp_path, _rows(50), compress=True)
    for rows in ([50], [-1], [0, 99], [BLOCK_ROWS * 4]):
        with pytest.raises(IndexError):
            store.get_many(np.array(rows), np.ones(len(rows), dtype=np.float32))
        with pytest.raises(IndexError):
            store.get(rows[-1])


def test_a_query_costs_at_most_one_decompression_per_block(tmp_path, monkeypatch):
    store = _write(tmp_path, _rows(400), compress=True)
    calls = []
    real = store_module.zlib.decompressobj
    monkeypatch.setattr(store_module.zlib, "decompressobj", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = np.array([0, 1, 2, BLOCK_ROWS, 5 * BLOCK_ROWS + 3, 5 * BLOCK_ROWS + 4, 399, 398, 17, 3])
    hits = store.get_many(rows, np.ones(len(rows), dtype=np.float32))
    assert calls == []  # a search that does not read its hits decompresses nothing
    assert [p.pid for p in hits] == [f"p{r}" for r in rows]
    assert len(calls) == len({int(r) // BLOCK_ROWS for r in rows}) == 4
    assert hits == store.get_many(rows, np.ones(len(rows), dtype=np.float32)) and len(calls) == 4  # cached
    unread = store.get_many(np.array([100]), np.ones(1, dtype=np.float32))[0]
    assert pickle.loads(pickle.dumps(unread)) == store.get(100, 1.0)  # the fields, not the store, are pickled


def test_concurrent_readers_agree_while_the_cache_evicts(tmp_path, monkeypatch):
    rows = _rows(600, seed=3)
    store = _write(tmp_path, rows, compress=True)
    monkeypatch.setattr(store_module, "_CACHED_BLOCKS", 3)  # constant eviction: the race paths, not the hits
    failures, barrier = [], threading.Barrier(8)

    def reader(seed):
        rng = np.random.default_rng(seed)
        barrier.wait()
        for _ in range(150):
            picked = rng.integers(0, len(rows), size=10)
            hits = store.get_many(picked, np.ones(10, dtype=np.float32))
            if [(p.pid, p.title, p.text) for p in hits] != [rows[i] for i in picked]:
                failures.append(seed)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(store._cache) <= 3


def _plain_index(folder: Path, rows) -> None:
    _write(folder, rows, compress=False)
    (folder / "meta.json").write_text(json.dumps({"format": "ragzoo-index"}))
    ownership.mark(folder, "index", ["meta.json", *PLAIN_FILES])
    (folder / "NOTES.md").write_text("mine")  # the user's: never touched


def test_conversion_of_a_plain_index_in_place(tmp_path, capsys):
    rows = _rows(300)
    folder = tmp_path / "index"
    _plain_index(folder, rows)
    before = list(PassageStore(folder))
    assert main(["compress", str(folder), "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passages"] == 300 and result["compressed bytes"] < result["plain bytes"]
    assert is_blocks(folder) and not any((folder / name).exists() for name in PLAIN_FILES)
    assert list(PassageStore(folder)) == before
    assert (folder / "NOTES.md").read_text() == "mine"
    marker = ownership.read_marker(folder)
    assert set(marker["files"]) == {"meta.json", *BLOCK_FILES}
    assert ownership.foreign_entries(folder, "index") == ["NOTES.md"]
    assert main(["compress", str(folder), "--quiet"]) == 0  # again: nothing to do, still the same store
    assert list(PassageStore(folder)) == before


def test_conversion_renames_the_store_files_in_the_index_meta(tmp_path):
    """meta.json's "files" names the passage store an index holds: after a conversion, the blocks."""
    from ragzoo.retrieval.store import describe_files

    folder = tmp_path / "index"
    _plain_index(folder, _rows(40))
    meta = {"format": "ragzoo-index", "num_docs": 40,
            "files": f"bm25s index (data.csc.index.npy) + {describe_files(False)}"}
    (folder / "meta.json").write_text(json.dumps(meta))
    compress_store(folder, show_progress=False)
    after = json.loads((folder / "meta.json").read_text())
    assert after == {**meta, "files": f"bm25s index (data.csc.index.npy) + {describe_files(True)}"}
    assert all(name in after["files"] for name in BLOCK_FILES)
    assert not any(name in after["files"] for name in PLAIN_FILES)


def test_a_killed_conversion_leaves_a_loadable_store(tmp_path, monkeypatch):
    rows = _rows(300)
    folder = tmp_path / "index"
    _plain_index(folder, rows)
    before = list(PassageStore(folder))
    flushed = []
    real_flush = PassageStoreWriter._flush_block

    def dying_flush(self):
        if len(flushed) == 4:
            raise KeyboardInterrupt  # killed mid-write
        flushed.append(1)
        real_flush(self)

    monkeypatch.setattr(PassageStoreWriter, "_flush_block", dying_flush)
    with pytest.raises(KeyboardInterrupt):
        compress_store(folder, show_progress=False)
    assert not is_blocks(folder) and list(PassageStore(folder)) == before
    assert ownership.foreign_entries(folder, "index") == ["NOTES.md"]  # the partial files are named as ragzoo's
    monkeypatch.setattr(PassageStoreWriter, "_flush_block", real_flush)

    real_unlink = Path.unlink

    def dying_unlink(self, *args, **kwargs):
        if self.name == "passages.jsonl":
            raise KeyboardInterrupt  # killed once the blocks are declared, before the plain store went
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", dying_unlink)
    with pytest.raises(KeyboardInterrupt):
        compress_store(folder, show_progress=False)
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert is_blocks(folder) and (folder / "passages.jsonl").exists()
    assert list(PassageStore(folder)) == before
    assert compress_store(folder, show_progress=False)["passages"] == 300  # run again: finishes
    assert list(PassageStore(folder)) == before and not (folder / "passages.jsonl").exists()


def test_block_size_and_level_are_choices_of_the_conversion(tmp_path, capsys):
    rows = _rows(100)
    folder = tmp_path / "index"
    _plain_index(folder, rows)
    assert main(["compress", str(folder), "--quiet", "--block-rows", "5", "--level", "1"]) == 0
    assert json.loads((folder / "passage_store.json").read_text())["block_rows"] == 5
    assert len(np.load(folder / "passage_block_offsets.npy")) == 100 // 5 + 1
    store = PassageStore(folder)
    assert [(p.pid, p.title, p.text) for p in store.get_many(np.arange(100), np.ones(100))] == rows


def test_compress_command_refuses_bad_folders_in_one_line(tmp_path, capsys):
    assert main(["compress", str(tmp_path / "missing")]) == 1
    (tmp_path / "empty").mkdir()
    assert main(["compress", str(tmp_path / "empty")]) == 1
    _plain_index(tmp_path / "index", _rows(20))
    assert main(["compress", str(tmp_path / "index"), "--block-rows", "0"]) == 1
    assert not is_blocks(tmp_path / "index")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("ragzoo: cannot compress") for line in err)
    assert "Traceback" not in "".join(err)


def test_packed_bm25_hits_are_identical_over_both_stores(wiki17_corpus, tmp_path):
    pytest.importorskip("numba")
    from ragzoo.retrieval import bm25

    corpus = tmp_path / "corpus.jsonl"
    with open(wiki17_corpus, encoding="utf-8") as source:
        corpus.write_text("".join(line for _, line in zip(range(1500), source)), encoding="utf-8")
    blocks_dir = tmp_path / "packed"
    bm25.build_bm25_index(corpus, blocks_dir, show_progress=False, index_format="packed")
    assert is_blocks(blocks_dir)  # the packed format writes the compressed store by default
    plain_dir = tmp_path / "packed_plain"
    shutil.copytree(blocks_dir, plain_dir)
    compressed = PassageStore(blocks_dir)
    writer = PassageStoreWriter(plain_dir, compress=False)
    for row in range(len(compressed)):
        writer.add_line(compressed.line(row))
    writer.close()
    for name in BLOCK_FILES:
        (plain_dir / name).unlink()
    over_blocks, over_plain = bm25.BM25Retriever(blocks_dir), bm25.BM25Retriever(plain_dir)
    assert not is_blocks(plain_dir) and over_plain.store._blocks is None
    with open(wiki17_corpus, encoding="utf-8") as source:
        titles = [json.loads(line)["title"] for _, line in zip(range(40), source)]
    queries = titles + ["Which magazine was started first, Arthur's Magazine or First for Women?", "the of and"]
    left, right = over_blocks.batch(queries, 10), over_plain.batch(queries, 10)
    assert left == right and sum(len(hits) for hits in left) > 250
    assert [[p.long_text for p in hits] for hits in left] == [[p.long_text for p in hits] for hits in right]
