"""`--price-per-hour`: a server rented by the hour costs wall time x rate, shown apart from the token cost,
and `--max-cost` binds on the sum (checked before each call). Time comes from a fake clock."""

from __future__ import annotations

import dspy
import pytest

import ragzoo.usage as usage
from ragzoo.commands.common import LM_DEFAULTS, add_lm_args
from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.lm import describe_lm, make_lm
from ragzoo.testing import ScriptedLM
from ragzoo.usage import metering


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(usage, "monotonic", fake)
    return fake


def _lm(rate):
    lm = ScriptedLM(default={"answer": "a"})  # an unpriced model: its tokens cost $0
    lm.price_per_hour = rate
    return lm


def test_wall_time_is_priced_apart_from_tokens(clock):
    lm = _lm(36.0)  # $0.01 per second
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering() as meter:
        predict(question="q")
        clock.now += 30
        predict(question="q")
        clock.now += 60
    report = meter.usage.to_dict()
    assert report["cost"] == 0.0  # tokens of an unpriced model
    assert report["server_seconds"] == pytest.approx(90.0)
    assert report["server_cost"] == pytest.approx(0.90)
    assert report["total_cost"] == pytest.approx(0.90)
    assert meter.usage.total_cost == pytest.approx(0.90)


def test_max_cost_binds_on_elapsed_time_before_each_call(clock):
    lm = _lm(36.0)
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), metering(max_cost=1.0) as meter:
        predict(question="q")
        clock.now += 50  # $0.50 so far: the next call may go
        predict(question="q")
        clock.now += 60  # $1.10: no call may start
        with pytest.raises(BudgetExceeded, match=r"server \$1\.1000 .*36/h"):
            predict(question="q")
    assert len(lm.calls) == 2
    assert meter.usage.lm_calls == 2
    assert meter.usage.server_cost == pytest.approx(1.10)


def test_without_a_rate_a_cost_budget_on_an_unpriced_model_is_refused():
    lm = ScriptedLM(default={"answer": "a"})
    with dspy.context(lm=lm), pytest.raises(ConfigError, match="--price-per-hour"):
        with metering(max_cost=1.0):
            pass


def test_no_rate_no_server_cost_keys(clock):
    lm = make_lm("dry-run")
    with dspy.context(lm=lm), metering() as meter:
        dspy.Predict("question -> answer")(question="q")
        clock.now += 3600
    assert "server_cost" not in meter.usage.to_dict() and meter.usage.server_cost == 0.0


def test_make_lm_flag_and_manifest():
    import argparse

    parser = argparse.ArgumentParser()
    add_lm_args(parser)
    assert parser.parse_args(["--price-per-hour", "2.5"]).price_per_hour == 2.5
    assert "price_per_hour" in LM_DEFAULTS
    lm = make_lm("hosted_vllm/some-local-model", api_base="http://127.0.0.1:9/v1", price_per_hour=2.5)
    assert lm.price_per_hour == 2.5 and usage.is_priced(lm)
    assert describe_lm(lm)["price_per_hour"] == 2.5
    for bad in (-1, "lots", float("nan")):
        with pytest.raises(ConfigError, match="--price-per-hour"):
            make_lm("hosted_vllm/some-local-model", api_base="http://127.0.0.1:9/v1", price_per_hour=bad)


def test_stage_usage_and_compile_table_show_the_server_apart(clock):
    import io
    from types import SimpleNamespace

    from ragzoo.commands.compile import print_stages
    from ragzoo.usage import StageUsage

    lm = _lm(360.0)  # $0.10 per second
    with dspy.context(lm=lm), metering() as meter:
        before = meter.usage.snapshot()
        dspy.Predict("question -> answer")(question="q")
        clock.now += 20  # no call after this: the stage still pays for the wall time
        stage = meter.usage.minus(before)
    assert stage.server_seconds == pytest.approx(20.0) and stage.server_cost == pytest.approx(2.0)
    out = io.StringIO()
    result = SimpleNamespace(stages=[StageUsage("compile", stage, 20.0)], usage=stage)
    print_stages(result, out=out)
    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("server") and "20 s" in lines[-2] and lines[-2].endswith("2.0000")
    assert lines[-1].startswith("total cost") and lines[-1].endswith("2.0000")
