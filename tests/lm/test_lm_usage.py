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
from ragzoo.usage import USAGE_CALLBACK, Budget, attach, budgeted, metering


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
    assert first.summary()["lm_calls"] == 2 and lm.usage.lm_calls == 6


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
    assert lm.usage.lm_calls == 64 and lm.usage.by_signature["answer"]["calls"] == 32


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


def test_metering_works_on_foreign_lms_and_the_callback_records_each_call_once():
    lm = ScriptedLM({"Predict": {"answer": "x"}}, default={"answer": "x"})
    attach(lm)
    attach(lm)
    assert sum(callback is USAGE_CALLBACK for callback in lm.callbacks) == 1
    with dspy.context(lm=lm), trace_example() as trace:
        with metering() as meter:  # the callback is now reachable twice: on the LM and in the settings
            dspy.Predict("question -> answer")(question="q")
        dspy.Predict("question -> answer")(question="q2")
    assert len(trace.lm_calls) == 2 and lm.usage.lm_calls == 2
    assert meter.usage.lm_calls == 1  # the meter only counted inside its block
    assert trace.lm_calls[0].model == "scripted/ragzoo"


def test_lms_not_built_by_ragzoo_are_metered_and_budgeted():
    lm = dspy.utils.DummyLM([{"answer": "x"}] * 5)
    with dspy.context(lm=lm), trace_example() as trace:
        with metering(max_calls=2) as meter:
            predict = dspy.Predict("question -> answer")
            predict(question="a")
            predict(question="b")
            with pytest.raises(BudgetExceeded):
                predict(question="c")
    assert meter.usage.lm_calls == 2 and len(trace.lm_calls) == 2


def test_failed_calls_are_counted_as_failures():
    def boom(context):
        raise RuntimeError("engine down")

    lm = ScriptedLM(default=boom)
    with dspy.context(lm=lm), metering() as meter, pytest.raises(Exception):
        dspy.Predict("question -> answer")(question="q")
    assert lm.usage.failed_calls >= 1 and lm.usage.lm_calls == 0
    assert meter.usage.failed_calls >= 1


def test_budget_stops_before_call_n_plus_one():
    lm = make_lm("dry-run")
    predictor = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering(max_calls=3) as meter:
        for i in range(3):
            predictor(question=f"q{i}")
        with pytest.raises(BudgetExceeded, match="max-calls 3"):
            predictor(question="q3")
    assert len(lm.history) == 3 and lm.usage.lm_calls == 3
    with pytest.raises(BudgetExceeded):
        meter.budget.check()


def test_budget_is_exact_across_threads_and_copies():
    from dspy.utils.parallelizer import ParallelExecutor

    lm = make_lm("dry-run")
    copy = lm.copy(temperature=0.7)  # optimizers copy LMs; the budget must still hold

    def call(i):
        try:
            with dspy.context(lm=copy if i % 2 else lm):
                dspy.Predict("question -> answer")(question=f"q{i}")
            return True
        except BudgetExceeded:
            return False

    with dspy.context(lm=lm), metering(max_calls=10) as meter:
        results = ParallelExecutor(num_threads=16, disable_progress_bar=True, max_errors=100).execute(call, range(40))
    assert sum(results) == 10 and meter.budget.started == 10 and meter.usage.lm_calls == 10


def test_cost_budget_refuses_the_call_that_could_pass_it(monkeypatch):
    from ragzoo import usage

    # a call's estimate counts the longest reply this model gave in this process: an earlier test's long replies
    # (tests run slow files first) would make the first call here look past the budget
    monkeypatch.setattr(usage, "_LONGEST_REPLY", {})
    lm = make_lm("dry-run")
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering(max_cost=1e-9) as meter:
        with pytest.raises(BudgetExceeded, match="max-cost"):
            predict(question="q")  # one call costs more than the budget: refused before it is sent
    assert meter.usage.lm_calls == 0
    with dspy.context(lm=lm), metering() as probe:
        predict(question="q1")
    one_call = probe.usage.cost
    # two and a half calls' worth: the cap is never passed (the third call used to go, to 3 calls' cost)
    with dspy.context(lm=lm), metering(max_cost=2.5 * one_call) as meter:
        with pytest.raises(BudgetExceeded, match="max-cost"):
            for index in range(5):
                predict(question=f"q{index + 2}")
    assert 1 <= meter.usage.lm_calls <= 2 and 0 < meter.budget.spent <= 2.5 * one_call
    assert meter.budget.spent == pytest.approx(meter.usage.cost) and meter.budget.held == 0


def test_nested_meters_each_count_and_the_outer_budget_binds_the_inner_block():
    lm = make_lm("dry-run")
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering(max_calls=3) as outer:
        predict(question="a")
        with metering() as inner:
            predict(question="b")
            predict(question="c")
            with pytest.raises(BudgetExceeded):
                predict(question="d")
    assert (outer.usage.lm_calls, inner.usage.lm_calls) == (3, 2)


@pytest.mark.parametrize("max_calls, max_cost", [(-1, None), (True, None), (1.5, None), (None, "ten"),
                                                 (None, float("nan")), (None, -0.01), (None, float("inf"))])
def test_budget_arguments_are_validated(max_calls, max_cost):
    with pytest.raises(ConfigError):
        Budget(max_calls=max_calls, max_cost=max_cost)
    with pytest.raises(ConfigError):
        with metering(max_calls=max_calls, max_cost=max_cost):
            pass


def test_budgeted_copies_keep_the_check_and_leave_the_original_alone():
    lm = dspy.utils.DummyLM([{"answer": "x"}] * 5)
    checked = budgeted(lm)
    assert checked is not lm and type(lm) is dspy.utils.DummyLM and budgeted(checked) is checked
    assert type(checked.copy()) is type(checked)


def test_scripted_lm_honours_budgets():
    lm = ScriptedLM(default={"answer": "x"})
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering(max_calls=2):
        predict(question="a")
        predict(question="b")
        with pytest.raises(BudgetExceeded):
            predict(question="c")
    assert len(lm.calls) == 2


@pytest.mark.parametrize("cache", [False, True])
def test_a_server_that_reports_no_usage_is_paid_counted_and_budgeted_not_a_cache_hit(cache):
    """Review: a reply without `usage` (some local OpenAI-compatible servers) was read as DSPy's cache hit: 0 tokens,
    `cached`, and --max-calls let every such call through (3 requests under --max-calls 1)."""
    from ragzoo.stubserver import StubLMServer

    predict = dspy.Predict("question -> answer")
    with StubLMServer(usage=False) as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=cache)
        with dspy.context(lm=lm), trace_example() as trace:
            predict(question=f"Who wrote Hamlet? {uuid.uuid4().hex}")
        unique = uuid.uuid4().hex  # no answer of an earlier run in the disk cache
        with dspy.context(lm=lm), metering(max_calls=1) as meter:
            predict(question=f"Who wrote Macbeth? {unique}")
            with pytest.raises(BudgetExceeded):
                predict(question=f"Who wrote Othello? {unique}")
        assert server.requests == 2
        if cache:  # the same question again: DSPy's cache answers it, free and marked so
            with dspy.context(lm=lm), trace_example() as again:
                predict(question=f"Who wrote Macbeth? {unique}")
            assert server.requests == 2 and again.lm_calls[0].cached
    call = trace.lm_calls[0]
    assert not call.cached and call.prompt_tokens > 20 and call.completion_tokens > 0
    assert meter.usage.lm_calls == 1 and meter.usage.cached_calls == 0


def test_a_cache_hit_is_free_when_the_usage_callback_is_both_global_and_the_lm_s():
    """Diff review: with no active LM, `metering()` adds the usage callback globally too, and with another callback
    active DSPy starts it twice per call; the second start opened the mark the cache set, the end read the first:
    a cache hit counted as a paid call."""
    from dspy.utils.callback import BaseCallback

    from ragzoo.stubserver import StubLMServer

    class Mine(BaseCallback):
        pass

    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1")  # cache on
        messages = [{"role": "user", "content": f"say hi {uuid.uuid4().hex}"}]
        with dspy.context(callbacks=[Mine()]), metering() as meter:
            lm(messages=messages)
            lm(messages=messages)
        assert server.requests == 1
    assert (meter.usage.lm_calls, meter.usage.cached_calls) == (2, 1)


def test_a_cost_stop_never_waits_on_a_rounding_remainder_of_calls_already_ended():
    """Evaluate review: calls settled in another order than reserved left ~2e-16 USD held; the next call past the
    budget then waited for calls that were not running, in one-second turns, to its question's deadline (600 s),
    and the run recorded a timeout instead of a budget stop."""
    import threading

    budget = Budget(max_cost=100.0)
    for estimate in (1.1, 0.7, 0.9):
        budget.reserve(estimate)
    for estimate in (0.9, 1.1, 0.7):
        budget.spend(estimate)
        budget.settle(estimate)
    assert budget.held == 0.0 and budget.in_flight == 0
    raised = []
    worker = threading.Thread(target=lambda: raised.append(pytest.raises(BudgetExceeded, budget.reserve, 98.0)))
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and raised, "the reservation waited on calls that had ended"
    # with a call really in flight, a reservation past the budget still waits for it to settle
    held = Budget(max_cost=1.0)
    held.reserve(0.6)
    waiting = threading.Thread(target=lambda: pytest.raises(BudgetExceeded, held.reserve, 0.6), daemon=True)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # the 0.6 in flight may cost less: it waits
    held.spend(0.5)
    held.settle(0.6)
    waiting.join(5)
    assert not waiting.is_alive()
