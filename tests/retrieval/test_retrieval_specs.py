"""Spec strings, the fixed (replay) retriever, the local colbert wiring and the retrieval CLI commands."""

from __future__ import annotations

import json

import pytest

from ragzoo.errors import ConfigError, RetrieverError
from ragzoo.retrieval import Passage, make_retriever
from ragzoo.retrieval.fixed import FixedRetriever
from ragzoo.retrieval.specs import DEFAULT_RETRIEVER


@pytest.mark.parametrize("spec", ["", "bm25", "bm25:", "elastic:foo", "http://localhost:8893", "dense:x?color=red"])
def test_bad_specs_list_the_valid_forms(spec, tmp_path):
    with pytest.raises(ConfigError) as error:
        make_retriever(spec)
    message = str(error.value)
    assert "bm25:" in message or "colbertv2:" in message or "known" in message


@pytest.mark.needs_full_data
def test_bm25_spec_options_and_data_relative_default(tmp_path):
    assert DEFAULT_RETRIEVER == "bm25:hotpotqa/corpus_wiki17_abstracts.jsonl"
    default = make_retriever(DEFAULT_RETRIEVER, show_progress=False)
    assert default.spec == DEFAULT_RETRIEVER and len(default) == 17_703
    tuned = make_retriever("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl?k1=1.5&b=0.75", show_progress=False)
    assert (tuned.settings.k1, tuned.settings.b) == (1.5, 0.75)
    with pytest.raises(ConfigError, match="numbers"):
        make_retriever("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl?k1=high")


def test_fixed_retriever_replays_recorded_passages():
    import dspy

    examples = [dspy.Example(question="Who wrote Hamlet?", retrieved=[
                    {"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
                    {"title": "Shakespeare", "text": "William Shakespeare was an English playwright."}]),
                dspy.Example(question="What is 2+2?", answers=["4"])]  # no recording: skipped
    retriever = make_retriever("fixed", examples=examples)
    top = retriever("Who  wrote Hamlet? ", 1)  # whitespace-insensitive lookup
    assert [p.title for p in top] == ["Hamlet"] and top[0].pid.startswith("fixed-")
    assert [p.title for p in retriever.batch(["Who wrote Hamlet?"], 5)[0]] == ["Hamlet", "Shakespeare"]
    with pytest.raises(RetrieverError, match="no recorded passages"):
        retriever("What is 2+2?", 3)
    direct = FixedRetriever({"q": [Passage("a", "A", "alpha"), "B | beta"]})
    assert [(p.pid, p.title) for p in direct("q", 2)] == [("a", "A"), (direct("q", 2)[1].pid, "B")]
    with pytest.raises(ConfigError, match="examples"):
        make_retriever("fixed")
    with pytest.raises(ConfigError, match="no examples"):
        FixedRetriever.from_examples([dspy.Example(question="x")])


def test_fixed_retriever_on_activerag_data(data_dir):

    rows = [json.loads(line) for line in open(data_dir / "nq_open" / "dev_activerag500.jsonl")][:5]
    retriever = FixedRetriever.from_examples(rows)
    assert len(retriever(rows[0]["question"], 5)) == min(5, len(rows[0]["retrieved"]))


def test_colbert_backend_wiring(tmp_path):
    with pytest.raises(RetrieverError, match="not a colbert-ai index"):
        make_retriever(f"colbert:{tmp_path}")
    (tmp_path / "plan.json").write_text("{}")
    try:
        import colbert  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"ragzoo\[colbert\]"):
            make_retriever(f"colbert:{tmp_path}")


def run_cli(*argv):
    from ragzoo.cli import main

    return main(list(argv))


def test_cli_index_search_and_errors(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "x1", "title": "Zebra", "text": "Zebras have black and white stripes."}) + "\n"
                      + json.dumps({"id": "x2", "title": "Lion", "text": "Lions are big cats of Africa."}) + "\n")
    out = tmp_path / "idx"
    assert run_cli("index", "build", "--corpus", str(corpus), "--out", str(out), "--quiet") == 0
    printed = capsys.readouterr().out
    assert "bm25 index built" in printed and "2 passages" in printed and str(out) in printed
    assert run_cli("search", "striped zebra", "-k", "1", "--retriever", f"bm25:{out}", "--json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["topk"][0]["text"].startswith("Zebra | ") and answer["topk"][0]["prob"] == 1.0
    assert run_cli("search", "cats", "--retriever", f"bm25:{corpus}") == 0
    assert "Lion" in capsys.readouterr().out
    assert run_cli("search", "cats", "-k", "0", "--retriever", f"bm25:{corpus}") == 2
    assert run_cli("search", "cats", "--retriever", "nope:thing") == 2
    assert run_cli("index", "build", "--corpus", str(tmp_path / "missing.jsonl")) == 2
    errors = capsys.readouterr().err
    assert "k must be in 1..100" in errors and "unknown retriever spec" in errors and "corpus not found" in errors
    assert "Traceback" not in errors


def test_bm25_options_over_an_index_folder_must_be_the_folders_own(tmp_path):
    """A spec over an index folder scores with the folder's k1 and b: asking others is refused in one line, not
    dropped (review: `bm25:DIR?k1=3.0&b=1.0` scored as `bm25:DIR`)."""
    import json

    from ragzoo.errors import ConfigError
    from ragzoo.retrieval import make_retriever

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"T{i}", "text": f"word{i} shared text"}) + "\n"
                              for i in range(20)))
    folder = make_retriever(f"bm25:{corpus}", show_progress=False).index_dir
    assert make_retriever(f"bm25:{folder}").settings.k1 == 0.9
    assert make_retriever(f"bm25:{folder}?k1=0.9&b=0.4").num_docs == 20  # the folder's own values
    with pytest.raises(ConfigError, match=r"built with k1=0.9; the retriever spec asks k1=3.0"):
        make_retriever(f"bm25:{folder}?k1=3.0")
    with pytest.raises(ConfigError, match=r"built with k1=0.9, b=0.4; the retriever spec asks k1=3.0, b=1.0"):
        make_retriever(f"bm25:{folder}?k1=3.0&b=1.0")
    rebuilt = make_retriever(f"bm25:{corpus}?k1=3.0", show_progress=False)  # the corpus: an index for k1=3.0
    assert rebuilt.settings.k1 == 3.0
