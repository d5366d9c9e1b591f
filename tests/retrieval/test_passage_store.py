"""The passage store beside an index: `get_many` answers the same passages as `get` (fields, score, equality,
hash, to_dict, pickling, replace), decodes a hit only when it is read, and refuses rows outside the store."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import numpy as np
import pytest

from ragzoo.retrieval import store as store_module
from ragzoo.retrieval.base import Passage
from ragzoo.retrieval.store import PassageStore, PassageStoreWriter

ROWS = [("p0", "Apple", "An apple a day."), ("p1", "", "untitled text"), ("p2", "Ünïcödé | bars", "東京 \"quoted\"\n"),
        ("p3", "Empty", ""), ("p4", "Last", "the end")]


@pytest.fixture(params=[False, True], ids=["plain", "blocks"])
def store(tmp_path, request):
    writer = PassageStoreWriter(tmp_path, compress=request.param)
    for pid, title, text in ROWS:
        writer.add(pid, title, text)
    assert writer.close() == len(ROWS)
    return PassageStore(tmp_path)


def test_get_many_matches_get(store):
    rows, scores = np.array([2, 0, 4, 1, 3]), np.array([5.5, 4.25, 3.0, 2.0, 1.0], dtype=np.float32)
    many = store.get_many(rows, scores)
    single = [store.get(int(r), float(s)) for r, s in zip(rows, scores)]
    assert many == single and single == many
    assert [(p.pid, p.title, p.text, p.score, p.long_text, p.meta) for p in many] == \
        [(p.pid, p.title, p.text, p.score, p.long_text, p.meta) for p in single]
    assert all(isinstance(p, Passage) and type(p.score) is float for p in many)
    assert {hash(p) for p in many} == {hash(p) for p in single} and set(many) == set(single)
    assert [p.to_dict() for p in many] == [p.to_dict() for p in single]
    assert json.dumps([p.to_dict() for p in many]) == json.dumps([p.to_dict() for p in single])
    assert [dataclasses.asdict(p) for p in many] == [dataclasses.asdict(p) for p in single]
    assert repr(many[0]) == repr(single[0])
    assert store.get_many(np.array([], dtype=np.int64), np.array([], dtype=np.float32)) == []


def test_stored_passages_copy_pickle_and_replace_like_passages(store):
    hit = store.get_many(np.array([2]), np.array([1.5], dtype=np.float32))[0]
    plain = store.get(2, 1.5)
    assert pickle.loads(pickle.dumps(hit)) == plain
    assert copy.copy(hit) == plain and copy.deepcopy(hit) == plain
    changed = dataclasses.replace(hit, score=9.0)
    assert changed == dataclasses.replace(plain, score=9.0) and changed.title == plain.title
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.title = "changed"  # frozen, as a Passage
    assert hit != store.get(2, 2.5) and hit != store.get(1, 1.5)
    with pytest.raises(AttributeError):
        hit.missing  # noqa: B018


def test_hits_are_decoded_only_when_read(store, monkeypatch):
    decoded = []
    real = store_module.ujson.loads
    monkeypatch.setattr(store_module.ujson, "loads", lambda line: decoded.append(line) or real(line))
    hits = store.get_many(np.array([0, 1, 2]), np.array([3.0, 2.0, 1.0], dtype=np.float32))
    assert decoded == [] and [p.score for p in hits] == [3.0, 2.0, 1.0]
    assert hits[1].title == "" and hits[1].text == "untitled text" and hits[1].pid == "p1"
    assert len(decoded) == 1  # one line, decoded once for all its fields


def test_get_many_reads_no_line_until_a_field_is_read(store, monkeypatch):
    """A hit is its row and score until read: a bm25 batch's hits cost no slicing (plain) nor decompression
    (blocks) in `get_many`, and a read hit reads its line once."""
    reads = []
    real = store._stored_line
    monkeypatch.setattr(store, "_stored_line", lambda row: reads.append(row) or real(row))
    hits = store.get_many(np.array([4, 0, 2]), np.array([3.0, 2.0, 1.0], dtype=np.float32))
    assert reads == [] and [p.score for p in hits] == [3.0, 2.0, 1.0]
    assert [p.title for p in hits] == ["Last", "Apple", "Ünïcödé | bars"] and reads == [4, 0, 2]
    assert [(p.pid, p.text) for p in hits] == [("p4", "the end"), ("p0", "An apple a day."),
                                                ("p2", "東京 \"quoted\"\n")]
    assert reads == [4, 0, 2]  # decoded once, all fields
    assert "_store" not in pickle.loads(pickle.dumps(store.get_many([1], [1.0])[0])).__dict__


def test_an_unread_hit_is_one_object_for_the_garbage_collector(store):
    """A batch's hits outlive its young collections: each tracked object they bring is work for the full ones
    (a per-hit __dict__ doubled it; on the 17.7k sample full collections took up to half of a batch's time)."""
    import gc

    rows = np.arange(len(ROWS)).repeat(400)
    scores = np.ones(len(rows), dtype=np.float32)
    gc.collect()
    before = len(gc.get_objects())
    hits = store.get_many(rows, scores)
    assert len(gc.get_objects()) - before <= len(hits) + 10
    assert [p.pid for p in hits[::400]] == [pid for pid, _, _ in ROWS]


def test_hits_keep_their_store_and_the_store_goes_with_its_last_hit(store):
    """A hit's class holds its store: hits read after the store was dropped still read, and once neither the
    store nor any hit is referenced the collector frees the store (and its map)."""
    import gc
    import weakref

    fresh = PassageStore(store.folder)  # (the fixture's store stays referenced by pytest)
    hits = fresh.get_many(np.array([4, 1]), np.array([2.0, 1.0], dtype=np.float32))
    alive = weakref.ref(fresh)
    del fresh
    gc.collect()
    assert alive() is not None and [(p.pid, p.text) for p in hits] == [("p4", "the end"), ("p1", "untitled text")]
    copied = pickle.loads(pickle.dumps(hits[0]))
    assert copied == hits[0] and type(copied).__name__ == "StoredPassage"
    del hits
    gc.collect()
    assert alive() is None and copied.title == "Last"


def test_rows_outside_the_store_are_refused(store):
    for rows in ([5], [-1], [0, 99], [3, -2, 1]):
        with pytest.raises(IndexError):
            store.get_many(np.array(rows), np.ones(len(rows), dtype=np.float32))


def test_bm25_hits_equal_the_eager_passages_and_read_lazily(wiki17_corpus, monkeypatch):
    from ragzoo.retrieval import make_retriever

    retriever = make_retriever(f"bm25:{wiki17_corpus}", show_progress=False)
    queries = ["Which magazine was started first, Arthur's Magazine or First for Women?", "the of and",
               "Russian civil war Bolsheviks"]
    decoded = []
    real = store_module.ujson.loads
    monkeypatch.setattr(store_module.ujson, "loads", lambda line: decoded.append(line) or real(line))
    hits = retriever.batch(queries, 10)
    assert decoded == []  # a search decodes nothing until its hits are read
    for ranked in hits:
        assert [p.score for p in ranked] == sorted((p.score for p in ranked), reverse=True)
        assert all(p.score > 0 for p in ranked)
        eager = [retriever.store.get(int(pid_row), p.score) for pid_row, p in zip(_rows(retriever, ranked), ranked)]
        assert ranked == eager
    assert [len(r) for r in hits][1] == 0 and len(hits[0]) == 10
    assert hits[0][0].title and hits[0][0].long_text.startswith(hits[0][0].title + " | ")


def _rows(retriever, ranked):
    pids = {p.pid for p in ranked}
    found = {}
    for row in range(len(retriever.store)):
        passage = retriever.store.get(row)
        if passage.pid in pids:
            found[passage.pid] = row
    return [found[p.pid] for p in ranked]
