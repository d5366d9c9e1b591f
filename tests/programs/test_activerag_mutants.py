"""ActiveRAG (programs/activerag.py): exactly which passages, in which order, the knowledge-construction agents
and (with `nexus_passages`) the cognitive nexus are given. The existing tests checked membership of one or
all passages; these check the whole list, in retrieval order. Each test names the requirement of arXiv
2402.13547 (and of the official code the knob reproduces) that it checks."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo.programs.activerag import ActiveRag
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.activerag import AGENTS
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

QUESTION = "Who produced The Woods?"
PASSAGES = [Passage(pid=str(i), title=f"Film {i}", text=f"Film {i} was produced by person {i}.") for i in range(6)]


def make(**knobs):
    retriever = StaticRetriever(make_passages(3), by_query={QUESTION: PASSAGES})
    return ActiveRag(retriever=retriever, **knobs)


def script():
    responses = {"initial_cot": {"reasoning": "I recall Bartosz Kowalski.", "answer": "Bartosz Kowalski"},
                 "notes_kc": {"knowledge": "note: film 0 by person 0"},
                 "notes_nexus": {"enhanced_reasoning": "e", "answer": "person 0"},
                 "passages_nexus": {"enhanced_reasoning": "e", "answer": "person 0"}}
    for agent in AGENTS:
        responses[f"{agent}_kc"] = {"knowledge": f"{agent} knowledge: Matthew Lessner produced it."}
        responses[f"{agent}_nexus"] = {"enhanced_reasoning": f"{agent} checks the reasoning.",
                                       "answer": f"{agent} answer"}
    return responses


def run(program):
    lm = ScriptedLM(script())
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION)
    return prediction, lm


def passage_list(call) -> list[str]:
    """The `passages: list[str]` input a call was given (the adapter renders it as a JSON list)."""
    value = call.inputs["passages"]
    return value if isinstance(value, list) else json.loads(value)


def top(k: int) -> list[str]:
    return [p.long_text for p in PASSAGES[:k]]


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agents_knowledge_call_reads_the_top_k_passages_in_retrieval_order(agent):
    """§3.3 / Table 6: each knowledge-construction agent is given the question and the retrieved passages,
    the top-k as retrieved (rank 1 first, as the official code lists them): the whole list, in order."""
    prediction, lm = run(make(agents=(agent,)))
    (kc,) = lm.calls_to(f"{agent}_kc")
    assert passage_list(kc) == top(5)
    assert [p.long_text for p in prediction.passages] == top(5)


def test_all_four_agents_read_the_same_ordered_passages_and_k_is_followed():
    """The four agents share one retrieval (the official code): each reads those k passages in rank order;
    with k = 3 it is the top 3, in order."""
    _, lm = run(make(agents=("all",), k=3))
    for agent in AGENTS:
        assert passage_list(lm.calls_to(f"{agent}_kc")[0]) == top(3)


def test_reading_notes_ablation_reads_the_passages_in_retrieval_order():
    """Table 3 "CoT w. Note": the notes are taken over the retrieved passages, in rank order."""
    _, lm = run(make(knowledge="notes"))
    assert passage_list(lm.calls_to("notes_kc")[0]) == top(5)


def test_nexus_with_passages_sees_every_retrieved_passage_in_order():
    """`nexus_passages=True` reproduces the official code's chat context: the nexus is the second turn after
    the knowledge-construction turn, which holds ALL the retrieved passages; so the nexus must see the same
    whole list the agent read, not part of it."""
    _, lm = run(make(nexus_passages=True))
    (kc,) = lm.calls_to("associate_kc")
    (nexus,) = lm.calls_to("associate_nexus")
    assert passage_list(nexus) == top(5) == passage_list(kc)


def test_each_of_the_four_nexus_calls_sees_the_whole_passage_list_with_nexus_passages():
    """With all four agents (the official code) each nexus turn follows its own agent's chat, which held the
    k passages: every nexus sees the k passages in order (k = 4 here, so neither the first passage alone
    nor a fixed 5 would do)."""
    _, lm = run(make(agents=("all",), nexus_passages=True, k=4))
    for agent in AGENTS:
        (nexus,) = lm.calls_to(f"{agent}_nexus")
        assert passage_list(nexus) == top(4)
        assert nexus.inputs["knowledge"] == f"{agent} knowledge: Matthew Lessner produced it."
