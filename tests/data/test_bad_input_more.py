"""Bad input found by review, each refused in one line (or read as meant) rather than a traceback or a silently
wrong result: retriever spec numbers out of range or given twice, a passage whose position collides with another's
id, a HotPotQA-looking file of another shape, a title metric on questions without gold titles, --field-map with a
named dataset, a fixed retriever's passages given as a string, a pipe as --data, a corpus that starts with a BOM."""

from __future__ import annotations

import json
import os

import pytest

from ragzoo.cli import main
from ragzoo.errors import ConfigError, DataError


@pytest.fixture
def small_corpus(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"Title {i}", "text": f"apple fact number {i}"})
                              + "\n" for i in range(12)))
    return corpus


def _refused(argv, capsys, says: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err and "Traceback" not in err, (code, err)
    return err


@pytest.mark.parametrize("options, says", [("k1=nan", "k1=nan must be a finite number >= 0"),
                                           ("b=inf", "b=inf must be a finite number in [0, 1]"),
                                           ("k1=-1&b=0.5", "k1=-1 must be"), ("b=5", "b=5 must be"),
                                           ("k1=1&k1=2", "given twice")])
def test_bm25_options_out_of_range_or_repeated_are_refused(small_corpus, options, says):
    from ragzoo.retrieval import make_retriever

    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        make_retriever(f"bm25:{small_corpus}?{options}", show_progress=False)


def test_a_passage_without_an_id_may_not_take_another_s(tmp_path):
    from ragzoo.retrieval.corpus import iter_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "title": "A", "text": "a"}) + "\n"
                      + json.dumps({"title": "B", "text": "b"}) + "\n")  # its position, 1, is the first's id
    with pytest.raises(DataError, match=r"duplicate id '1' \(this passage has no id: its position is its id\)"):
        list(iter_corpus(corpus))


def test_a_corpus_may_start_with_a_byte_order_mark(tmp_path):
    from ragzoo.retrieval.corpus import iter_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "p", "title": "T", "text": "x"}).encode() + b"\n")
    assert [passage.pid for passage in iter_corpus(corpus)] == ["p"]


@pytest.mark.parametrize("record, says", [
    ({"_id": "x1", "question": "Who?", "answers": ["Paris"], "context": ["passage one", "passage two"]},
     "'context' is not HotPotQA's"),
    ({"question": "Who?", "answers": ["Paris"], "supporting_facts": ["Paris is nice", "France"]},
     "'supporting_facts' is not HotPotQA's"),
    ({"_id": "x2", "question": "Who?", "answers": ["Paris"], "context": [["T", "plain string"]]},
     "'context' is not HotPotQA's"),
])
def test_a_json_file_read_as_hotpotqa_but_of_another_shape_is_refused(tmp_path, capsys, record, says):
    data = tmp_path / "questions.json"
    data.write_text(json.dumps([record]))
    _refused(["evaluate", "--method", "direct", "--data", str(data), "--lm", "dry-run", "--out",
              str(tmp_path / "run")], capsys, says)
    assert not (tmp_path / "run").exists()


def test_a_title_metric_on_questions_without_gold_titles_is_refused(tmp_path, capsys, small_corpus):
    data = tmp_path / "questions.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "Who?", "answers": ["x"]}) + "\n")
    _refused(["evaluate", "--method", "rag", "--data", str(data), "--retriever", f"bm25:{small_corpus}", "--metric",
              "em,recall", "--lm", "dry-run", "--out", str(tmp_path / "run")], capsys,
             "--metric recall scores retrieved titles against gold titles, which 1 of these 1 questions lack")
    assert not (tmp_path / "run").exists()


def test_field_map_with_a_named_dataset_is_refused(tmp_path, capsys):
    _refused(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "--field-map", "question=q", "--lm",
              "dry-run", "--out", str(tmp_path / "run")], capsys, "--field-map names the fields of a --data file")


def test_a_fixed_retriever_s_passages_given_as_a_string_are_refused():
    from ragzoo.retrieval.fixed import FixedRetriever

    with pytest.raises(DataError, match="must be a list of passages, got str"):
        FixedRetriever.from_examples([{"question": "q", "answers": ["a"], "retrieved": "notalist"}])


def test_a_pipe_as_data_is_refused_for_what_it_is(tmp_path, capsys):
    """`--data <(cat questions.jsonl)`: a pipe has no size, which was taken for an empty file (found by review); it
    can be read once only, and a data file is read more than once, so it is refused as a pipe, without reading it."""
    fifo = tmp_path / "questions.fifo"
    os.mkfifo(fifo)
    _refused(["evaluate", "--method", "direct", "--data", str(fifo), "--lm", "dry-run", "--out",
              str(tmp_path / "run")], capsys, "not a regular file (a pipe or a device)")


def test_a_non_finite_answer_is_refused_and_too_few_questions_name_the_flags(tmp_path, capsys):
    data = tmp_path / "questions.jsonl"
    data.write_text('{"id": "a", "question": "Who?", "answers": NaN}\n')
    _refused(["evaluate", "--method", "direct", "--data", str(data), "--lm", "dry-run", "--out",
              str(tmp_path / "run")], capsys, "holds a number that is not finite (NaN or infinity)")
    data.write_text(json.dumps({"id": "a", "question": "Who?", "answers": ["x"]}) + "\n")
    _refused(["evaluate", "--method", "direct", "--data", str(data), "-n", "5", "--lm", "dry-run", "--out",
              str(tmp_path / "run")], capsys, "ask for fewer (-n; a compile: --train-n and --dev-n)")


def test_a_model_that_does_not_load_is_one_line(monkeypatch):
    """sentence-transformers' message for an unknown model runs over several lines; the refusal is one."""
    import sys
    import types

    from ragzoo.retrieval import dense

    fake = types.ModuleType("sentence_transformers")

    def refuses(location, device=None):
        raise OSError("not-a-model is not a local folder\nand is not a valid model identifier\nlisted on the hub")

    fake.SentenceTransformer = refuses
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    with pytest.raises(ConfigError) as refused:
        dense.load_model("not-a-model")
    assert "\n" not in str(refused.value) and "cannot load sentence-transformers model 'not-a-model'" in str(
        refused.value)
