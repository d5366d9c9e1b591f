"""The dry-run estimate of a compile models the bootstrapped demos (issue 14): with `dry_run_metric`, a dry-run
compile takes the same optimizer steps and sends the same prompts as a compile with a model that answers the
training questions right (a scripted LM that accepts demos), for bootstrap, random search and MIPRO."""

from __future__ import annotations

import dspy
import pytest

from ragzoo import programs
from ragzoo.engines import dry_run_metric, placeholder_outputs
from ragzoo.lm import make_lm
from ragzoo.optimizers import compile_program
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages
from ragzoo.usage import metering


def _examples(n, offset=0):
    return [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answers=[f"answer {i}"], answer=f"answer {i}")
            .with_inputs("question") for i in range(offset, offset + n)]


def _right_answers(context):
    number = context.inputs.get("question", "item 0?").split("item ")[-1].rstrip("?")
    values = placeholder_outputs(context.signature)
    values["answer"] = f"answer {number}"
    return values


def _compile(lm, optimizer, metric):
    program = programs.get("cot_rag", retriever=StaticRetriever(make_passages(10)))
    with dspy.context(lm=lm), metering() as meter:
        result = compile_program(program, trainset=_examples(8), valset=_examples(4, 100), optimizer=optimizer,
                                 metric=metric)
    return meter.usage, result.program


@pytest.mark.parametrize("optimizer", ["bootstrap", "bootstrap-rs", "mipro:light"])
def test_dry_run_estimate_is_within_ten_percent_of_a_scripted_compile(optimizer):
    real, compiled = _compile(ScriptedLM(default=_right_answers), optimizer, "em")
    estimate, _ = _compile(make_lm("dry-run"), optimizer, dry_run_metric("em"))
    if optimizer == "bootstrap":  # (search optimizers may keep their zero-shot candidate: every score ties)
        assert any(predictor.demos for _, predictor in compiled.named_predictors())  # the compile bootstrapped demos
    assert estimate.lm_calls == pytest.approx(real.lm_calls, rel=0.10)
    assert estimate.prompt_tokens == pytest.approx(real.prompt_tokens, rel=0.10)


def test_dry_run_metric_is_the_metric_outside_dry_run():
    metric = dry_run_metric("em")
    example = _examples(1)[0]
    wrong = dspy.Prediction(answer="nope")
    with dspy.context(lm=ScriptedLM(default=_right_answers)):
        assert not metric(example, wrong)
    with dspy.context(lm=make_lm("dry-run")):
        assert metric(example, wrong)
    assert metric.__name__ == "em"
