"""What was alive when an evaluation started (modules, the retriever's index, the program, the data) is set aside by
the collector while it runs (`gc.freeze`), so a full collection, which held the interpreter lock for ~0.1-0.3 s on
the bm25 sample and came about once a thousand LM calls as DSPy's history grew, walks only what the run made; it
is handed back after (`gc.unfreeze`), also on a failure, and a nested evaluation leaves it frozen for the outer."""

from __future__ import annotations

import gc

import dspy
import pytest

from ragzoo.runs import evaluate
from ragzoo.testing import AnswerQuestion as Answer
from ragzoo.testing import ScriptedLM
from ragzoo.testing import make_examples as _examples


@pytest.mark.parametrize("threads", [1, 4])
def test_what_was_alive_before_the_run_is_frozen_during_it_and_handed_back(threads):
    seen = []

    def metric(example, prediction, trace=None):
        seen.append(gc.get_freeze_count())
        return 1.0

    kept = [object() for _ in range(1000)]  # alive before the run: frozen during it
    before = gc.get_freeze_count()
    lm = ScriptedLM(default=lambda context: {"answer": context.inputs["question"].upper()})
    with dspy.context(lm=lm):
        summary = evaluate(Answer(), _examples(6), metric, None, threads=threads, progress=False)
    assert summary["n"] == 6 and len(seen) == 6
    assert min(seen) >= len(gc.get_objects()) // 2, seen  # most of the heap was set aside
    assert gc.get_freeze_count() == before  # handed back: nothing frozen stays uncollectable
    assert kept


def test_a_nested_evaluation_keeps_the_outer_one_frozen_and_a_failure_unfreezes():
    inner_after = []

    def metric(example, prediction, trace=None):
        lm = ScriptedLM(default={"answer": "x"})
        with dspy.context(lm=lm):
            evaluate(Answer(), _examples(1), "em", None, progress=False)
        inner_after.append(gc.get_freeze_count())
        return 1.0

    before = gc.get_freeze_count()
    with dspy.context(lm=ScriptedLM(default={"answer": "y"})):
        evaluate(Answer(), _examples(2), metric, None, progress=False)
    assert inner_after and min(inner_after) > 0
    assert gc.get_freeze_count() == before

    class Interrupted(dspy.Module):
        def forward(self, question):
            raise KeyboardInterrupt

    with dspy.context(lm=ScriptedLM(default={"answer": "y"})), pytest.raises(KeyboardInterrupt):
        evaluate(Interrupted(), _examples(2), "em", None, progress=False, deadline=None)
    assert gc.get_freeze_count() == before
