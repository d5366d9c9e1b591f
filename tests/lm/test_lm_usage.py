"""Usage accounting per call and per example, totals across threads, and budgets."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
import uuid

from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.lm import make_lm
from ragzoo.testing import ScriptedLM
from ragzoo.tracing import trace_example
from ragzoo.usage import BudgetGuard, UsageTotals, install_usage_tracking, tracking


class Pipeline(dspy.Module):
    def __init__(self):
        super().__init__()
        self.rewrite = dspy.Predict("question -> query")
        self.answer = dspy.ChainOfThought("question, query -> answer")

    def forward(self, question):
        query = self.rewrite(question=question).query
        return self.answer(question=question, query=query)


def test_each_example_trace_sees_its_own_calls_with_predictor_names():
    lm = make_lm("dry-run")
    program = Pipeline()
    with dspy.context(lm=lm):
        with trace_example() as first:
            program(question="one?")
        with trace_example() as second:
            program(question="two?")
            program(question="three?")
    assert [c.signature for c in first.lm_calls] == ["rewrite", "answer"]
    assert [c.signature for c in second.lm_calls] == ["rewrite", "answer"] * 2
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 and c.latency >= 0 for c in second.lm_calls)
    assert first.summary()["lm_calls"] == 2 and lm.usage.calls == 6


def test_traces_stay_separate_across_threads():
    lm = make_lm("dry-run")
    program = Pipeline()

    def run(question):
        with dspy.context(lm=lm), trace_example() as trace:
            program(question=question)
        return len(trace.lm_calls)

    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(run, [f"q{i}" for i in range(32)]))
    assert counts == [2] * 32
    assert lm.usage.calls == 64 and lm.usage.by_signature["answer"]["calls"] == 32


def test_cache_hits_are_recorded_as_cached_and_free(tmp_path):
    lm = make_lm("dry-run", cache=True)
    predictor = dspy.Predict("question -> answer")
    question = f"cached question {uuid.uuid4().hex}"  # DSPy's disk cache outlives the test session
    with dspy.context(lm=lm):
        with trace_example() as trace:
            predictor(question=question)
            predictor(question=question)
    first, second = trace.lm_calls
    assert not first.cached and first.cost > 0
    assert second.cached and second.cost == 0 and second.prompt_tokens == 0
    assert lm.usage.cached_calls == 1


def test_tracking_works_on_foreign_lms_and_is_idempotent():
    lm = ScriptedLM({"Predict": {"answer": "x"}}, default={"answer": "x"})
    tracker = install_usage_tracking(lm)
    assert install_usage_tracking(lm) is tracker and len(lm.callbacks) == 1
    extra = UsageTotals()
    with dspy.context(lm=lm), trace_example() as trace:
        with tracking(lm, extra):
            dspy.Predict("question -> answer")(question="q")
        dspy.Predict("question -> answer")(question="q2")
    assert len(trace.lm_calls) == 2 and tracker.totals.calls == 2
    assert extra.calls == 1  # the sink only counted inside its block
    assert trace.lm_calls[0].model == "scripted/ragzoo"


def test_failed_calls_are_counted_as_failures():
    def boom(context):
        raise RuntimeError("engine down")

    lm = ScriptedLM(default=boom)
    tracker = install_usage_tracking(lm)
    with dspy.context(lm=lm), pytest.raises(Exception):
        dspy.Predict("question -> answer")(question="q")
    assert tracker.totals.failed_calls >= 1 and tracker.totals.calls == 0


def test_budget_guard_stops_before_call_n_plus_one():
    lm = make_lm("dry-run")
    guard = BudgetGuard(max_calls=3)
    install_usage_tracking(lm, guard=guard)
    predictor = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        for i in range(3):
            predictor(question=f"q{i}")
        with pytest.raises(BudgetExceeded, match="max-calls 3"):
            predictor(question="q3")
    assert len(lm.history) == 3 and lm.usage.calls == 3
    with pytest.raises(BudgetExceeded):
        guard.check()


def test_budget_guard_is_exact_across_threads_and_copies():
    lm = make_lm("dry-run")
    guard = BudgetGuard(max_calls=10)
    install_usage_tracking(lm, guard=guard)
    copy = lm.copy(temperature=0.7)  # optimizers copy LMs; the budget must still hold

    def call(i):
        try:
            with dspy.context(lm=copy if i % 2 else lm):
                dspy.Predict("question -> answer")(question=f"q{i}")
            return True
        except BudgetExceeded:
            return False

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(40)))
    assert sum(results) == 10 and guard.started == 10


def test_cost_budget():
    lm = make_lm("dry-run")
    totals = UsageTotals()
    guard = BudgetGuard(max_cost=1e-9)
    with tracking(lm, totals, guard), dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="q")  # the first call is allowed, then cost >= budget
        with pytest.raises(BudgetExceeded, match="max-cost"):
            dspy.Predict("question -> answer")(question="q2")
    assert totals.calls == 1 and guard.cost == pytest.approx(totals.cost)


def test_budget_arguments_and_foreign_lms():
    with pytest.raises(ConfigError):
        BudgetGuard(max_calls=-1)
    with pytest.raises(ConfigError):
        BudgetGuard(max_cost="ten")
    with pytest.raises(ConfigError, match="make_lm"):
        install_usage_tracking(dspy.utils.DummyLM([{"answer": "x"}]), guard=BudgetGuard(max_calls=1))


def test_scripted_lm_honours_budgets():
    lm = ScriptedLM(default={"answer": "x"})
    install_usage_tracking(lm, guard=BudgetGuard(max_calls=2))
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        predict(question="a")
        predict(question="b")
        with pytest.raises(BudgetExceeded):
            predict(question="c")
    assert len(lm.calls) == 2
