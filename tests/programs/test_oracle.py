"""FILCO's oracle measures (ragzoo.programs.filco_oracle) on hand-checked cases, silver labels and the filter metric."""

from __future__ import annotations

import json

import dspy
import httpx
import pytest

from ragzoo.errors import ConfigError, DataError, LMError
from ragzoo.programs.filco_oracle import (CompletionLogprobScorer, build_filter_trainset, cxmi, cxmi_scores,
                                         filter_agreement_metric, lexical_match, lexical_overlap, oracle_labels,
                                         oracle_select, split_sentences, string_inclusion)
from ragzoo.retrieval.base import Passage
from ragzoo.testing import StaticRetriever

PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. The Seine flows "
                                              "through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. It is known for food.")


# ------------------------------------------------------------------------------------------- sentences

def test_split_sentences_keeps_initials_abbreviations_and_decimals_together():
    text = ("J. R. R. Tolkien wrote it.  He was born in 1892. The U.S. Army fought. It cost 3.5 dollars! "
            "Is it? Dr. Who lived in St. Louis (Missouri). \"Yes.\" 2001 came next.")
    assert split_sentences(text) == [
        "J. R. R. Tolkien wrote it.", "He was born in 1892.", "The U.S. Army fought.", "It cost 3.5 dollars!",
        "Is it?", "Dr. Who lived in St. Louis (Missouri).", "\"Yes.\"", "2001 came next."]


def test_split_sentences_of_empty_and_unterminated_text():
    assert split_sentences("") == []
    assert split_sentences("  no final period here ") == ["no final period here"]
    assert split_sentences("lower case. after a period stays joined.") == ["lower case. after a period stays joined."]


# ------------------------------------------------------------------------------------------- STRINC

def test_string_inclusion_finds_the_answer_in_one_sentence_and_not_the_other():
    assert string_inclusion("It is the capital of France.", ["France"])
    assert not string_inclusion("The Seine flows through it.", ["France"])


def test_string_inclusion_is_normalized_and_matches_whole_tokens_of_any_alias():
    assert string_inclusion("the capital of FRANCE, since 987", ["french republic", "france"])
    assert string_inclusion("He met The Beatles.", "beatles")  # articles and case do not matter
    assert not string_inclusion("Founded in 1927.", ["1"])  # "1" is not a token of "1927"
    assert not string_inclusion("anything", [])
    assert not string_inclusion("anything", [""])


# ------------------------------------------------------------------------------------------- LEXICAL

def test_lexical_overlap_is_word_unigram_f1_max_over_references():
    # tokens [cat, sat] vs [cat, sat, down]: precision 1, recall 2/3 -> F1 0.8
    assert lexical_overlap("The cat sat.", "cat sat down") == pytest.approx(0.8)
    assert lexical_overlap("The cat sat.", ["dog", "cat sat down"]) == pytest.approx(0.8)
    assert lexical_overlap("nothing shared", "cat") == 0.0


def test_lexical_threshold_is_strict_at_the_boundary():
    assert lexical_overlap("x y", "x z") == pytest.approx(0.5)
    assert not lexical_match("x y", "x z")  # F1 = λ = 0.5 is not above λ
    assert lexical_match("x y", "x z", threshold=0.49)
    assert oracle_select(["x y", "q r"], question="?", answers=["x z"], measure="lexical") == []
    assert oracle_select(["x y", "q r"], question="?", answers=["x z"], measure="lexical", threshold=0.4) == [0]


def test_lexical_selects_the_argmax_above_threshold_and_can_score_against_the_question():
    sentences = ["cat", "cat sat", "cat sat down"]
    assert oracle_select(sentences, question="?", answers=["cat sat down now"], measure="lexical") == [2]
    assert oracle_select(sentences, question="cat sat", answers=["zzz"], measure="lexical",
                         lexical_reference="question") == [1]


# ------------------------------------------------------------------------------------------- CXMI

def fake_logprob(output, question, context):
    """log p(output | context, question): high when the context contains the output, low when it misleads."""
    if context is None:
        return -5.0
    return -1.0 if output.lower() in context.lower() else -8.0


def test_cxmi_is_the_log_ratio_with_and_without_the_sentence():
    assert cxmi("It is the capital of France.", "capital?", "France", fake_logprob) == pytest.approx(4.0)
    assert cxmi("The Seine flows through it.", "capital?", "France", fake_logprob) == pytest.approx(-3.0)
    assert cxmi_scores(["in France", "no"], "q", "France", fake_logprob) == pytest.approx([4.0, -3.0])


def test_cxmi_computes_the_base_probability_once_per_example():
    calls = []

    def counting(output, question, context):
        calls.append(context)
        return fake_logprob(output, question, context)

    cxmi_scores(["a", "b", "c"], "q", "France", counting)
    assert calls == [None, "a", "b", "c"]


def test_cxmi_selection_uses_the_first_answer_and_a_zero_log_ratio_threshold():
    sentences = ["The Seine flows through it.", "It is the capital of France."]
    assert oracle_select(sentences, question="q", answers=["France", "Paris"], measure="cxmi",
                         logprob_fn=fake_logprob) == [1]
    assert oracle_select(["nothing", "here"], question="q", answers=["France"], measure="cxmi",
                         logprob_fn=fake_logprob) == []


def test_cxmi_without_logprobs_raises_a_clear_error():
    with pytest.raises(LMError, match="log-probabilities"):
        cxmi("s", "q", "o", None)
    with pytest.raises(LMError, match="log-probabilities"):
        oracle_select(["s"], question="q", answers=["o"], measure="cxmi")


def _echo_server(logprobs):
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        return httpx.Response(200, json={"choices": [{"text": body["prompt"], "logprobs": logprobs(body["prompt"])}]})

    return requests, httpx.Client(transport=httpx.MockTransport(handler))


def test_completion_scorer_sums_the_logprobs_of_the_answer_tokens_only():
    def logprobs(prompt):
        start = prompt.rindex(" France")  # tokens: the prompt prefix, then " Fr", "ance", then one generated token
        return {"tokens": ["<prefix>", " Fr", "ance", "."], "token_logprobs": [None, -0.5, -0.25, -3.0],
                "text_offset": [0, start, start + 3, len(prompt)]}

    requests, client = _echo_server(logprobs)
    scorer = CompletionLogprobScorer("m", "http://127.0.0.1:9/v1", client=client)
    assert scorer("France", "capital?", "It is in France.") == pytest.approx(-0.75)
    assert requests[0]["echo"] is True and requests[0]["logprobs"] == 1
    assert requests[0]["prompt"].startswith("context: It is in France.\nquestion: capital?\nanswer:")
    scorer("France", "capital?", None)
    assert requests[1]["prompt"] == "question: capital?\nanswer: France"


def test_completion_scorer_without_prompt_logprobs_raises_lm_error():
    _, client = _echo_server(lambda prompt: None)
    with pytest.raises(LMError, match="log-probabilities"):
        CompletionLogprobScorer("m", "http://127.0.0.1:9/v1", client=client)("France", "q", None)
    refusing = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(400, json={})))
    with pytest.raises(LMError, match="prompt log-probabilities"):
        CompletionLogprobScorer("m", "http://127.0.0.1:9/v1", client=refusing)("France", "q", None)


# ------------------------------------------------------------------------------------------- labels

def test_strinc_takes_the_first_sentence_containing_an_answer():
    sentences = ["Paris is big.", "It is in France.", "France is large."]
    assert oracle_select(sentences, question="q", answers=["France"], measure="strinc") == [1]
    assert oracle_select(sentences, question="q", answers=["Berlin"], measure="strinc") == []


def test_oracle_labels_are_filter_examples_one_per_passage():
    example = dspy.Example(question="What country is Paris the capital of?", answers=["France"])
    empty = Passage(pid="p3", title="Empty", text="")
    labels = oracle_labels(example, [PARIS, empty, Passage(pid="p4", title="Rome", text="Rome is old.")])
    assert len(labels) == 2  # the passage without text is skipped, as the program skips it
    first, second = labels
    assert set(first.inputs().keys()) == {"question", "title", "sentences"}
    assert first.title == "Paris"
    assert first.sentences == "[0] Paris is a large city.\n[1] It is the capital of France.\n[2] The Seine flows through it."
    assert first.selected == [1]
    assert second.selected == []


def test_oracle_labels_at_passage_granularity_keep_whole_passages():
    example = dspy.Example(question="q", answer="France")
    labels = oracle_labels(example, [PARIS, Passage(pid="p4", title="Rome", text="Rome is old.")],
                           granularity="passage")
    assert [(label.passage, label.keep) for label in labels] == [(PARIS.long_text, True),
                                                                 ("Rome | Rome is old.", False)]
    assert set(labels[0].inputs().keys()) == {"question", "passage"}


def test_oracle_labels_reject_bad_measures_and_examples_without_answers():
    with pytest.raises(ConfigError, match="measure"):
        oracle_labels(dspy.Example(question="q", answers=["a"]), [PARIS], measure="bleu")
    with pytest.raises(DataError, match="answers"):
        oracle_labels(dspy.Example(question="q"), [PARIS])


def test_build_filter_trainset_retrieves_top_k_and_labels_each_passage():
    examples = [dspy.Example(question="capital of France?", answers=["France"]).with_inputs("question"),
                dspy.Example(question="food city?", answers=["food"]).with_inputs("question")]
    retriever = StaticRetriever([PARIS, LYON], by_query={"capital of France?": [PARIS, LYON],
                                                        "food city?": [LYON, PARIS]})
    trainset = build_filter_trainset(examples, retriever, k=2)
    assert retriever.queries == [("capital of France?", 2), ("food city?", 2)]
    assert [(t.question, t.title, t.selected) for t in trainset] == [
        ("capital of France?", "Paris", [1]), ("capital of France?", "Lyon", [0]),
        ("food city?", "Lyon", [1]), ("food city?", "Paris", [])]
    positives = build_filter_trainset(examples, retriever, k=2, positives_only=True)
    assert [t.title for t in positives] == ["Paris", "Lyon", "Lyon"]


# ------------------------------------------------------------------------------------------- metric

@pytest.mark.parametrize(("gold", "predicted", "score"), [
    ([1], [1], 1.0), ([1], [1, 2], 2 / 3), ([1], [2], 0.0), ([], [], 1.0), ([], [0], 0.0), ([1], [], 0.0)])
def test_filter_agreement_is_f1_of_selected_sentence_sets(gold, predicted, score):
    example = dspy.Example(question="q", title="t", sentences="[0] a", selected=gold)
    assert filter_agreement_metric(example, dspy.Prediction(selected=predicted)) == pytest.approx(score)
    assert filter_agreement_metric(example, dspy.Prediction(selected=predicted), trace=[]) is (score == 1.0)


def test_filter_agreement_for_passage_labels():
    example = dspy.Example(question="q", passage="p", keep=True)
    assert filter_agreement_metric(example, dspy.Prediction(keep=True)) == 1.0
    assert filter_agreement_metric(example, dspy.Prediction(keep=False)) == 0.0
