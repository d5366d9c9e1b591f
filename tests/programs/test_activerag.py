"""ActiveRAG (programs/activerag.py): the 3-call default, each agent, all four agents with the selection
rule, what each call sees (the initial chain of thought sees no passages), save/load, parse failures."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.activerag import ActiveRag, pick_winner
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.activerag import AGENTS
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

QUESTION = "Who produced The Woods?"
PASSAGES = [Passage(pid=str(i), title=f"Film {i}", text=f"Film {i} was produced by person {i}.") for i in range(6)]


def make(**knobs):
    retriever = StaticRetriever(make_passages(3), by_query={QUESTION: PASSAGES})
    return ActiveRag(retriever=retriever, **knobs), retriever


def script(answers=None):
    answers = answers or {}
    responses = {"initial_cot": {"reasoning": "I recall Bartosz Kowalski.", "answer": "Bartosz Kowalski"}}
    for agent in AGENTS:
        responses[f"{agent}_kc"] = {"knowledge": f"{agent} knowledge: Matthew Lessner produced it."}
        responses[f"{agent}_nexus"] = {"enhanced_reasoning": f"{agent} checks the reasoning.",
                                       "answer": answers.get(agent, f"{agent} answer")}
    return responses


def run(program, responses):
    lm = ScriptedLM(responses)
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION)
    return prediction, lm


def test_default_is_the_papers_associate_configuration_with_three_calls_and_one_retrieval():
    program, retriever = make()
    prediction, lm = run(program, script())
    assert lm.call_names == ["initial_cot", "associate_kc", "associate_nexus"]
    assert retriever.queries == [(QUESTION, 5)]
    assert prediction.answer == "associate answer" and prediction.winner == "associate"
    assert prediction.passages == PASSAGES[:5]


def test_initial_chain_of_thought_sees_the_question_and_no_passages():
    program, _ = make()
    _, lm = run(program, script())
    cot = lm.calls_to("initial_cot")[0]
    assert cot.inputs == {"question": QUESTION}
    assert "produced by person" not in cot.prompt_text and "Film 0" not in cot.prompt_text


def test_knowledge_construction_sees_question_and_passages():
    program, _ = make()
    _, lm = run(program, script())
    kc = lm.calls_to("associate_kc")[0]
    assert set(kc.inputs) == {"question", "passages"}
    for passage in PASSAGES[:5]:
        assert passage.long_text in kc.inputs["passages"]
    assert PASSAGES[5].long_text not in kc.inputs["passages"]


def test_nexus_sees_question_passages_initial_reasoning_and_the_agents_knowledge():
    program, _ = make(nexus_passages=True)  # the official code's chat context (issue 12: a knob)
    prediction, lm = run(program, script())
    nexus = lm.calls_to("associate_nexus")[0]
    assert set(nexus.inputs) == {"question", "passages", "initial_reasoning", "knowledge"}
    assert nexus.inputs["question"] == QUESTION
    assert PASSAGES[0].long_text in nexus.inputs["passages"]
    assert "I recall Bartosz Kowalski." in nexus.inputs["initial_reasoning"]
    assert "Answer: Bartosz Kowalski" in nexus.inputs["initial_reasoning"]
    assert nexus.inputs["knowledge"] == "associate knowledge: Matthew Lessner produced it."
    assert prediction.initial_answer == "Bartosz Kowalski"
    assert prediction.reasoning == "associate checks the reasoning."


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_runs_its_own_knowledge_and_nexus_signatures(agent):
    program, _ = make(agents=(agent,))
    prediction, lm = run(program, script())
    assert lm.call_names == ["initial_cot", f"{agent}_kc", f"{agent}_nexus"]
    kc, nexus = lm.calls[1], lm.calls[2]
    assert kc.signature.__name__ == f"{agent.capitalize()}Knowledge"
    assert nexus.signature.__name__ == f"{agent.capitalize()}Nexus"
    assert nexus.inputs["knowledge"] == f"{agent} knowledge: Matthew Lessner produced it."
    assert prediction.answer == f"{agent} answer" and prediction.winner == agent


def test_all_four_agents_make_nine_calls_in_the_official_codes_order():
    program, retriever = make(agents=("all",))
    prediction, lm = run(program, script())
    assert lm.call_names == ["initial_cot", *(f"{a}_kc" for a in AGENTS), *(f"{a}_nexus" for a in AGENTS)]
    assert retriever.queries == [(QUESTION, 5)]  # one retrieval shared by every agent
    assert len(lm.calls_to("initial_cot")) == 1
    for agent in AGENTS:  # each nexus gets its own agent's knowledge
        assert lm.calls_to(f"{agent}_nexus")[0].inputs["knowledge"].startswith(agent)
    assert prediction.agent_answers == {agent: f"{agent} answer" for agent in AGENTS}
    assert prediction.winner == "associate" and prediction.answer == "associate answer"


def test_vote_selects_the_majority_answer_and_breaks_ties_by_agent_order():
    program, _ = make(agents=AGENTS, select="vote")
    answers = {"associate": "Paris", "anchoring": "Nantes", "logician": "nantes.", "cognition": "Lyon"}
    prediction, _ = run(program, script(answers))
    assert prediction.winner == "anchoring" and prediction.answer == "Nantes"
    assert pick_winner(AGENTS, {"associate": "a", "anchoring": "b", "logician": "b", "cognition": "a"},
                       "vote") == "associate"
    assert pick_winner(("logician", "associate"), {"associate": "a", "logician": "b"}, "vote") == "logician"


def test_agents_and_select_are_refused_beside_an_ablation_that_has_no_agents():
    retriever = StaticRetriever(PASSAGES)
    for knobs in ({"agents": AGENTS}, {"agents": ("logician",)}, {"select": "vote"}):
        with pytest.raises(ConfigError, match="agents and select apply to knowledge=agent only, not knowledge=notes"):
            programs.get("activerag", retriever=retriever, knowledge="notes", **knobs)
    assert programs.get("activerag", retriever=retriever, knowledge="passages").agents == ("passages",)
    assert programs.get("activerag", retriever=retriever, agents=AGENTS, select="vote").agents == AGENTS


def test_an_abstaining_agent_casts_no_vote():
    """Two agents that could not answer ("unknown", nothing) do not outvote the one that did; all abstaining
    returns the first listed."""
    abstain = {"associate": "unknown", "anchoring": "Unknown.", "logician": "Nantes", "cognition": ""}
    assert pick_winner(AGENTS, abstain, "vote") == "logician"
    assert pick_winner(AGENTS, {**abstain, "cognition": "Lyon"}, "vote") == "logician"  # tie: listing order
    assert pick_winner(AGENTS, {agent: "unknown" for agent in AGENTS}, "vote") == "associate"
    program, _ = make(agents=AGENTS, select="vote")
    prediction, _ = run(program, script(abstain))
    assert prediction.winner == "logician" and prediction.answer == "Nantes"


def test_agents_knob_through_the_registry_and_its_errors():
    retriever = StaticRetriever(PASSAGES)
    assert programs.info("activerag").knobs == {"k": 5, "agents": ("associate",), "select": "first",
                                                "nexus_passages": False, "knowledge": "agent"}
    assert programs.get("activerag", retriever=retriever, agents="all").agents == AGENTS
    assert programs.get("activerag", retriever=retriever, agents="logician,cognition").agents == ("logician",
                                                                                                  "cognition")
    with pytest.raises(ConfigError, match="unknown agent"):
        programs.get("activerag", retriever=retriever, agents="critic")
    with pytest.raises(ConfigError, match="twice"):
        ActiveRag(retriever=retriever, agents=("associate", "associate"))
    with pytest.raises(ConfigError, match="select"):
        ActiveRag(retriever=retriever, select="best")


def test_named_predictors_list_every_call_site():
    assert [name for name, _ in make()[0].named_predictors()] == ["initial_cot", "associate_kc", "associate_nexus"]
    assert [name for name, _ in make(agents=("all",))[0].named_predictors()] == [
        "initial_cot", *(f"{a}_kc" for a in AGENTS), *(f"{a}_nexus" for a in AGENTS)]


def test_k_reaches_the_retriever():
    program, retriever = make(k=3)
    prediction, _ = run(program, script())
    assert retriever.queries == [(QUESTION, 3)] and prediction.passages == PASSAGES[:3]


def test_save_load_round_trip_keeps_demos_and_behaviour(tmp_path):
    program, _ = make(agents=("anchoring", "cognition"))
    program.initial_cot.demos = [dspy.Example(question="q", reasoning="r", answer="a")]
    program.cognition_nexus.demos = [dspy.Example(question="q", passages=["T | t"], initial_reasoning="r",
                                                  knowledge="k", enhanced_reasoning="e", answer="a")]
    before, lm_before = run(program, script())
    path = tmp_path / "activerag.json"
    program.save(str(path))
    loaded, _ = make(agents=("anchoring", "cognition"))
    loaded.load(str(path))
    assert loaded.initial_cot.demos[0]["answer"] == "a" and loaded.cognition_nexus.demos[0]["knowledge"] == "k"
    after, lm_after = run(loaded, script())
    assert after.answer == before.answer and after.agent_answers == before.agent_answers
    assert [c.prompt_text for c in lm_after.calls] == [c.prompt_text for c in lm_before.calls]


def test_unparseable_nexus_output_raises_adapter_parse_error():
    program, _ = make()
    responses = script()
    responses["associate_nexus"] = "garbage"
    with pytest.raises(AdapterParseError):
        run(program, responses)


def test_runs_end_to_end_with_the_dry_run_lm_through_the_registry():
    """The dry-run LM answers every predictor with type-valid placeholders."""
    from ragzoo.lm import make_dry_run_lm

    retriever = StaticRetriever(make_passages(3), by_query={QUESTION: PASSAGES})
    program = programs.get("activerag", retriever=retriever, agents="all", select="vote")
    lm = make_dry_run_lm()
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION)
    assert len(lm.history) == 9 and set(prediction.agent_answers) == set(AGENTS)
    # issue 12: one retrieval shared by every agent; every agent constructed knowledge for its own nexus
    assert retriever.queries == [(QUESTION, 5)] and set(prediction.knowledge) == set(AGENTS)
    assert prediction.passages == PASSAGES[:5] and set(prediction.agent_reasoning) == set(AGENTS)
    assert isinstance(prediction.answer, str) and prediction.answer and prediction.winner == "associate"


# --- issue 12 ----------------------------------------------------------------------------------------------


def test_by_default_the_nexus_sees_exactly_table_7s_three_inputs():
    program, _ = make()
    _, lm = run(program, script())
    nexus = lm.calls_to("associate_nexus")[0]
    assert set(nexus.inputs) == {"question", "initial_reasoning", "knowledge"}
    assert all(passage.text not in nexus.prompt_text for passage in PASSAGES)
    assert programs.info("activerag").knobs["nexus_passages"] is False


@pytest.mark.parametrize("ablation,calls", [("passages", ["initial_cot", "passages_nexus"]),
                                            ("notes", ["initial_cot", "notes_kc", "notes_nexus"])])
def test_table_3_ablations_feed_the_nexus_passages_or_notes(ablation, calls):
    program, retriever = make(knowledge=ablation)
    responses = {"initial_cot": {"reasoning": "r", "answer": "a0"},
                 "notes_kc": {"knowledge": "note: film 0 by person 0"},
                 f"{ablation}_nexus": {"enhanced_reasoning": "e", "answer": "person 0"}}
    prediction, lm = run(program, responses)
    assert lm.call_names == calls and retriever.queries == [(QUESTION, 5)]
    nexus = lm.calls_to(f"{ablation}_nexus")[0]
    if ablation == "passages":
        assert nexus.inputs["knowledge"].splitlines() == [p.long_text for p in PASSAGES[:5]]
    else:
        assert nexus.inputs["knowledge"] == "note: film 0 by person 0"
        assert PASSAGES[0].long_text in lm.calls_to("notes_kc")[0].inputs["passages"]
    assert "Answer: a0" in nexus.inputs["initial_reasoning"] and prediction.answer == "person 0"
