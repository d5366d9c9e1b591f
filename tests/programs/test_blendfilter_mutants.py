"""BlendFilter (programs/blendfilter.py): what each call sees where the paper's control flow fixes it and the
existing tests only checked the call structure. Each test names the requirement of arXiv 2402.11129 it checks:
the StrategyQA filter chain (analysis over the set, then ids given that analysis), the one-call id filter over
the set, every blended query retrieved with the same k (Eq. 5, Fig. 4), and Fig. 5's sampled answers read
the filtered knowledge (Eq. 9)."""

from __future__ import annotations

import pytest

from ragzoo.programs.blendfilter import BlendFilter
from ragzoo.testing import StaticRetriever
from tests.programs.test_blendfilter import A_EX, A_IN, Q, Q_EX, Q_IN, docs, run, script  # noqa: F401 (fixture)


@pytest.fixture
def sets(docs):
    # the three knowledge sets, q -> 0..4, q_ex -> 3..7, q_in -> 6..10 (overlapping, so the union differs from
    # every set and from what the filter keeps)
    return {"q": docs[0:5], "q_ex": docs[3:8], "q_in": docs[6:11]}


@pytest.fixture
def retriever(docs, sets):
    return StaticRetriever(docs, by_query={Q: sets["q"], Q_EX: sets["q_ex"], Q_IN: sets["q_in"]})


def knowledge_lines(passages):
    """The filter prompt's labelling of one set: `knowledge <i> : Title | text`, ids 0..n-1."""
    return [f"knowledge {i} : {p.long_text}" for i, p in enumerate(passages)]


def test_strategyqa_analysis_call_judges_each_sets_passages(retriever, sets):
    """Appendix B, StrategyQA filter call 1: the relevance analysis checks q against the passages of ONE set
    (Eq. 7, each set separately): each of the three analysis calls must see its set, in retrieval order."""
    lm = script(extract_answer={"answer": "yes"})
    run(BlendFilter(retriever, answer_mode="yes_no"), lm)
    calls = lm.calls_to("filter_analysis")
    assert len(calls) == 3
    for call, name in zip(calls, ("q", "q_ex", "q_in")):
        assert call.inputs["question"] == Q
        assert call.inputs["knowledge"].splitlines() == knowledge_lines(sets[name])


def test_topic_analysis_call_judges_each_sets_passages(retriever, sets):
    """Appendix B, HotPotQA/2Wiki filter call 2: with the topic set aside, check q against each passage of
    the set: the analysis call must see its set's passages (not only the topic and the question)."""
    lm = script()
    run(BlendFilter(retriever), lm)
    calls = lm.calls_to("filter_analysis")
    assert len(calls) == 3
    for call, name in zip(calls, ("q", "q_ex", "q_in")):
        assert call.inputs["knowledge"].splitlines() == knowledge_lines(sets[name])


def test_strategyqa_id_call_is_given_its_sets_analysis(retriever, sets):
    """Appendix B, StrategyQA filter call 2: "given the previous analysis as context, output only the ids":
    each set's id call must read the analysis made for that set (three different analyses here), and the
    same set of passages the analysis judged."""
    analyses = ["q set: knowledge 1 passes", "q_ex set: knowledge 2 passes", "q_in set: knowledge 4 passes"]
    lm = script(filter_analysis=[{"relevance_analysis": a} for a in analyses], extract_answer={"answer": "no"})
    run(BlendFilter(retriever, answer_mode="yes_no"), lm)
    calls = lm.calls_to("filter_ids")
    assert [call.inputs["context"] for call in calls] == analyses
    for call, name in zip(calls, ("q", "q_ex", "q_in")):
        assert call.inputs["knowledge"].splitlines() == knowledge_lines(sets[name])


def test_ids_only_filter_screens_each_sets_passages(retriever, sets):
    """filter_stages="ids" (one call per set, Eq. 7): the single screening call must see the set it screens,
    since its ids index that set; and what it keeps is what the answer reads."""
    lm = script(filter_ids=[{"relevant_ids": [1]}, {"relevant_ids": [4]}, {"relevant_ids": [2]}])
    pred = run(BlendFilter(retriever, filter_stages="ids"), lm)
    calls = lm.calls_to("filter_ids")
    assert len(calls) == 3
    for call, name in zip(calls, ("q", "q_ex", "q_in")):
        assert call.inputs["question"] == Q
        assert call.inputs["knowledge"].splitlines() == knowledge_lines(sets[name])
    kept = [sets["q"][1], sets["q_ex"][4], sets["q_in"][2]]
    assert [p.pid for p in pred.passages] == [p.pid for p in kept]


@pytest.mark.parametrize("k", [2, 3, 7])
def test_every_query_is_retrieved_with_the_same_k(retriever, k):
    """Eq. 5 / Fig. 4: D_q, D_ex and D_in are each the top-K of their query, with one K the figure varies;
    the external query q_ex must be retrieved with that K too (k != 5 shows a fixed k)."""
    lm = script()
    pred = run(BlendFilter(retriever, k=k), lm)
    assert retriever.queries == [(Q, k), (Q_EX, k), (Q_IN, k)]
    assert {name: len(docs) for name, docs in pred.retrieved.items()} == {
        "q": min(k, 5), "q_ex": min(k, 5), "q_in": min(k, 5)}
    # the external augmentation's own knowledge is D_q, so it also has k passages
    assert len(lm.calls_to("external_cot")[0].inputs["knowledge"].splitlines()) == min(k, 5)


def test_external_only_ablation_retrieves_q_ex_with_k(retriever):
    """Table 6 "w/o q_in" with a non-default K: q_ex is still retrieved with K (Eq. 5)."""
    lm = script()
    run(BlendFilter(retriever, k=3, augmentations=("external",)), lm)
    assert retriever.queries == [(Q, 3), (Q_EX, 3)]


def test_fig5_every_sampled_answer_reads_the_filtered_knowledge(retriever, sets):
    """Fig. 5 samples only the answer step; the answer (Eq. 9) is generated from the knowledge the filter
    kept (Eq. 8), never from the unfiltered union: all three answer calls (top_p 0, 0.5, 1) must see exactly
    the kept passages, in union order."""
    lm = script(filter_ids=[{"relevant_ids": [4, 1]}, {"relevant_ids": [3]}, {"relevant_ids": [0, 4]}])
    pred = run(BlendFilter(retriever, sampling=True), lm)
    kept = [sets["q"][1], sets["q"][4], sets["q_ex"][3], sets["q_in"][0], sets["q_in"][4]]
    # doc 6 (q_ex id 3) and doc 6 (q_in id 0) are the same passage: kept once
    expected = knowledge_lines(list({p.pid: p for p in kept}.values()))
    calls = lm.calls_to("answer_cot")
    assert len(calls) == 3
    assert [call.inputs["knowledge"].splitlines() for call in calls] == [expected] * 3
    assert len(expected) < 11  # the union of the three sets has 11 passages: the filter dropped some
    assert [p.pid for p in pred.passages] == [p.pid for p in list({p.pid: p for p in kept}.values())]


def test_fig5_sampled_answers_with_nothing_kept_read_no_knowledge(retriever):
    """Fig. 5 with a filter that keeps nothing (if_nothing_kept="no_knowledge"): every sample answers from
    the model's own knowledge, like the greedy answer; none reads the unfiltered union."""
    lm = script(filter_ids={"relevant_ids": []})
    run(BlendFilter(retriever, sampling=True), lm)
    assert [call.inputs["knowledge"] for call in lm.calls_to("answer_cot")] == ["(none)"] * 3
