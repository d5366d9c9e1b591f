"""Knob search: Optuna over a method's knobs jointly with the optimizer finds the knob that matters."""

from __future__ import annotations

import dspy
import pytest

from ragzoo.errors import ConfigError
from ragzoo.optimizers import search_knobs
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever


def _needs_three_passages(make_examples):
    """Each question's answer sits in the 3rd passage retrieved, so only k >= 3 can answer it."""
    examples = make_examples(10)
    by_query = {}
    for i, example in enumerate(examples):
        noise = [Passage(pid=f"n{i}-{j}", title=f"Noise {j}", text="nothing useful") for j in range(2)]
        by_query[example.question] = noise + [Passage(pid=f"a{i}", title=f"Item {i}", text=f"answer {i}")]
    retriever = StaticRetriever([], by_query=by_query)

    def respond(call):
        number = call.inputs["question"].split("item ")[-1].rstrip("?")
        return {"answer": f"answer {number}" if f"answer {number}" in call.inputs["context"] else "unknown"}

    return examples, retriever, ScriptedLM({"answer": respond})


def test_search_finds_the_knob_that_matters(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):
        result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                              optimizers=["none", "labeled"], n_trials=8, seed=0)
    assert result.best_knobs == {"k": 3} and result.best_score == 1.0
    assert {trial["knobs"]["k"] for trial in result.trials} >= {1, 3}
    assert all(trial["score"] == (1.0 if trial["knobs"]["k"] == 3 else 0.0) for trial in result.trials)
    assert result.best_program.k == 3


def test_search_is_seeded(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    runs = []
    for _ in range(2):
        with dspy.context(lm=lm):
            result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6],
                                  valset=examples[6:], optimizers=["none", "labeled"], n_trials=4, seed=7)
        runs.append([(t["knobs"]["k"], t["optimizer"]) for t in result.trials])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("space, optimizers, message", [
    ({"k": []}, ["none"], "no values"),
    ({"k": ["many"]}, ["none"], "integer"),
    ({"depth": [1]}, ["none"], "no knob 'depth'"),
    ({"k": [1]}, ["nosuch"], "optimizer"),
])
def test_bad_search_spaces_are_refused(space, optimizers, message, make_examples, tiny_retriever):
    examples = make_examples(4)
    with pytest.raises(ConfigError, match=message):
        search_knobs("_tinyqa", tiny_retriever, space, trainset=examples[:2], valset=examples[2:],
                     optimizers=optimizers, n_trials=1)


def test_search_budgets_are_totals_over_all_trials(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):
        result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                              optimizers=["none"], n_trials=8, seed=0, max_calls=9)
    # each trial validates on 4 questions (4 calls): a per-trial budget of 9 would let all 8 trials run
    assert len(lm.calls) == 9
    assert result.stopped and "max-calls 9" in result.stopped
    assert len(result.trials) == 3 and "stopped" in result.trials[-1]
    assert all("stopped" not in trial for trial in result.trials[:-1])


def test_search_cost_budget_binds_and_a_search_with_no_finished_trial_says_so(make_examples):
    from ragzoo.errors import BudgetExceeded

    examples, retriever, lm = _needs_three_passages(make_examples)
    lm.priced_model = "openai/gpt-4o-mini"  # priced, so a cost budget can bind
    with dspy.context(lm=lm), pytest.raises(BudgetExceeded, match="before any trial finished"):
        search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                     optimizers=["none"], n_trials=8, seed=0, max_cost=1e-9)
    assert len(lm.calls) == 1  # below one call's price: the first call goes through, nothing after it
