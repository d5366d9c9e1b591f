"""ActiveRAG's stage records (retrieval, initial CoT, knowledge-constructing agents, nexus) and attribution on
scripted runs: the agents' answers are the nexus's pool, the winner its decision."""

from __future__ import annotations

from ragzoo.diagnostics import stage_summary
from ragzoo.programs import get
from ragzoo.signatures.activerag import AGENTS
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example, run

Q = "What is the capital of France?"


def _run(passages, answers, **knobs):
    responses = {"initial_cot": {"reasoning": "I recall Lyon.", "answer": "Lyon"}}
    for agent in AGENTS:
        responses[f"{agent}_kc"] = {"knowledge": f"{agent} knowledge"}
        responses[f"{agent}_nexus"] = {"enhanced_reasoning": "checked", "answer": answers.get(agent, "Lyon")}
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={Q: passages})
    (record,) = run(get("activerag", retriever=retriever, k=2, **knobs), ScriptedLM(responses),
                    [example(Q, "Paris")])
    return record


def test_all_four_agents_and_the_nexus_vote():
    agents = list(AGENTS)
    record = _run([PARIS, DISTRACTORS[0]], {agents[0]: "Paris", agents[1]: "Paris"}, agents=tuple(agents),
                  select="vote")
    stages = record["stages"]
    assert list(stages) == ["retrieval", "initial_cot", "agents", "nexus"]
    assert [stages[name]["calls"] for name in stages] == [0, 1, len(agents), len(agents)]
    assert stages["initial_cot"]["answer"] == "Lyon"
    assert stages["agents"]["agents"] == agents
    assert stages["nexus"]["answers"] == ["Paris", "Paris"] + ["Lyon"] * (len(agents) - 2)
    assert stages["nexus"]["decision"] == agents[0]
    assert record["attribution"] == "correct"
    assert stage_summary([record])["nexus"]["vote_agreement"] == 0.5


def test_default_associate_agent_wrong_over_gold_is_a_reader_miss_and_without_gold_a_retrieval_miss():
    assert _run([PARIS, DISTRACTORS[0]], {})["attribution"] == "reader_miss"
    record = _run(DISTRACTORS[:2], {})
    assert record["stages"]["retrieval"]["gold"] == [] and record["attribution"] == "retrieval_miss"
