"""FILCO (programs/filco.py): call sequence, what the filter and the generator see, on_empty both ways,
passage granularity, compiling the filter on oracle labels, save/load, parse failures."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.filco_oracle import filter_agreement_metric
from ragzoo.programs.filco import Filco
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever

QUESTION = "Which river flows through the capital of France?"
PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. "
                                              "The Seine flows through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. The Rhone flows through it.")
EMPTY = Passage(pid="p3", title="Blank", text="")


def make(k=2, passages=(PARIS, LYON), **knobs):
    retriever = StaticRetriever([PARIS, LYON, EMPTY], by_query={QUESTION: list(passages)})
    return Filco(retriever=retriever, k=k, **knobs), retriever


def run(program, script):
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION)
    return prediction, lm


def test_one_filter_call_per_passage_then_one_answer_and_one_retrieval():
    program, retriever = make()
    prediction, lm = run(program, {"filter": [{"selected": [2]}, {"selected": [1]}], "generate": {"answer": "Seine"}})
    assert lm.call_names == ["filter", "filter", "generate"]
    assert retriever.queries == [(QUESTION, 2)]
    assert prediction.answer == "Seine"
    assert prediction.selected == [[2], [1]]
    assert prediction.kept_ids == ["p1", "p2"]


def test_the_filter_sees_one_passage_as_numbered_sentences():
    program, _ = make()
    _, lm = run(program, {"filter": {"selected": [0]}, "generate": {"answer": "x"}})
    first, second = lm.calls_to("filter")
    assert first.inputs == {"question": QUESTION, "title": "Paris",
                            "sentences": "[0] Paris is a large city.\n[1] It is the capital of France.\n"
                                         "[2] The Seine flows through it."}
    assert second.inputs["title"] == "Lyon" and "Paris" not in second.inputs["sentences"]


def test_the_generator_sees_only_the_selected_sentences():
    program, _ = make()
    prediction, lm = run(program, {"filter": [{"selected": [2]}, {"selected": []}], "generate": {"answer": "Seine"}})
    generate = lm.calls_to("generate")[0]
    assert "Paris | The Seine flows through it." in generate.inputs["context"]
    for dropped in ("Paris is a large city", "capital of France", "Lyon", "Rhone"):
        assert dropped not in generate.inputs["context"]
    assert prediction.context == ["Paris | The Seine flows through it."]
    assert prediction.passages == [PARIS]  # the passages the answer used: only those with kept sentences
    assert prediction.fallback is None


def test_selected_sentences_keep_passage_order_and_out_of_range_indices_are_dropped():
    program, _ = make(k=1)
    prediction, _ = run(program, {"filter": {"selected": [2, 7, 0, -1]}, "generate": {"answer": "x"}})
    assert prediction.selected == [[0, 2]]
    assert prediction.context == ["Paris | Paris is a large city. The Seine flows through it."]
    assert prediction.ignored_indices == [7, -1]


def test_on_empty_passage_falls_back_to_the_full_retrieved_passages():
    program, _ = make(on_empty="passage")
    prediction, lm = run(program, {"filter": {"selected": []}, "generate": {"answer": "Seine"}})
    assert lm.call_names == ["filter", "filter", "generate"]
    assert prediction.fallback == "passage"
    assert prediction.context == [PARIS.long_text, LYON.long_text]
    assert PARIS.long_text in lm.calls_to("generate")[0].inputs["context"]
    assert prediction.passages == [PARIS, LYON]


def test_on_empty_none_answers_without_context():
    program, _ = make(on_empty="none")
    prediction, lm = run(program, {"filter": {"selected": [9]}, "generate": {"answer": "Seine"}})
    assert prediction.fallback == "none"
    assert prediction.context == [] and prediction.passages == []
    assert "Paris" not in lm.calls_to("generate")[0].inputs["context"]
    assert prediction.answer == "Seine"


def test_passages_without_text_are_not_sent_to_the_filter():
    program, _ = make(passages=(EMPTY, PARIS))
    prediction, lm = run(program, {"filter": {"selected": [1]}, "generate": {"answer": "x"}})
    assert lm.call_names == ["filter", "generate"]
    assert [call.inputs["title"] for call in lm.calls_to("filter")] == ["Paris"]
    assert prediction.selected == [[], [1]]


def test_passage_granularity_keeps_or_drops_whole_passages():
    program, _ = make(granularity="passage")
    prediction, lm = run(program, {"filter": [{"keep": False}, {"keep": True}], "generate": {"answer": "Rhone"}})
    assert lm.call_names == ["filter", "filter"] + ["generate"]
    assert [call.inputs["passage"] for call in lm.calls_to("filter")] == [PARIS.long_text, LYON.long_text]
    assert lm.calls_to("filter")[0].signature.__name__ == "FilterPassage"
    assert prediction.context == [LYON.long_text] and prediction.selected == [False, True]


def test_named_predictors_list_every_call_site():
    program, _ = make()
    assert [name for name, _ in program.named_predictors()] == ["filter", "generate"]


def test_registry_builds_filco_with_the_papers_defaults_and_coerced_knobs():
    info = programs.info("filco")
    # issue 12: the default answers from what the filter kept (empty included); the fallback is a knob
    assert info.knobs == {"k": 1, "granularity": "sentence", "on_empty": "none", "measure": "auto",
                          "threshold": 0.5, "cxmi_threshold": 0.0, "context": "filtered", "cxmi_fallback": "lexical"}
    program = programs.get("filco", retriever=StaticRetriever([PARIS]), k="5", on_empty="none")
    assert (program.k, program.on_empty) == (5, "none")
    with pytest.raises(ConfigError):
        programs.get("filco", retriever=StaticRetriever([PARIS]), granularity="token")


def test_filter_compiles_against_oracle_labels_and_agreement_metric():
    program, retriever = make()
    examples = [dspy.Example(question=QUESTION, answers=["Seine"]).with_inputs("question")]
    trainset = program.filter_trainset(examples)
    assert [(t.title, t.selected) for t in trainset] == [("Paris", [2]), ("Lyon", [])]
    # the LM agrees with the oracle on Paris only: only that trace becomes a demo
    lm = ScriptedLM({"FilterSentences": {"selected": [2]}})
    with dspy.context(lm=lm):
        program.filter = dspy.BootstrapFewShot(metric=filter_agreement_metric, max_labeled_demos=0).compile(
            program.filter, trainset=trainset)
    assert [demo.title for demo in program.filter.demos] == ["Paris"]


def test_save_load_round_trip_keeps_demos_and_behaviour(tmp_path):
    program, _ = make()
    program.filter.demos = [dspy.Example(question="q", title="T", sentences="[0] s", selected=[0])]
    program.generate.demos = [dspy.Example(context=["T | s"], question="q", answer="a")]
    script = {"filter": [{"selected": [2]}, {"selected": []}], "generate": {"answer": "Seine"}}
    before, lm_before = run(program, script)
    path = tmp_path / "filco.json"
    program.save(str(path))
    loaded, _ = make()
    loaded.load(str(path))
    assert loaded.filter.demos[0]["selected"] == [0] and loaded.generate.demos[0]["answer"] == "a"
    after, lm_after = run(loaded, script)
    assert after.answer == before.answer and after.context == before.context
    assert [c.prompt_text for c in lm_after.calls] == [c.prompt_text for c in lm_before.calls]


def test_unparseable_filter_output_raises_adapter_parse_error():
    program, _ = make()
    with pytest.raises(AdapterParseError):
        run(program, {"filter": "garbage", "generate": {"answer": "x"}})


@pytest.mark.parametrize("granularity", ["sentence", "passage"])
def test_runs_end_to_end_with_the_dry_run_lm_through_the_registry(granularity):
    """The dry-run LM answers every predictor with type-valid placeholders (the filter's is [0])."""
    from ragzoo.lm import make_dry_run_lm

    retriever = StaticRetriever([PARIS, LYON], by_query={QUESTION: [PARIS, LYON]})
    program = programs.get("filco", retriever=retriever, k=2, granularity=granularity)
    lm = make_dry_run_lm()
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION)
    assert isinstance(prediction.answer, str) and prediction.answer
    assert prediction.fallback is None and prediction.kept_ids == ["p1", "p2"]
    assert len(lm.history) == 3 and retriever.queries == [(QUESTION, 2)]  # issue 12: k filters + 1 answer
    if granularity == "sentence":
        assert prediction.context == ["Paris | Paris is a large city.", "Lyon | Lyon is a city in France."]


# --- issue 12 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("granularity,script", [("sentence", {"selected": []}), ("passage", {"keep": False})])
def test_by_default_the_filters_verdict_matters_at_the_papers_top_1(granularity, script):
    """k = 1, defaults: a dropped passage is NOT sent to the generator (before issue 12 it was, as a fallback,
    so keeping and dropping gave the generator the same context)."""
    program, _ = make(k=1, granularity=granularity)
    dropped, lm = run(program, {"filter": script, "generate": {"answer": "Seine"}})
    assert "Paris" not in str(lm.calls_to("generate")[0].inputs["context"]) and dropped.context == []
    assert dropped.fallback == "none" and dropped.passages == []
    kept, lm = run(make(k=1, granularity=granularity)[0],
                   {"filter": {"selected": [2]} if granularity == "sentence" else {"keep": True},
                    "generate": {"answer": "Seine"}})
    assert "Paris" in str(lm.calls_to("generate")[0].inputs["context"])


def test_full_context_is_the_full_baseline_with_one_call():
    program, retriever = make(context="full")
    prediction, lm = run(program, {"generate": {"answer": "Seine"}})
    assert lm.call_names == ["generate"] and retriever.queries == [(QUESTION, 2)]
    assert json.loads(lm.calls_to("generate")[0].inputs["context"]) == [PARIS.long_text, LYON.long_text]
    assert prediction.passages == [PARIS, LYON]


def test_silver_context_uses_the_oracle_selection_at_test_time_without_filter_calls():
    program, _ = make(context="silver")
    prediction, lm = run_with_answers(program, {"generate": {"answer": "Seine"}}, ["Seine"])
    assert lm.call_names == ["generate"]
    assert prediction.selected == [[2], []]  # STRINC: the sentence holding "Seine"; nothing in Lyon
    assert json.loads(lm.calls_to("generate")[0].inputs["context"]) == ["Paris | The Seine flows through it."]
    lexical = make(context="silver", measure="lexical", threshold=0.2)[0]
    prediction, _ = run_with_answers(lexical, {"generate": {"answer": "x"}}, ["the Rhone flows"])
    assert prediction.selected == [[2], [1]]
    with pytest.raises(ConfigError, match="gold answers"):
        run(make(context="silver")[0], {"generate": {"answer": "x"}})
    with pytest.raises(ConfigError):
        make(context="silver", measure="cxmi")


def run_with_answers(program, script, answers):
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION, answers=answers)
    return prediction, lm


def test_filter_trainset_labels_with_the_programs_own_measure_and_threshold():
    examples = [dspy.Example(question=QUESTION, answers=["The Rhone flows"]).with_inputs("question")]
    strinc = make(measure="strinc")[0].filter_trainset(examples)
    lexical = make(measure="lexical", threshold=0.2)[0].filter_trainset(examples)
    strict = make(measure="lexical", threshold=0.9)[0].filter_trainset(examples)
    assert [t.selected for t in strinc] == [[], [1]]
    assert [t.selected for t in lexical] == [[2], [1]]  # "The Seine flows through it." overlaps > 0.2
    assert [t.selected for t in strict] == [[], []]


def test_filco_declares_a_filter_stage_with_the_agreement_metric():
    program, _ = make(measure="lexical")
    (stage,) = program.compile_stages()
    assert stage.predictors == ("filter",) and stage.metric is filter_agreement_metric
    assert "lexical" in stage.labels and stage.needs == ()
    assert set(make(measure="cxmi")[0].compile_stages()[0].uses) == {"dataset", "logprob_fn", "lm"}
    assert make(context="full")[0].compile_stages() == []


def test_auto_measure_is_the_papers_choice_per_dataset():
    from ragzoo.programs.base import StageSkipped

    program, _ = make()
    assert program.measure == "auto"
    assert [program.resolved_measure(d) for d in ("nq_open", "triviaqa", "hotpotqa", "wow", None, "mine")] == [
        "strinc", "strinc", "cxmi", "lexical", "strinc", "strinc"]
    examples = [dspy.Example(question=QUESTION, answers=["Seine"]).with_inputs("question")]
    assert [t.selected for t in program.filter_trainset(examples, dataset="nq_open")] == [[2], []]
    with pytest.raises(StageSkipped, match="hotpotqa"):  # CXMI without log-probabilities, no fallback declared
        make(cxmi_fallback="none")[0].filter_trainset(examples, dataset="hotpotqa")
    fallback = program.filter_trainset(examples, dataset="hotpotqa")  # no LM here: the declared fallback
    assert fallback.record["measure"] == "lexical" and fallback.record["asked"] == "cxmi"
    scores = {"The Seine flows through it.": 2.0}
    labelled = program.filter_trainset(examples, dataset="hotpotqa",
                                       logprob_fn=lambda output, question, context: scores.get(context, 0.0))
    assert [t.selected for t in labelled] == [[2], []]  # CXMI: the one sentence that raises p(answer)


def test_silver_runs_from_the_cli_with_the_gold_answers_passed_at_test_time(tmp_path, capsys):
    """SILVER (oracle-filtered context) is an upper bound: the evaluation hands the program the gold answers it
    declares it needs (`oracle_inputs`), so the filter is the oracle and only the generator calls the LM."""
    import json

    from ragzoo.cli import main

    out = tmp_path / "silver"
    code = main(["evaluate", "--method", "filco", "--knob", "context=silver", "--knob", "measure=strinc",
                 "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "3", "--metric", "em", "--lm", "dry-run",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [record["error"] for record in records] == [None] * 3
    assert all(record["lm_calls"] == 1 and record["lm_trace"][0]["predictor"] == "generate" for record in records)
