"""The local colbert-ai (PLAID) backend: errors without colbert-ai, and a real tiny index when it is installed.

No ColBERTv2 checkpoint can be downloaded here, so the end-to-end test writes an untrained tiny BERT
checkpoint (`make_random_checkpoint`): it checks the wiring (build, load, search, "Title | text" answers,
corpus ids), not ranking quality. The first run on a machine JIT-compiles colbert-ai's four C++ extensions
(~100 s on 2 cores); later runs reuse them from the torch extensions cache (~10 s).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import shutil

import pytest

from ragzoo.errors import ConfigError, RetrieverError
from ragzoo.retrieval import make_retriever
from ragzoo.retrieval.base import Passage
from ragzoo.retrieval.colbert_local import ColBERTLocalRetriever, build_colbert_index, make_random_checkpoint


def _colbert_skip_reason() -> str | None:
    if importlib.util.find_spec("colbert") is None:
        return "colbert-ai is not installed (optional extra ragzoo[colbert])"
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        return f"colbert-ai 0.2.22 needs transformers<5, found {transformers.__version__}"
    if shutil.which("c++") is None or importlib.util.find_spec("ninja") is None:
        return "colbert-ai on CPU compiles C++ extensions: needs a C++ compiler and the ninja package"
    return None


needs_colbert = pytest.mark.skipif(_colbert_skip_reason() is not None, reason=_colbert_skip_reason() or "")


def test_missing_index_is_a_retriever_error(tmp_path):
    with pytest.raises(RetrieverError, match="not a colbert-ai index"):
        ColBERTLocalRetriever(tmp_path)
    with pytest.raises(RetrieverError, match="not a colbert-ai index"):
        make_retriever(f"colbert:{tmp_path}")


def test_build_without_checkpoint_is_a_config_error(tmp_path, wiki17_corpus):
    with pytest.raises(ConfigError, match="--checkpoint"):
        build_colbert_index(wiki17_corpus, tmp_path / "index", checkpoint="")


@pytest.mark.skipif(importlib.util.find_spec("colbert") is not None, reason="colbert-ai is installed")
def test_loading_an_index_sizes_torchs_pool_to_the_usable_cpus(tmp_path, monkeypatch):
    """As the dense encoder's: torch's pool counts the host's cores, not a container's quota (ragzoo.machine)."""
    from ragzoo import machine
    from ragzoo.retrieval import colbert_local

    class Searcher:
        def __init__(self, **options):
            self.options = options

    capped = []
    monkeypatch.setattr(colbert_local, "_import_colbert", lambda: (None, Searcher, None, None, None))
    monkeypatch.setattr(machine, "cap_native_threads", lambda: capped.append(True) or 2)
    (tmp_path / "plan.json").write_text("{}")
    retriever = colbert_local.ColBERTLocalRetriever(tmp_path)
    assert capped == [True] and retriever.searcher.options["index"] == tmp_path.name


def test_without_colbert_ai_the_error_names_the_extra(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"ragzoo\[colbert\]"):
        ColBERTLocalRetriever(tmp_path)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory, wiki17_corpus):
    folder = tmp_path_factory.mktemp("colbert")
    lines = list(itertools.islice(open(wiki17_corpus, encoding="utf-8"), 60))
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(lines), encoding="utf-8")
    rows = [json.loads(line) for line in lines]
    checkpoint = make_random_checkpoint(folder / "checkpoint", (f"{row['title']} {row['text']}" for row in rows))
    meta = build_colbert_index(corpus, folder / "index", str(checkpoint), show_progress=False)
    return folder / "index", rows, meta


@needs_colbert
def test_build_writes_a_plaid_index_with_the_collection(tiny_index):
    index, rows, meta = tiny_index
    assert meta["num_docs"] == len(rows) == 60
    assert (index / "plaid" / "plan.json").exists() and (index / "plaid" / "ivf.pid.pt").exists()
    assert json.loads((index / "pids.json").read_text()) == [row["id"] for row in rows]
    first = (index / "collection.tsv").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(f"0\t{rows[0]['title']} | ")


@needs_colbert
def test_search_answers_corpus_passages_with_ids_and_text(tiny_index):
    index, rows, _meta = tiny_index
    by_id = {row["id"]: row for row in rows}
    retriever = make_retriever(f"colbert:{index}")
    assert retriever.spec == f"colbert:{index}"
    found = retriever(rows[7]["title"], 5)
    assert len(found) == 5 and all(isinstance(passage, Passage) for passage in found)
    assert len({passage.pid for passage in found}) == 5
    for passage in found:
        row = by_id[passage.pid]  # corpus ids, not colbert-ai's row numbers
        assert (passage.title, passage.text) == (row["title"], row["text"].replace("\t", " ").replace("\n", " "))
    scores = [passage.score for passage in found]
    assert scores == sorted(scores, reverse=True)
    batch = retriever.batch([rows[7]["title"], rows[8]["title"]], 3)
    assert [passage.pid for passage in batch[0]] == [passage.pid for passage in found[:3]]
    with pytest.raises(RetrieverError):
        retriever("", 5)
