"""The CPU ragzoo adds to an LM call: metering an LM that carries the usage callback (every `TrackedLM`) installs
no global DSPy callback, so DSPy inspects the arguments of the LM call only, not of every module, predictor and
adapter call around it; each call is still counted once."""

from __future__ import annotations

import inspect

import dspy

from ragzoo.testing import AnswerQuestion, ScriptedLM
from ragzoo.tracing import trace_example
from ragzoo.usage import USAGE_CALLBACK, metering


class TwoSteps(dspy.Module):
    def __init__(self):
        super().__init__()
        self.rewrite = dspy.Predict("question -> query")
        self.answer = dspy.Predict("question, query -> answer")

    def forward(self, question):
        return self.answer(question=question, query=self.rewrite(question=question).query)


def test_a_tracked_lm_is_metered_without_a_global_callback(monkeypatch):
    lm = ScriptedLM(default={"query": "q", "answer": "a"})
    inspected = []
    real = inspect.getcallargs
    monkeypatch.setattr(inspect, "getcallargs",
                        lambda fn, *a, **k: inspected.append(fn.__qualname__) or real(fn, *a, **k))
    with dspy.context(lm=lm), metering(max_calls=10) as meter, trace_example() as trace:
        assert not any(callback is USAGE_CALLBACK for callback in dspy.settings.callbacks or [])
        TwoSteps()(question="why?")
    assert [call.signature for call in trace.lm_calls] == ["rewrite", "answer"]
    assert meter.usage.lm_calls == 2
    # none: no module/predictor/adapter call is inspected, and an LM call whose only callback is the usage one
    # runs it without DSPy's wrapper, which inspected the arguments of every LM call (`usage._metered`)
    assert inspected == [], inspected


def test_evaluate_threads_do_not_wait_on_every_pending_question(monkeypatch):
    """DSPy's ParallelExecutor waits on every pending future at each completion (O(questions) per question: the
    CPU of a call grew with the run's size); evaluate's threads take questions from one queue instead, each under
    the caller's DSPy settings."""
    from dspy.utils import parallelizer

    from ragzoo.runs import evaluate

    waits = []
    real_wait = parallelizer.wait
    monkeypatch.setattr(parallelizer, "wait", lambda *a, **k: waits.append(1) or real_wait(*a, **k))
    lm = ScriptedLM(default=lambda context: {"answer": context.inputs["question"].upper()})
    examples = [dspy.Example(id=f"q{i}", question=f"q{i}", answer=f"Q{i}").with_inputs("question") for i in range(300)]
    with dspy.context(lm=lm):
        summary = evaluate(AnswerQuestion(), examples, "em", None, threads=8, progress=False, max_calls=1000)
    assert summary["n"] == 300 and summary["failures"] == 0 and summary["metrics"]["em"] == 1.0
    assert summary["usage"]["lm_calls"] == 300  # every thread under the caller's LM and meter
    assert waits == []


def test_examples_under_a_deadline_reuse_their_threads(monkeypatch):
    """A thread made per question under --deadline cost ~15% of evaluate's CPU at 256 threads: they are reused."""
    import threading

    from ragzoo.runs import evaluate

    started = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda self: started.append(self.name) or real_start(self))
    lm = ScriptedLM(default=lambda context: {"answer": context.inputs["question"].upper()})
    examples = [dspy.Example(id=f"q{i}", question=f"q{i}", answer=f"Q{i}").with_inputs("question") for i in range(200)]
    with dspy.context(lm=lm):
        summary = evaluate(AnswerQuestion(), examples, "em", None, threads=4, progress=False, deadline=30)
    assert summary["n"] == 200 and summary["metrics"]["em"] == 1.0
    assert started.count("ragzoo-example") <= 8, started.count("ragzoo-example")


def test_another_callback_still_runs_through_dspys_wrapper_and_usage_is_counted_once():
    """`usage._metered` runs the usage callback itself only where it is the only callback active; a user's (or
    MLflow's) callback keeps DSPy's wrapper, and the call is counted once either way, also with the usage callback
    both on the LM and global."""
    from dspy.utils.callback import BaseCallback

    seen = []

    class Watch(BaseCallback):
        def on_lm_start(self, call_id, instance, inputs):
            seen.append(sorted(inputs))

    for callbacks in ([Watch()], [USAGE_CALLBACK], []):
        lm = ScriptedLM(default={"query": "q", "answer": "a"})
        with dspy.context(lm=lm, callbacks=callbacks), metering() as meter, trace_example() as trace:
            TwoSteps()(question="why?")
        assert meter.usage.lm_calls == 2 and len(trace.lm_calls) == 2, callbacks
    assert seen == [["kwargs", "messages", "prompt"]] * 2  # the user's callback saw both calls, as DSPy gives them
