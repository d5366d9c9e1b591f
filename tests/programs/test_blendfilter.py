"""BlendFilter: call structure (13 / 10 calls, 3 retrievals), what each call sees, union order, filter edge
cases, knobs, registry, save/load."""

from __future__ import annotations

import typing

import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.blendfilter import BlendFilter, clean_ids
from ragzoo.lm import make_dry_run_lm
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Which doc answers the question?"
A_EX = "Doc 3 says so. So the answer is three."
A_IN = "A passage about doc eight."
Q_EX = f"{A_EX} {Q}"
Q_IN = f"{A_IN} {Q}"

FILTER_CHAIN = ["filter_topic", "filter_analysis", "filter_ids"]
FULL = ["external_cot", "write_passage", *FILTER_CHAIN * 3, "answer_cot", "extract_answer"]


@pytest.fixture
def docs():
    return make_passages(12)


@pytest.fixture
def retriever(docs):
    # The three queries retrieve overlapping, known sets: q -> 0..4, q_ex -> 3..7, q_in -> 6..10.
    return StaticRetriever(docs, by_query={Q: docs[0:5], Q_EX: docs[3:8], Q_IN: docs[6:11]})


def script(**overrides):
    responses = {
        "external_cot": {"reasoning": A_EX},
        "write_passage": {"passage": A_IN},
        "filter_topic": {"topic": "documents"},
        "filter_analysis": {"relevance_analysis": "knowledge 0 is relevant"},
        "filter_ids": {"relevant_ids": [0]},
        "answer_cot": {"reasoning": "So the answer is three."},
        "extract_answer": {"answer": "three"},
    }
    responses.update(overrides)
    return ScriptedLM(responses)


def run(program, lm, question=Q):
    with dspy.context(lm=lm):
        return program(question=question)



def test_default_structure_is_13_calls_and_3_retrievals(retriever):
    lm = script()
    pred = run(BlendFilter(retriever), lm)
    assert lm.call_names == FULL
    assert len(lm.call_names) == 13
    assert retriever.queries == [(Q, 5), (Q_EX, 5), (Q_IN, 5)]
    assert pred.queries == {"q": Q, "q_ex": Q_EX, "q_in": Q_IN}
    assert pred.answer == "three"


def test_strategyqa_mode_is_10_calls_with_typed_yes_no(retriever):
    lm = script(extract_answer={"answer": "yes"})
    program = BlendFilter(retriever, answer_mode="yes_no")
    pred = run(program, lm)
    assert lm.call_names == ["external_cot", "write_passage", *["filter_analysis", "filter_ids"] * 3,
                             "answer_cot", "extract_answer"]
    assert len(lm.call_names) == 10
    assert len(retriever.queries) == 3
    assert pred.answer == "yes"
    assert typing.get_args(program.extract_answer.signature.output_fields["answer"].annotation) == ("yes", "no")
    assert "topic" not in lm.calls_to("filter_analysis")[0].inputs


def test_external_augmentation_sees_the_q_retrieval_and_internal_sees_only_q(retriever, docs):
    lm = script()
    run(BlendFilter(retriever), lm)
    external = lm.calls_to("external_cot")[0].inputs
    assert external["question"] == Q
    assert external["knowledge"].splitlines() == [f"knowledge {i} : {d.long_text}" for i, d in enumerate(docs[0:5])]
    assert lm.calls_to("write_passage")[0].inputs == {"question": Q}


def test_every_filter_call_sees_the_original_question_and_one_set(retriever, docs):
    lm = script()
    run(BlendFilter(retriever), lm)
    for name in FILTER_CHAIN:
        calls = lm.calls_to(name)
        assert len(calls) == 3
        for call in calls:
            assert call.inputs["question"] == Q  # never the blended q_ex / q_in
            assert A_EX not in call.prompt_text.split("[[ ## question ## ]]")[-1]
    for call, expected in zip(lm.calls_to("filter_ids"), (docs[0:5], docs[3:8], docs[6:11])):
        assert call.inputs["knowledge"].splitlines() == [f"knowledge {i} : {d.long_text}"
                                                         for i, d in enumerate(expected)]
        assert call.inputs["context"] == "knowledge 0 is relevant"  # the analysis feeds the id call
    assert all(call.inputs["topic"] == "documents" for call in lm.calls_to("filter_analysis"))


def test_union_keeps_order_q_qex_qin_and_dedups(retriever, docs):
    # q set 0..4 keeps ids [4, 0] -> docs 0, 4; q_ex set 3..7 keeps [1, 0, 4] -> docs 3, 4, 7;
    # q_in set 6..10 keeps [2, 1] -> docs 7, 8. Doc 4 and doc 7 appear twice; the first occurrence wins.
    lm = script(filter_ids=[{"relevant_ids": [4, 0]}, {"relevant_ids": [1, 0, 4]}, {"relevant_ids": [2, 1]}])
    pred = run(BlendFilter(retriever), lm)
    assert pred.kept_ids == {"q": [0, 4], "q_ex": [0, 1, 4], "q_in": [1, 2]}
    assert [p.pid for p in pred.passages] == ["0", "4", "3", "7", "8"]
    answer_knowledge = lm.calls_to("answer_cot")[0].inputs["knowledge"]
    assert answer_knowledge.splitlines() == [f"knowledge {i} : {docs[int(pid)].long_text}"
                                             for i, pid in enumerate(["0", "4", "3", "7", "8"])]
    assert lm.calls_to("extract_answer")[0].inputs["context"] == "So the answer is three."


def test_invalid_ids_are_dropped_and_reported(retriever, docs):
    lm = script(filter_ids=[{"relevant_ids": [7, -1, 2, 2]}, {"relevant_ids": []}, {"relevant_ids": [5]}])
    pred = run(BlendFilter(retriever), lm)
    assert pred.kept_ids == {"q": [2], "q_ex": [], "q_in": []}
    assert pred.invalid_ids == {"q": [7, -1], "q_ex": [], "q_in": [5]}
    assert [p.pid for p in pred.passages] == ["2"]
    assert clean_ids(None, 5) == ([], [])


def test_filter_keeps_nothing_answers_without_knowledge(retriever):
    lm = script(filter_ids={"relevant_ids": []})
    pred = run(BlendFilter(retriever), lm)
    assert pred.filter_empty is True
    assert pred.passages == []
    assert lm.calls_to("answer_cot")[0].inputs["knowledge"] == "(none)"
    assert len(lm.call_names) == 13


def test_reuse_topic_without_the_topic_stage_is_refused_not_ignored(retriever):
    """Methods review: reuse_topic=true beside answer_mode=yes_no (whose chain has no topic stage) was accepted and
    did nothing."""
    for knobs in ({"answer_mode": "yes_no"}, {"filter_stages": "ids"}, {"filter": False}):
        with pytest.raises(ConfigError, match="reuse_topic=true needs the filter's topic stage"):
            BlendFilter(retriever, reuse_topic=True, **knobs)
    assert BlendFilter(retriever, reuse_topic=True).reuse_topic is True


def test_nothing_retrieved_is_not_reported_as_the_filter_keeping_nothing():
    """Methods review: with every retrieval empty, filter_empty was True though no filter call had anything to
    judge."""
    lm = script(filter_ids={"relevant_ids": []})
    pred = run(BlendFilter(StaticRetriever([])), lm)
    assert pred.passages == [] and pred.filter_empty is False
    assert lm.calls_to("answer_cot")[0].inputs["knowledge"] == "(none)"


def test_filter_keeps_nothing_can_fall_back_to_unfiltered(retriever):
    lm = script(filter_ids={"relevant_ids": []})
    pred = run(BlendFilter(retriever, if_nothing_kept="unfiltered"), lm)
    assert pred.filter_empty is True
    assert [p.pid for p in pred.passages] == [str(i) for i in range(11)]


def test_filter_parse_failure_raises():
    from dspy.utils.exceptions import AdapterParseError

    docs = make_passages(8)
    lm = script(filter_ids="no ids here, sorry")
    with pytest.raises(AdapterParseError):
        run(BlendFilter(StaticRetriever(docs)), lm)
    # ChatAdapter fails, DSPy retries once with JSONAdapter, then gives up before any answer call.
    assert lm.call_names[-2:] == ["filter_ids", "filter_ids"]
    assert "answer_cot" not in lm.call_names


@pytest.mark.parametrize("knobs, names, retrievals", [
    ({"original_query": False},
     ["external_cot", "write_passage", *FILTER_CHAIN * 2, "answer_cot", "extract_answer"], [Q, Q_EX, Q_IN]),
    ({"augmentations": ("internal",)}, ["write_passage", *FILTER_CHAIN * 2, "answer_cot", "extract_answer"], [Q, Q_IN]),
    ({"augmentations": ("external",)}, ["external_cot", *FILTER_CHAIN * 2, "answer_cot", "extract_answer"], [Q, Q_EX]),
    ({"augmentations": ()}, [*FILTER_CHAIN, "answer_cot", "extract_answer"], [Q]),
    ({"filter": False}, ["external_cot", "write_passage", "answer_cot", "extract_answer"], [Q, Q_EX, Q_IN]),
    ({"filter_mode": "union"}, ["external_cot", "write_passage", *FILTER_CHAIN, "answer_cot", "extract_answer"],
     [Q, Q_EX, Q_IN]),
    ({"filter_stages": "ids"}, ["external_cot", "write_passage", *["filter_ids"] * 3, "answer_cot", "extract_answer"],
     [Q, Q_EX, Q_IN]),
    ({"filter_stages": "analysis"},
     ["external_cot", "write_passage", *["filter_analysis", "filter_ids"] * 3, "answer_cot", "extract_answer"],
     [Q, Q_EX, Q_IN]),
    ({"reuse_topic": True},
     ["external_cot", "write_passage", *FILTER_CHAIN, *["filter_analysis", "filter_ids"] * 2, "answer_cot",
      "extract_answer"], [Q, Q_EX, Q_IN]),
])
def test_knobs_change_the_call_structure(retriever, knobs, names, retrievals):
    lm = script()
    program = BlendFilter(retriever, **knobs)
    run(program, lm)
    assert lm.call_names == names
    assert [query for query, _ in retriever.queries] == retrievals
    # named_predictors lists exactly the call sites this configuration uses.
    assert {name for name, _ in program.named_predictors()} == set(names)


def test_without_q_the_q_set_is_not_knowledge(retriever):
    lm = script(filter_ids={"relevant_ids": [0, 1, 2, 3, 4]})
    pred = run(BlendFilter(retriever, original_query=False), lm)
    assert set(pred.retrieved) == {"q_ex", "q_in"}
    assert [p.pid for p in pred.passages] == [str(i) for i in range(3, 11)]


def test_no_filter_is_the_plain_union(retriever):
    lm = script()
    pred = run(BlendFilter(retriever, filter=False), lm)
    assert [p.pid for p in pred.passages] == [str(i) for i in range(11)]
    assert pred.kept_ids == {} and pred.filter_empty is False


def test_union_scope_filters_once_over_the_deduplicated_union(retriever, docs):
    lm = script(filter_ids={"relevant_ids": [10, 3, 0]})
    pred = run(BlendFilter(retriever, filter_mode="union"), lm)
    knowledge = lm.calls_to("filter_ids")[0].inputs["knowledge"].splitlines()
    assert knowledge == [f"knowledge {i} : {docs[i].long_text}" for i in range(11)]
    assert pred.kept_ids == {"union": [0, 3, 10]}
    assert [p.pid for p in pred.passages] == ["0", "3", "10"]


def test_named_predictors_list_every_call_site(retriever):
    names = [name for name, _ in BlendFilter(retriever).named_predictors()]
    assert names == ["external_cot", "write_passage", "filter_topic", "filter_analysis", "filter_ids",
                     "answer_cot", "extract_answer"]
    lm = script()
    run(BlendFilter(retriever), lm)
    assert set(lm.call_names) == set(names)


def test_save_load_round_trip_keeps_demos_and_behaviour(retriever, tmp_path):
    program = BlendFilter(retriever)
    program.filter_ids.demos = [dspy.Example(context="knowledge 1 fits", question="demo q",
                                             knowledge="knowledge 0 : a\nknowledge 1 : b", relevant_ids=[1])]
    program.answer_cot.signature = program.answer_cot.signature.with_instructions("Compiled instructions.")
    path = tmp_path / "blendfilter.json"
    program.save(str(path))

    loaded = BlendFilter(retriever)
    loaded.load(str(path))
    first, second = script(), script()
    before = run(program, first)
    after = run(loaded, second)
    assert [c.prompt_text for c in first.calls] == [c.prompt_text for c in second.calls]
    assert second.calls_to("filter_ids")[0].demos == 1
    assert "Compiled instructions." in second.calls_to("answer_cot")[0].system
    assert before.answer == after.answer
    assert [p.pid for p in before.passages] == [p.pid for p in after.passages]


def test_registry_builds_with_knobs(retriever):
    program = programs.get("blendfilter", retriever=retriever, k=3, augmentations="internal", answer_mode="yes_no",
                           filter="true")
    assert program.k == 3 and program.queries == ("q", "q_in") and program.filter is True
    lm = script(extract_answer={"answer": "no"})
    run(program, lm)
    assert retriever.queries == [(Q, 3), (f"{A_IN} {Q}", 3)]
    assert programs.info("blendfilter").calls == "13 (StrategyQA 10)"


@pytest.mark.parametrize("knobs", [
    {"nope": 1}, {"k": 0}, {"k": "five"}, {"augmentations": "external,bogus"},
    {"augmentations": "internal,internal"}, {"augmentations": "", "original_query": False},
    {"filter": "sometimes"}, {"filter_mode": "everything"}, {"filter_stages": "four"}, {"answer_mode": "long"},
])
def test_registry_rejects_bad_knobs(retriever, knobs):
    with pytest.raises(ConfigError):
        programs.get("blendfilter", retriever=retriever, **knobs)


def test_registry_requires_a_retriever():
    with pytest.raises(ConfigError):
        programs.get("blendfilter")


@pytest.mark.parametrize("knobs, calls", [({}, 13), ({"answer_mode": "yes_no"}, 10), ({"filter_mode": "union"}, 7)])
def test_runs_end_to_end_on_placeholders(knobs, calls):
    retriever = StaticRetriever(make_passages(10))
    lm = make_dry_run_lm()
    pred = run(BlendFilter(retriever, **knobs), lm)
    assert isinstance(pred.answer, str) and pred.answer
    assert len(retriever.queries) == 3
    # issue 12: the placeholder path is fixed, so the structure can fail: calls, the blended queries, what
    # was retrieved with each
    assert len(lm.history) == calls
    assert [query for query, _ in retriever.queries] == [Q, pred.queries["q_ex"], pred.queries["q_in"]]
    assert pred.queries["q_ex"].endswith(" " + Q) and pred.queries["q_in"].endswith(" " + Q)
    assert set(pred.retrieved) == {"q", "q_ex", "q_in"}
    if knobs.get("answer_mode") == "yes_no":
        assert pred.answer in ("yes", "no")


# --- issue 12 ----------------------------------------------------------------------------------------------


def test_union_mode_judges_the_union_against_the_original_question(retriever):
    lm = script()
    run(BlendFilter(retriever, filter_mode="union"), lm)
    for name in FILTER_CHAIN:
        (call,) = lm.calls_to(name)
        assert call.inputs["question"] == Q
        assert A_EX not in call.prompt_text.split("[[ ## question ## ]]")[-1]
        assert A_IN not in call.prompt_text.split("[[ ## question ## ]]")[-1]


@pytest.mark.parametrize("raw, expected", [("Yes", "yes"), ("No.", "no"), ("yes", "yes"), ('"No"', "no")])
def test_strategyqa_answers_in_the_papers_casing_are_read_as_yes_no(retriever, raw, expected):
    lm = script(extract_answer=f"[[ ## answer ## ]]\n{raw}\n\n[[ ## completed ## ]]")
    pred = run(BlendFilter(retriever, answer_mode="yes_no"), lm)
    assert pred.answer == expected
    assert len(lm.call_names) == 10  # read as is: no JSON-adapter retry


def test_strategyqa_answers_that_read_as_neither_still_fail(retriever):
    from dspy.utils.exceptions import AdapterParseError

    with pytest.raises(AdapterParseError):
        run(BlendFilter(retriever, answer_mode="yes_no"), script(extract_answer={"answer": "maybe"}))


def test_fig5_sampling_runs_the_answer_step_once_per_top_p(retriever):
    lm = script(extract_answer=[{"answer": "three"}, {"answer": "four"}, {"answer": "three"}])
    pred = run(BlendFilter(retriever, sampling=True), lm)
    assert lm.call_names == FULL[:-2] + ["answer_cot", "extract_answer"] * 3
    assert [entry["kwargs"].get("top_p") for entry in lm.history[-6:]] == [None, None, 0.5, 0.5, 1.0, 1.0]
    assert [entry["kwargs"].get("temperature") for entry in lm.history[-4:]] == [1.0] * 4
    assert pred.candidates == ["three", "four", "three"] and pred.answer == "three"
    assert len(retriever.queries) == 3  # retrieval and filtering are shared by the samples


# --- issue 22: Fig. 5 best of 3, scored through the CLI --------------------------------------------------


def test_fig5_the_answer_is_the_greedy_sample_and_candidates_keep_all_three_in_top_p_order(retriever):
    # three different samples, so taking any other than the greedy (top_p = 0) one as the answer shows
    lm = script(answer_cot=[{"reasoning": "greedy says three"}, {"reasoning": "sample says four"},
                            {"reasoning": "sample says five"}],
                extract_answer=[{"answer": "three"}, {"answer": "four"}, {"answer": "five"}])
    pred = run(BlendFilter(retriever, sampling=True), lm)
    assert pred.answer == "three" and pred.reasoning == "greedy says three"
    assert pred.candidates == ["three", "four", "five"]
    # each extraction reads its own sample's reasoning
    assert [c.inputs["context"] for c in lm.calls_to("extract_answer")] == [
        "greedy says three", "sample says four", "sample says five"]


def test_without_sampling_the_one_answer_is_the_only_candidate(retriever):
    pred = run(BlendFilter(retriever), script())
    assert pred.candidates == ["three"] and pred.answer == "three"


def test_fig5_best_of_3_is_scored_from_the_cli(tmp_path, monkeypatch, capsys):
    """`ragzoo evaluate ... --knob sampling=true --metric em,f1,oracle_em,oracle_f1` against the stub server:
    the greedy extraction answers wrong, the top_p = 0.5 sample right, so em is 0 and oracle_em 1, and the
    record keeps the three candidates, greedy first."""
    import json

    from ragzoo.cli import main
    from ragzoo.stubserver import StubLMServer, _content, adapter_answer, prompt_style, render_answer

    def responder(messages, body=None):
        system = next((_content(m) for m in messages if m.get("role") in ("system", "developer")), "")
        values = adapter_answer(system)
        if set(values) == {"answer"}:  # extract_answer: the only call whose one output is `answer`
            values["answer"] = {None: "Mary Shelley", 0.5: "Jane Austen", 1.0: "Austen"}[(body or {}).get("top_p")]
        return render_answer(values, prompt_style(system))

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"Book {i}", "text": f"Book {i} was written by "
                                          f"someone in year {1800 + i}."}) + "\n" for i in range(8)))
    data = tmp_path / "questions.jsonl"
    data.write_text(json.dumps({"id": "q0", "question": "Who wrote book 3?", "answers": ["Jane Austen"]}) + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer(responder=responder) as server:
        code = main(["evaluate", "--method", "blendfilter", "--knob", "sampling=true", "--data", str(data),
                     "--retriever", f"bm25:{corpus}", "--lm", "openai/stub-model", "--api-base",
                     server.base_url + "/v1", "--metric", "em,f1,oracle_em,oracle_f1", "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert record["prediction"] == "Mary Shelley"
    assert record["candidates"] == ["Mary Shelley", "Jane Austen", "Austen"]
    assert record["metrics"]["em"] == 0.0 and record["metrics"]["oracle_em"] == 1.0
    assert record["metrics"]["oracle_f1"] == 1.0 and record["lm_calls"] == 17


def test_a_set_retrieved_empty_gets_no_filter_calls(docs):
    # q_ex retrieves nothing: its set has no filter chain, kept and invalid ids are empty lists
    retriever = StaticRetriever(docs, by_query={Q: docs[0:5], Q_EX: [], Q_IN: docs[6:11]})
    lm = script()
    pred = run(BlendFilter(retriever), lm)
    assert lm.call_names == ["external_cot", "write_passage", *FILTER_CHAIN * 2, "answer_cot", "extract_answer"]
    assert pred.kept_ids == {"q": [0], "q_ex": [], "q_in": [0]} and pred.invalid_ids["q_ex"] == []
    assert [p.pid for p in pred.passages] == ["0", "6"]


@pytest.mark.parametrize("reasoning, expected", [
    ("Doc 0 says so. So the answer is Yes.", "yes"), ("So the answer is no, it was not.", "no"),
    ("So the answer is perhaps.", "perhaps")])
def test_unreadable_yes_no_extraction_reads_yes_no_from_the_reasoning(retriever, reasoning, expected):
    from ragzoo.adapters import make_adapter

    lm = script(answer_cot={"reasoning": reasoning}, extract_answer="I am not following any format here.")
    with dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=0)):
        pred = BlendFilter(retriever, answer_mode="yes_no")(question=Q)
    assert pred.answer == expected and pred.candidates == [expected]


def test_answer_read_from_a_reasoning_without_a_final_sentence_is_the_whole_reasoning():
    from ragzoo.programs.blendfilter import answer_from_reasoning

    assert answer_from_reasoning("Doc 0 names Paris ") == "Doc 0 names Paris"
    assert answer_from_reasoning("Doc 0 names Paris. So the answer is Paris.") == "Paris"
    assert answer_from_reasoning(None) == "" and answer_from_reasoning(None, "yes_no") == ""
    # the last conclusion, not an earlier one the reasoning rejects (review: the first was read through to the end)
    assert answer_from_reasoning("One might think the answer is Paris. But doc 1 says Lyon. So the answer is "
                                 "Lyon.") == "Lyon"
    assert answer_from_reasoning("Knowledge 0 suggests the answer is no, since it is old. So the answer is yes.",
                                 "yes_no") == "yes"


def test_knobs_are_kept_as_given_and_filter_empty_only_when_nothing_was_kept(retriever):
    program = BlendFilter(retriever, augmentations=("internal",))
    assert program.augmentations == ("internal",) and program.queries == ("q", "q_in")
    assert BlendFilter(retriever).augmentations == ("external", "internal")
    pred = run(BlendFilter(retriever), script())
    assert pred.filter_empty is False and [p.pid for p in pred.passages] == ["0", "3", "6"]
