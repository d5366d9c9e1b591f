"""BM25 backend: streaming build equals raw bm25s, on-disk cache, staleness, bad input, k bounds."""

from __future__ import annotations

import json
import time

import pytest

from ragzoo.errors import DataError, RetrieverError
from ragzoo.retrieval import make_retriever
from ragzoo.retrieval.bm25 import BM25Retriever, BM25Settings, ensure_bm25_index, make_tokenizer

DOCS = [
    {"id": "d1", "title": "Apple", "text": "The apple is a fruit that grows on apple trees in orchards."},
    {"id": "d2", "title": "Banana", "text": "Bananas are long yellow fruits grown in tropical countries."},
    {"id": "d3", "title": "Paris", "text": "Paris is the capital city of France, on the Seine river."},
    {"id": "d4", "title": "Seine", "text": "The Seine is a river flowing through Paris to the English Channel."},
    {"id": "d5", "title": "Orchard", "text": "An orchard is a plantation of fruit trees such as apples or pears."},
]


def write_corpus(path, docs=DOCS):
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    return path


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "small.jsonl")


def test_small_corpus_ranking_and_passage_fields(corpus):
    retriever = make_retriever(f"bm25:{corpus}", show_progress=False)
    top = retriever("apple trees", 3)
    assert [p.pid for p in top[:2]] == ["d1", "d5"]
    assert top[0].title == "Apple" and top[0].long_text.startswith("Apple | The apple")
    assert top[0].score > top[1].score > 0
    # "river Paris" matches d3 and d4 only: no zero-score filler
    assert {p.pid for p in retriever("river Paris", 5)} == {"d3", "d4"}
    # only stopwords / unknown words: nothing matches, and we say so with an empty list
    assert retriever("the of and", 5) == []
    assert retriever("zzyzx", 5) == []


def test_same_scores_as_raw_bm25s_on_same_tokens(wiki17_corpus):
    import bm25s
    import numpy as np

    from ragzoo.retrieval.corpus import iter_corpus

    ours = make_retriever(f"bm25:{wiki17_corpus}", show_progress=False)
    passages = list(iter_corpus(wiki17_corpus))
    tokenizer = make_tokenizer(BM25Settings())
    ids = tokenizer.tokenize([p.long_text for p in passages], show_progress=False, allow_empty=False)
    raw = bm25s.BM25(k1=0.9, b=0.4)
    raw.index((ids, tokenizer.stem_to_sid), show_progress=False)
    queries = ["Which magazine was started first, Arthur's Magazine or First for Women?",
               "Russian civil war Bolsheviks", "capital of France river"]
    raw_ids = tokenizer.tokenize(queries, update_vocab=False, show_progress=False, allow_empty=False)
    rows, scores = raw.retrieve(raw_ids, k=20, show_progress=False)
    mine = ours.batch(queries, 20)
    for q, row in enumerate(rows):
        assert [p.pid for p in mine[q]] == [passages[i].pid for i in row]
        assert np.allclose([p.score for p in mine[q]], scores[q], atol=1e-4)


@pytest.mark.needs_full_data
def test_hotpotqa_question_finds_gold_titles(wiki17_corpus, data_dir):
    retriever = make_retriever("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl", show_progress=False)
    assert len(retriever) == 17_703
    with open(data_dir / "hotpotqa" / "dev_distractor.jsonl") as handle:
        first = json.loads(handle.readline())
    titles = [p.title for p in retriever(first["question"], 10)]
    assert set(first["supporting_titles"]) <= set(titles)


def test_batch_equals_single(wiki17_corpus, data_dir):
    retriever = make_retriever(f"bm25:{wiki17_corpus}", show_progress=False, n_threads=2)
    with open(data_dir / "hotpotqa" / "dev_distractor.jsonl") as handle:
        questions = [json.loads(line)["question"] for _, line in zip(range(40), handle)]
    questions.append("the of")  # an unanswerable query inside a batch
    batched = retriever.batch(questions, 7)
    assert batched[-1] == []
    assert batched == [retriever(q, 7) for q in questions]


def test_k_bounds_and_empty_query(corpus):
    retriever = make_retriever(f"bm25:{corpus}", show_progress=False)
    for bad_k in (0, -1, 101, 2.5, True):
        with pytest.raises(RetrieverError, match="k must"):
            retriever("apple", bad_k)
    with pytest.raises(RetrieverError, match="empty"):
        retriever("   ", 3)
    with pytest.raises(RetrieverError, match="empty"):
        retriever.batch(["apple", ""], 3)
    assert len(retriever("fruit", 100)) == 3  # k above the corpus size is fine: only matches come back


def test_cache_hit_on_second_build(tmp_path):
    # the cache is keyed by content and shared by the session: make this corpus's content unique
    corpus = write_corpus(tmp_path / "unique.jsonl", DOCS[:4] + [{"id": "u", "title": "U", "text": str(tmp_path)}])
    folder, meta, built = ensure_bm25_index(corpus, show_progress=False)
    assert built and meta["num_docs"] == 5 and meta["settings"]["k1"] == 0.9
    again, _meta, built_again = ensure_bm25_index(corpus, show_progress=False)
    assert again == folder and not built_again
    described = json.loads((folder / "meta.json").read_text())
    assert described["backend"] == "bm25" and described["corpus"]["sha256"] and described["versions"]["bm25s"]
    # another setting is another index
    other, _, built_other = ensure_bm25_index(corpus, BM25Settings(k1=1.5, b=0.75), show_progress=False)
    assert built_other and other != folder


def test_changed_corpus_rebuilds_cached_and_refuses_explicit_index(tmp_path, corpus):
    out = tmp_path / "myindex"
    ensure_bm25_index(corpus, out_dir=out, show_progress=False)
    explicit = make_retriever(f"bm25:{out}")
    assert explicit("Banana", 1)[0].pid == "d2"
    assert make_retriever(f"bm25:{corpus}", show_progress=False)("Banana", 1)[0].pid == "d2"
    time.sleep(0.01)
    write_corpus(corpus, DOCS + [{"id": "d6", "title": "Kiwi", "text": "Kiwi is a bird and a fruit."}])
    with pytest.raises(RetrieverError, match="stale index"):
        make_retriever(f"bm25:{out}")
    fresh = make_retriever(f"bm25:{corpus}", show_progress=False)  # cached by content: a new index
    assert len(fresh) == 6 and fresh("kiwi bird", 1)[0].pid == "d6"


def test_bad_corpora(tmp_path):
    with pytest.raises(DataError, match="not found"):
        make_retriever(f"bm25:{tmp_path / 'missing.jsonl'}")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="empty"):
        make_retriever(f"bm25:{tmp_path / 'empty.jsonl'}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(DOCS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:2"):
        make_retriever(f"bm25:{bad}", show_progress=False)
    dup = write_corpus(tmp_path / "dup.jsonl", [DOCS[0], DOCS[1], DOCS[0]])
    with pytest.raises(DataError, match="duplicate"):
        make_retriever(f"bm25:{dup}", show_progress=False)
    # a failed build leaves no half-written index behind
    from ragzoo.paths import cache_root

    assert not list((cache_root() / "indexes").glob("bm25-dup-*"))
    assert not list((cache_root() / "indexes").glob("*.building-*"))


def test_sentence_list_format(tmp_path):
    corpus = tmp_path / "abstracts.jsonl"
    corpus.write_text(json.dumps({"title": "Ada Lovelace", "text": ["Ada was a mathematician.", " She wrote programs."]})
                      + "\n" + json.dumps({"title": "Babbage", "text": ["Charles Babbage designed engines."]}) + "\n")
    retriever = BM25Retriever.from_corpus(corpus, show_progress=False)
    top = retriever("mathematician programs", 1)[0]
    assert (top.pid, top.title, top.text) == ("0", "Ada Lovelace", "Ada was a mathematician. She wrote programs.")


def test_numba_backend_ranks_like_numpy(tmp_path):
    from ragzoo.retrieval import make_retriever

    corpus = tmp_path / "corpus.jsonl"
    topics = ["river", "mountain", "violin", "rocket", "glacier", "opera", "harbor", "falcon"]
    with open(corpus, "w") as handle:
        for i in range(200):
            words = " ".join(topics[(i * j) % len(topics)] for j in range(1, 6))
            handle.write(json.dumps({"id": f"d{i}", "title": f"Doc {i}", "text": f"{words} number {i}"}) + "\n")
    queries = ["violin opera", "rocket falcon harbor", "glacier river number 17"]
    plain = make_retriever(f"bm25:{corpus}")
    fast = make_retriever(f"bm25:{corpus}?backend=numba")
    assert fast.backend == "numba" and plain.backend == "numpy"
    for query in queries:
        expected, got = plain(query, 10), fast(query, 10)
        assert [round(p.score, 4) for p in got] == [round(p.score, 4) for p in expected]
        cutoff = round(expected[-1].score, 4)  # equal scores at the cut-off may be broken either way
        assert {p.pid for p in got if round(p.score, 4) > cutoff} == \
            {p.pid for p in expected if round(p.score, 4) > cutoff}
    with pytest.raises(Exception, match="auto, numpy or numba"):
        make_retriever(f"bm25:{corpus}?backend=gpu")


def test_auto_backend_is_numba_from_a_million_passages_when_installed(corpus, monkeypatch):
    """The default (`backend=auto`): numpy below `AUTO_NUMBA_FROM` passages (no compile, no numba import for a
    small corpus), numba from there on when numba is installed, numpy without it; the same answers either way."""
    import ragzoo.retrieval.bm25 as bm25

    assert bm25.AUTO_NUMBA_FROM == 1_000_000
    small = make_retriever(f"bm25:{corpus}", show_progress=False)
    assert small.backend == "numpy" and small.pruned._one_call is None
    count = small.num_docs
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", count)  # this corpus counts as large from here on
    large = make_retriever(f"bm25:{corpus}", show_progress=False)
    assert large.backend == "numba" and large.pruned._one_call is not None
    assert make_retriever(f"bm25:{corpus}?backend=numpy", show_progress=False).backend == "numpy"
    for query in ("apple orchard", "river Paris", "yellow fruits trees"):
        found = [(p.pid, p.score) for p in large(query, 3)]
        assert found and found == [(p.pid, p.score) for p in small(query, 3)]
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", count + 1)  # one passage short of it
    assert make_retriever(f"bm25:{corpus}", show_progress=False).backend == "numpy"
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", count)
    from ragzoo.retrieval import bm25_packed

    monkeypatch.setattr(bm25_packed, "numba_installed", lambda: False)  # numba not installed: numpy, no error
    assert make_retriever(f"bm25:{corpus}", show_progress=False).backend == "numpy"


def test_auto_falls_back_to_numpy_where_numba_cannot_run_and_numba_by_name_is_one_line(corpus, monkeypatch, caplog):
    """numba installed but unusable here (a numpy it does not support, a read-only install with nowhere to cache):
    `auto` warns in one line and scores with numpy; `backend=numba` asked by name is refused in one line."""
    import ragzoo.retrieval.bm25 as bm25
    import ragzoo.retrieval.bm25_topk as bm25_topk
    from ragzoo.errors import ConfigError

    expected = [(p.pid, p.score) for p in make_retriever(f"bm25:{corpus}?backend=numpy", show_progress=False)(
        "apple orchard", 3)]

    def unusable(self):
        raise RuntimeError("cannot cache function '_scan_into': no locator available for file\n'bm25_topk.py'")

    monkeypatch.setattr(bm25_topk.NumbaKernels, "__init__", unusable)
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", 1)
    with caplog.at_level("WARNING", logger="ragzoo.retrieval.bm25"):
        retriever = make_retriever(f"bm25:{corpus}", show_progress=False)
    assert retriever.backend == "numpy" and retriever.pruned._one_call is None
    assert [(p.pid, p.score) for p in retriever("apple orchard", 3)] == expected
    warned = [r.getMessage() for r in caplog.records if r.name == "ragzoo.retrieval.bm25"]
    assert len(warned) == 1 and "cannot run here (cannot cache function '_scan_into'" in warned[0]
    assert "\n" not in warned[0]
    refused = r"^the numba bm25 backend cannot run here \(cannot cache .*use backend=numpy$"
    with pytest.raises(ConfigError, match=refused):
        make_retriever(f"bm25:{corpus}?backend=numba", show_progress=False)
    from ragzoo.retrieval import bm25_packed

    monkeypatch.setattr(bm25_packed.WindowedScorer, "compile", unusable)
    with pytest.raises(ConfigError, match=r"^the packed bm25 format needs numba, which cannot run here \(cannot"):
        make_retriever(f"bm25:{corpus}?format=packed", show_progress=False)


@pytest.mark.parametrize("raised, falls_back", [
    (RuntimeError("cannot cache function '_top_k_csc': no locator available"), True),
    (OSError(30, "Read-only file system"), True),
    (ImportError("Numba needs NumPy 2.2 or less. Got NumPy 2.4."), True),
    (TypeError("a bug of ours"), False),  # not numba's: raised as it is, not hidden behind numpy
    (MemoryError(), False),
    ("stale", False),  # the index's own fault (ConfigError): refused, not scored by the slower path
])
def test_only_numba_that_cannot_run_falls_back(corpus, monkeypatch, caplog, raised, falls_back):
    """What the compile at load may raise: numba that cannot compile, cache or import here falls back to numpy
    under `auto`; anything else is raised as it is."""
    import ragzoo.retrieval.bm25 as bm25
    import ragzoo.retrieval.bm25_topk as bm25_topk
    from ragzoo.errors import ConfigError

    if raised == "stale":
        raised = ConfigError("the csc index's block files do not match its columns; rebuild the index")

    compiles = []

    def compile_fails(self):
        compiles.append("numba" if isinstance(self.kernels, bm25_topk.NumbaKernels) else "numpy")
        if compiles[-1] == "numba":
            raise raised

    monkeypatch.setattr(bm25_topk.PrunedTopK, "compile", compile_fails)
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", 1)
    monkeypatch.setattr(bm25, "_numba_failure", None)  # this process has not seen numba fail yet
    if falls_back:
        with caplog.at_level("WARNING", logger="ragzoo.retrieval.bm25"):
            first = make_retriever(f"bm25:{corpus}", show_progress=False)
        assert first.backend == "numpy"
        assert "numba cannot run here" in caplog.text and "scored with numpy" in caplog.text
        assert compiles == ["numba"]  # the numpy fallback is not compiled (it has nothing to compile)
        # the next index this process loads (a grid's next cell): numpy at once, no second try nor warning
        caplog.clear()
        with caplog.at_level("WARNING", logger="ragzoo.retrieval.bm25"):
            assert bm25.BM25Retriever(first.index_dir).backend == "numpy"
        assert compiles == ["numba", "numpy"] and "numba cannot run here" not in caplog.text, caplog.text
    else:
        with pytest.raises(type(raised)):
            make_retriever(f"bm25:{corpus}", show_progress=False)


def test_the_windowed_scorer_is_compiled_at_load_and_counts_nothing(corpus, monkeypatch):
    """From WINDOWED_FROM passages on the numba path scores window by window (`CscWindows`): that kernel is the one
    compiled at load, and its running stats start at zero; no scratch is kept for the loading thread."""
    from ragzoo.retrieval import bm25_packed, bm25_topk

    monkeypatch.setattr(bm25_topk, "WINDOWED_FROM", 1)
    asked = []
    original = bm25_packed.CscWindows.top_k
    monkeypatch.setattr(bm25_packed.CscWindows, "top_k",
                        lambda self, ids, k: (asked.append(list(ids)), original(self, ids, k))[1])
    retriever = make_retriever(f"bm25:{corpus}?backend=numba", show_progress=False)
    windows = retriever.pruned._windows
    assert windows is not None and asked == [[0]]
    assert windows.stats.tolist() == [0] * len(windows.stats)
    assert getattr(windows._local, "scratch", None) is None
    assert retriever("apple orchard", 2) and windows.postings_scanned > 0


def test_numba_installed_but_not_importable_is_said_so(corpus, monkeypatch, caplog):
    """numba built for another numpy: by name, one line saying so (not "pip install"); auto falls back."""
    import sys

    import ragzoo.retrieval.bm25 as bm25
    from ragzoo.errors import ConfigError

    class Refuses:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "numba" or name.startswith("numba."):
                raise ImportError("Numba needs NumPy 2.2 or less. Got NumPy 2.4.")
            return None

    for name in [name for name in sys.modules if name == "numba" or name.startswith("numba.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Refuses(), *sys.meta_path])
    import ragzoo.retrieval.bm25_packed as bm25_packed

    import ragzoo.retrieval.bm25_topk as bm25_topk

    monkeypatch.setattr(bm25_packed, "_COMPILED", {})  # as in a process that has not compiled yet, whatever ran
    monkeypatch.setattr(bm25_topk, "_COMPILED", None)  # before in this worker (the test alone failed, in its file not)
    with pytest.raises(ConfigError, match=r"^the numba bm25 backend needs numba, which is installed but does not "
                                          r"import here \(Numba needs NumPy 2\.2"):
        make_retriever(f"bm25:{corpus}?backend=numba", show_progress=False)
    monkeypatch.setattr(bm25, "AUTO_NUMBA_FROM", 1)
    with caplog.at_level("WARNING", logger="ragzoo.retrieval.bm25"):
        assert make_retriever(f"bm25:{corpus}", show_progress=False).backend == "numpy"
    assert "installed but does not import here" in caplog.text


@pytest.mark.parametrize("spec", ["?backend=numba", "?format=packed"])
def test_a_numba_scorer_is_compiled_while_the_retriever_is_built(corpus, monkeypatch, spec):
    """The first compile (~10-13 s) happens while the retriever is built, not in the first questions' --deadline:
    one query through the scorer before the constructor returns; none for numpy."""
    from ragzoo.retrieval import bm25_packed, bm25_topk

    asked = []
    for cls in (bm25_topk.PrunedTopK, bm25_packed.PackedIndex):
        original = cls.top_k
        monkeypatch.setattr(cls, "top_k", lambda self, ids, k, _original=original, _name=cls.__name__: (
            asked.append((_name, list(ids), k)), _original(self, ids, k))[1])
    make_retriever(f"bm25:{corpus}{spec}", show_progress=False)
    assert asked == [("PackedIndex" if "packed" in spec else "PrunedTopK", [0], 1)]
    asked.clear()
    make_retriever(f"bm25:{corpus}?backend=numpy", show_progress=False)
    assert asked == []


def test_warm_up_asks_the_kernel_to_read_the_score_matrix_ahead(corpus, monkeypatch):
    import mmap

    import ragzoo.retrieval.bm25 as bm25

    advised = []
    retriever = make_retriever(f"bm25:{corpus}", show_progress=False)
    real_advise = bm25._advise
    monkeypatch.setattr(bm25, "_advise", lambda *arrays, advice: (advised.append((arrays, advice)),
                                                                   real_advise(*arrays, advice=advice)))
    retriever.warm_up()
    (arrays, advice), = advised
    assert advice == "MADV_WILLNEED" and hasattr(mmap, advice)
    assert arrays[0] is retriever.model.scores["data"] and arrays[1] is retriever.model.scores["indices"]
    assert all(getattr(array, "_mmap", None) is not None for array in arrays)  # real maps, so the advice lands


def test_numba_batch_on_one_thread_equals_single_and_reads_the_store_once(wiki17_corpus, data_dir, monkeypatch):
    """A batch on the calling thread scores its queries in one loop and builds every hit in one store call
    (the per-query Python was what kept the batch path behind bm25s's at 17.7k passages), with the same hits,
    scores and order as one query per call, an unanswerable query among them."""
    pytest.importorskip("numba")
    retriever = make_retriever(f"bm25:{wiki17_corpus}?backend=numba", show_progress=False)
    with open(data_dir / "hotpotqa" / "dev_distractor.jsonl") as handle:
        questions = [json.loads(line)["question"] for _, line in zip(range(60), handle)]
    questions[7:7] = ["the of", questions[3]]  # unanswerable, and a repeat
    singles = [retriever(q, 10) for q in questions]
    calls = []
    real_get_many = retriever.store.get_many
    monkeypatch.setattr(retriever.store, "get_many", lambda rows, scores: (calls.append(len(rows)),
                                                                           real_get_many(rows, scores))[1])
    before = retriever.pruned.one_call_queries
    batched = retriever.batch(questions, 10)
    assert len(calls) == 1 and calls[0] == sum(map(len, singles))
    assert batched == singles and batched[7] == [] and batched[8] == batched[3]
    assert [[p.score for p in hits] for hits in batched] == [[p.score for p in hits] for hits in singles]
    # the kernel's counters still see every answered query
    assert retriever.pruned.one_call_queries == before + len(questions) - 1


def _hotpotqa_questions(data_dir, count: int) -> list[str]:
    with open(data_dir / "hotpotqa" / "dev_distractor.jsonl") as handle:
        return [json.loads(line)["question"] for _, line in zip(range(count), handle)]


@pytest.mark.parametrize("options", ["backend=numba", "backend=numpy", "format=packed"])
def test_batch_equals_one_query_at_a_time_over_hundreds_of_questions(wiki17_corpus, data_dir, options, tmp_path):
    """The batch path (one tokenising pass, the kernel in one loop, every hit in one store call, hits cut per
    query) answers what each query answers alone and what the scorer ranks: the same rows (pids), scores, order,
    titles and texts, for k = 1, 10 and 100, with unanswerable queries (stopwords, unknown words) among them and
    queries with fewer matches than k. (packed: over the sample's first 4,000 passages, to build in ~1 s.)"""
    if options != "backend=numpy":
        pytest.importorskip("numba")
    corpus = wiki17_corpus
    if options == "format=packed":
        corpus = tmp_path / "first4000.jsonl"
        with open(wiki17_corpus, encoding="utf-8") as source:
            corpus.write_text("".join(line for _, line in zip(range(4000), source)), encoding="utf-8")
    retriever = make_retriever(f"bm25:{corpus}?{options}", show_progress=False)
    questions = _hotpotqa_questions(data_dir, 300)
    questions[5:5] = ["the of and", "zzyzx qqqqvv", "Bolsheviks", "Bolsheviks Bolsheviks zzyzx"]
    questions += [questions[0], "THE Of", "xylophonist"]
    for k in (1, 10, 100) if options == "backend=numba" else (1, 100):
        batched = retriever.batch(questions, k)
        singles = [retriever(q, k) for q in questions]
        expected = []
        for ids in retriever.tokenize(questions):
            rows, scores = retriever.pruned.top_k(ids, k) if ids else ([], [])
            expected.append([(retriever.store.get(int(row)).pid, float(score)) for row, score in zip(rows, scores)])
        assert [[(p.pid, p.score) for p in hits] for hits in batched] == expected
        assert batched == singles
        assert [[(p.pid, p.title, p.text, p.score, type(p.score)) for p in hits] for hits in batched] == \
            [[(p.pid, p.title, p.text, p.score, type(p.score)) for p in hits] for hits in singles]
        assert batched[5] == batched[6] == [] and batched[-2] == []
        assert all(len(hits) <= k for hits in batched) and batched[0] == batched[-3]
        if k == 100:
            assert 0 < len(batched[7]) < k  # fewer matches than k
        assert sum(map(len, batched)) > (len(questions) - 5) * min(k, 10) * 0.8


def test_a_batch_does_its_per_batch_work_once(wiki17_corpus, data_dir, monkeypatch):
    """What a batch pays once stays once: one store call, no passage line read until a hit is read, no regex
    split nor stemming for known words (the tokenising goes through the piece and word caches), one kernel
    call per answerable query and nothing more."""
    pytest.importorskip("numba")
    from ragzoo.retrieval import bm25_topk
    from ragzoo.retrieval.store import PassageStore

    retriever = make_retriever(f"bm25:{wiki17_corpus}?backend=numba", show_progress=False)
    questions = _hotpotqa_questions(data_dir, 200) + ["the of"]
    first = [[p.title for p in ranked] for ranked in retriever.batch(questions, 10)]  # every word now known
    counts = {"get_many": 0, "line": 0, "split": 0, "stem": 0}
    terms, store = retriever._query_terms, retriever.store
    real_many, real_line, real_split, real_stem = store.get_many, store._stored_line, terms.split, terms.stemmer

    def counted(name, function):
        def wrapper(*args):
            counts[name] += 1
            return function(*args)
        return wrapper

    monkeypatch.setattr(store, "get_many", counted("get_many", real_many))
    monkeypatch.setattr(store, "_stored_line", counted("line", real_line))
    monkeypatch.setattr(terms, "split", counted("split", real_split))
    monkeypatch.setattr(terms, "stemmer", counted("stem", real_stem))
    before = retriever.pruned.one_call_queries
    batched = retriever.batch(questions, 10)
    assert counts == {"get_many": 1, "line": 0, "split": 0, "stem": 0}
    assert retriever.pruned.one_call_queries == before + len(questions) - 1
    # the kernel ran from the compiled batch loop, not from one Python call per question
    assert [loop for loop in bm25_topk._LOOPS.values() if loop is not None]
    hits = sum(map(len, batched))
    assert [[p.title for p in ranked] for ranked in batched] == first
    assert counts["line"] == hits > 1500 and isinstance(store, PassageStore)  # each hit read once, when read
    # where the loop cannot be compiled, the kernel is called query by query, with the same answers
    monkeypatch.setattr(bm25_topk, "_compiled_loop", lambda *args: None)
    assert [[p.title for p in ranked] for ranked in retriever.batch(questions, 10)] == first


@pytest.mark.parametrize("index_format", ["csc", "packed"])
def test_meta_names_the_passage_store_files_the_build_wrote(tmp_path, corpus, index_format):
    """meta.json's "files" says which passage store was written: the plain one for csc, the compressed blocks for
    packed (it used to name passages.jsonl for both)."""
    import re

    from ragzoo.retrieval.bm25 import build_bm25_index

    if index_format == "packed":
        pytest.importorskip("numba")
    meta = build_bm25_index(corpus, tmp_path / "index", show_progress=False, index_format=index_format)
    written = {path.name for path in (tmp_path / "index").iterdir() if path.name.startswith("passage")}
    named = set(re.findall(r"passage[\w.]*\.\w+", meta["files"]))
    assert written and named == written
    assert json.loads((tmp_path / "index" / "meta.json").read_text())["files"] == meta["files"]
