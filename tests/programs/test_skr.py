"""SKR_knn (programs/skr.py): labels from a compile-time pass, a nearest-neighbour vote, one answering call."""

from __future__ import annotations

import dspy
import numpy as np

from ragzoo import programs
from ragzoo.optimizers import compile_program
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages


def fake_embed(texts):
    """Questions about films near each other, questions about rivers near each other."""
    return np.array([[1.0, 0.0] if "film" in text else [0.0, 1.0] for text in texts])


def skr(**knobs):
    program = programs.get("skr", retriever=StaticRetriever(make_passages(6)), **knobs)
    object.__setattr__(program, "embed", fake_embed)
    return program


def labelled(*pairs):
    return [dspy.Example(question=q, retrieve=r).with_inputs("question") for q, r in pairs]


def test_uncompiled_skr_retrieves_but_says_it_has_no_labels(caplog):
    from ragzoo.tracing import trace_example

    program = skr(k=2)
    lm = ScriptedLM({"rag_answer": {"answer": "Doc 0"}})
    with dspy.context(lm=lm), caplog.at_level("WARNING"):
        with trace_example() as trace:
            pred = program(question="Which film?")
        program(question="Which river?")
    assert lm.call_names == ["rag_answer"] * 2 and pred.retrieved is True and len(pred.passages) == 2
    assert pred.decision == "no labels" and pred.neighbours == []
    assert [d["where"] for d in trace.degradations] == ["skr_memory"]
    assert "compile-time labels" in trace.degradations[0]["what"]
    warnings = [r.getMessage() for r in caplog.records if "compile-time labels" in r.getMessage()]
    assert len(warnings) == 1 and "skr" in warnings[0]  # once per program, not once per question


def test_a_compiled_skr_with_labels_says_nothing(caplog):
    program = skr(neighbours=1)
    program.memory.demos = labelled(("film a?", False))
    lm = ScriptedLM({"direct_answer": {"answer": "A"}})
    with dspy.context(lm=lm), caplog.at_level("WARNING"):
        pred = program(question="film b?")
    assert pred.decision == "neighbours" and pred.retrieved is False and not caplog.records


def test_a_tie_among_the_neighbours_retrieves():
    program = skr(neighbours=2)
    program.memory.demos = labelled(("film a?", False), ("film b?", True), ("river c?", False))
    assert program.decide("film d?") == (True, ["film a?", "film b?"])
    program = skr(neighbours=3)
    program.memory.demos = labelled(("film a?", False), ("film b?", True), ("film e?", False))
    assert program.decide("film d?")[0] is False  # 1 of 3: a majority says known


def test_ten_neighbours_vote_by_default():
    assert programs.info("skr").knobs["neighbours"] == 10 and programs.info("skr").knobs["k"] == 5
    program = skr()
    # all equally near: the first ten (memory order) vote 5 to 5, a tie, so retrieve; an eleventh would tip it
    program.memory.demos = labelled(*[(f"film {i}?", i < 5) for i in range(11)])
    retrieve, neighbours = program.decide("film x?")
    assert retrieve is True and neighbours == [f"film {i}?" for i in range(10)]


def test_a_question_both_answer_correctly_is_known():
    program = skr()
    train = [dspy.Example(question="film both?", answers=["right"]).with_inputs("question"),
             dspy.Example(question="river rag only?", answers=["Doc 0"]).with_inputs("question"),
             dspy.Example(question="film direct only?", answers=["known"]).with_inputs("question"),
             dspy.Example(question="film neither?", answers=["zzz"]).with_inputs("question")]
    direct = {"film both?": "right", "river rag only?": "no", "film direct only?": "known", "film neither?": "no"}
    rag = {"film both?": "right", "river rag only?": "Doc 0", "film direct only?": "no", "film neither?": "no"}
    # called outside a module's forward, the calls are named by their signatures
    lm = ScriptedLM({"AnswerQuestion": lambda c: {"answer": direct[c.inputs["question"]]},
                     "AnswerWithContext": lambda c: {"answer": rag[c.inputs["question"]]}})
    with dspy.context(lm=lm):
        memory = program.label_questions(train)
    assert lm.call_names == ["AnswerQuestion", "AnswerWithContext"] * 4  # two calls per training question
    assert [(m["question"], m["retrieve"]) for m in memory] == \
        [("film both?", False), ("river rag only?", True), ("film direct only?", False)]


def test_compile_pass_labels_questions_and_neighbours_decide():
    train = [dspy.Example(question=f"film question {i}?", answers=["known"]).with_inputs("question")
             for i in range(3)] + \
            [dspy.Example(question=f"river question {i}?", answers=["Doc 0"]).with_inputs("question")
             for i in range(3)] + [dspy.Example(question="film nobody knows?", answers=["zzz"]).with_inputs("question")]
    # closed book knows the film answers; only retrieval finds the river answers
    lm = ScriptedLM({"AnswerQuestion": {"answer": "known"}, "AnswerWithContext": {"answer": "Doc 0"},
                     "direct_answer": {"answer": "known"}, "rag_answer": {"answer": "Doc 0"}})
    program = skr(neighbours=3)
    with dspy.context(lm=lm):
        result = compile_program(program, trainset=train, optimizer="labeled", metric="em")
    assert result.staged[0]["examples"] == 6  # the question both got wrong has no label
    memory = result.program.memory.demos
    assert sorted((demo["question"][:5], demo["retrieve"]) for demo in memory) == \
        [("film ", False)] * 3 + [("river", True)] * 3
    compiled = result.program
    object.__setattr__(compiled, "embed", fake_embed)
    lm = ScriptedLM({"direct_answer": {"answer": "A"}, "rag_answer": {"answer": "B"}})
    with dspy.context(lm=lm):
        film = compiled(question="another film?")
        river = compiled(question="another river?")
    assert lm.call_names == ["direct_answer", "rag_answer"]
    assert (film.retrieved, film.answer, film.passages) == (False, "A", [])
    assert river.retrieved is True and len(river.passages) == 5 and len(river.neighbours) == 3


def test_the_memory_is_saved_and_loaded_as_the_memory_predictors_demos(tmp_path):
    program = skr(neighbours=1)
    program.memory.demos = [dspy.Example(question="film a?", retrieve=False).with_inputs("question"),
                            dspy.Example(question="river b?", retrieve=True).with_inputs("question")]
    program.save(str(tmp_path / "skr.json"))
    loaded = skr(neighbours=1)
    loaded.load(str(tmp_path / "skr.json"))
    assert [(d["question"], d["retrieve"]) for d in loaded.memory.demos] == [("film a?", False), ("river b?", True)]
    assert loaded.decide("film c?")[0] is False and loaded.decide("river d?")[0] is True


def test_the_index_follows_the_memory_when_it_changes():
    program = skr(neighbours=1)
    program.memory.demos = labelled(("film a?", False), ("river b?", True))
    assert program.decide("film x?") == (False, ["film a?"])
    program.memory.demos = labelled(("river b?", True), ("film a?", False))  # e.g. a compile replaced it
    assert program.decide("film x?") == (False, ["film a?"])


def test_memory_records_without_a_label_are_left_out():
    program = skr(neighbours=2)
    program.memory.demos = [dspy.Example(question="film a?", retrieve=False).with_inputs("question"),
                            dspy.Example(question="film b?").with_inputs("question")]  # its label was unreadable
    assert program.decide("film x?") == (False, ["film a?"])


def test_without_an_injected_embedder_skr_embeds_with_minilm_normalised_and_quietly(monkeypatch):
    import ragzoo.retrieval.dense as dense

    calls = []

    class FakeMiniLM:
        def encode(self, texts, **options):
            calls.append(options)
            return fake_embed(texts)

    monkeypatch.setattr(dense, "load_model", lambda *a, **k: FakeMiniLM())
    program = programs.get("skr", retriever=StaticRetriever(make_passages(6)), neighbours=1)
    program.memory.demos = labelled(("film a?", False), ("river b?", True))
    assert program.decide("river x?") == (True, ["river b?"])
    assert calls and all(c == {"normalize_embeddings": True, "show_progress_bar": False} for c in calls)


def test_uncompiled_skr_through_the_cli_flags_every_record(tmp_path, capsys, caplog):
    import json

    from ragzoo.cli import main

    out = tmp_path / "skr"
    with caplog.at_level("WARNING"):
        code = main(["evaluate", "--method", "skr", "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "2",
                    "--metric", "em", "--lm", "dry-run", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(r["degradations"] == 1 and r["degraded"][0]["where"] == "skr_memory" for r in records)
    # the summary counts them, and the log (stderr in a terminal) says once what to do
    assert "degradations=2 (2 questions)" in captured.out
    assert sum("compile skr with bootstrap or labeled" in r.getMessage() for r in caplog.records) == 1
