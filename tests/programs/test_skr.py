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


def test_uncompiled_skr_always_retrieves_with_one_call():
    program = skr(k=2)
    lm = ScriptedLM({"rag_answer": {"answer": "Doc 0"}})
    with dspy.context(lm=lm):
        pred = program(question="Which film?")
    assert lm.call_names == ["rag_answer"] and pred.retrieved is True and len(pred.passages) == 2


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
