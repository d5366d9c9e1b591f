"""Questions under --deadline run in evaluate's own threads, watched by one watchdog thread (a second thread per
question, the first waiting on it, cost ~0.4 ms of CPU per LM call at 64 threads). A question past its deadline
is still recorded as a timeout at its deadline, another thread takes the remaining questions in its place, and
its late answer is not recorded twice."""

from __future__ import annotations

import threading
import time

import dspy
import pytest

from ragzoo.runs import evaluate
from ragzoo.testing import AnswerQuestion as Answer
from ragzoo.testing import ScriptedLM
from ragzoo.testing import make_examples as examples


@pytest.mark.parametrize("threads", [1, 4])
def test_questions_under_a_deadline_run_in_the_evaluation_threads(monkeypatch, threads):
    started, answered_on = [], set()
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name) or real_start(self))

    def respond(context):
        answered_on.add(threading.current_thread().name.rsplit("-", 1)[0])
        return {"answer": context.inputs["question"].upper()}

    with dspy.context(lm=ScriptedLM(default=respond)):
        summary = evaluate(Answer(), examples(200), "em", None, threads=threads, progress=False, deadline=30)
    assert summary["n"] == 200 and summary["metrics"]["em"] == 1.0
    assert answered_on == {"ragzoo-evaluate"}  # no hand-over to a thread of its own per question
    assert len(started) <= threads + 1, started  # the threads and at most one watchdog, for 200 questions


def test_a_question_past_its_deadline_is_recorded_then_and_the_others_go_on(tmp_path, monkeypatch):
    import ragzoo.runs

    monkeypatch.setattr(ragzoo.runs, "LATE_GRACE", 0.5)  # the hung question returns only when the test lets it
    release = threading.Event()
    late = []

    def respond(context):
        if context.inputs["question"] == "q2":
            release.wait(30)  # a request that hangs until the test lets it end
            late.append(time.monotonic())
        return {"answer": context.inputs["question"].upper()}

    with dspy.context(lm=ScriptedLM(default=respond)):
        started = time.monotonic()
        summary = evaluate(Answer(), examples(40), "em", tmp_path / "run", threads=2, progress=False, deadline=1.0)
        seconds = time.monotonic() - started
    # the run waited for the hung question no longer than the grace it gives late calls to be counted, and says
    # one was still at the LM when it ended
    assert seconds < 1.0 + ragzoo.runs.LATE_GRACE + 3 and not late
    assert summary["still_at_lm_at_end"] == 1
    assert summary["n"] == 40 and summary["failures"] == 1 and summary["failures_by_kind"] == {"timeout": 1}
    assert summary["metrics"]["em"] == 39 / 40  # the 38 questions behind it were answered by the other threads
    release.set()
    deadline = time.monotonic() + 10
    while not late and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the straggler's answer comes back now: it must not be kept
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 40 and sum('"q2"' in line for line in lines) == 1


def test_in_memory_a_late_answer_is_not_a_second_record(monkeypatch):
    import ragzoo.runs

    monkeypatch.setattr(ragzoo.runs, "LATE_GRACE", 0.2)
    release = threading.Event()
    done = []

    def respond(context):
        if context.inputs["question"] == "q0":
            release.wait(30)
            done.append(1)
        return {"answer": context.inputs["question"].upper()}

    with dspy.context(lm=ScriptedLM(default=respond)):
        summary = evaluate(Answer(), examples(6), "em", None, threads=3, progress=False, deadline=0.5)
    release.set()
    records = summary["records"]
    assert sorted(r["id"] for r in records) == [f"q{i}" for i in range(6)]
    assert [r["error"]["kind"] for r in records if r["error"]] == ["timeout"]
    assert "deadline" in next(r for r in records if r["error"])["error"]["message"]


def test_only_the_calls_after_the_timeout_record_are_counted_late(tmp_path):
    """A question that made one call in time and a second past its deadline: its timeout record counts the
    first, the run's extra usage the second ("late"), never both (each call counted once)."""
    import json

    from ragzoo.runs import extra_usage

    class TwoCalls(dspy.Module):
        def __init__(self):
            super().__init__()
            self.first = dspy.Predict("question -> answer")
            self.second = dspy.Predict("question, draft -> answer")

        def forward(self, question):
            draft = self.first(question=question).answer
            return self.second(question=question, draft=draft)

    def respond(context):
        if context.predictor_name == "second":
            time.sleep(1.5)  # past the 1 s deadline, then answered
        return {"answer": "x"}

    with dspy.context(lm=ScriptedLM(default=respond)):
        summary = evaluate(TwoCalls(), examples(1), "em", tmp_path / "run", threads=1, progress=False, deadline=1.0)
    record = json.loads((tmp_path / "run" / "predictions.jsonl").read_text())
    assert record["error"]["kind"] == "timeout" and record["lm_calls"] == 1
    assert extra_usage(tmp_path / "run")["late_calls"] == 1
    assert summary["usage"]["lm_calls"] == 2 and summary["usage"]["late_calls"] == 1


def test_a_run_in_another_thread_stops_when_told_even_on_one_thread_without_a_deadline():
    """`runs.stop_when(event)`: a run no signal reaches (a grid's cell under --parallel) ends its wait with
    KeyboardInterrupt once the event is set, also where it would run its questions inline (one thread, no
    deadline), which nothing could interrupt."""
    from ragzoo.runs import run_threads, stop_when

    event, done, seen = threading.Event(), [], []

    def work(item):
        if item == 0:
            event.set()  # told to stop while the first question is still at a hung LM
            time.sleep(30)
        done.append(item)

    def run():
        with stop_when(event):
            try:
                run_threads(work, [0, 1, 2], 1)
            except KeyboardInterrupt:
                seen.append(time.monotonic())

    started = time.monotonic()
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(10)
    assert seen and seen[0] - started < 5 and done == []

