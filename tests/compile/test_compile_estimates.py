"""Estimates the user can trust (issue 21): `compile --dry-run` prices what would be sent, modelling DSPy's response
cache (a repeated identical request is free) and saying what a `--no-cache` run would cost; every call count of the
compile table says how many calls the cache served; a grid prices bootstrap by its dry-run compile."""

from __future__ import annotations

import json
import uuid

import dspy
import pytest

from ragzoo.cli import main
from ragzoo.lm import make_lm
from ragzoo.usage import metering


class Ask(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def _estimate_lm():
    lm = make_lm("dry-run")
    lm.engine.start_estimate()
    return lm


def test_a_repeated_identical_request_is_counted_as_served_from_the_cache():
    lm = _estimate_lm()
    predict = dspy.Predict(Ask)
    with dspy.context(lm=lm), metering() as meter:
        first = predict(question="what is item 1?")
        again = predict(question="what is item 1?")  # identical request: DSPy's cache answers it
        predict(question="what is item 2?")
    usage = meter.usage
    assert again.answer == first.answer
    assert (usage.lm_calls, usage.cached_calls) == (3, 1)
    # the hit spends nothing; what it would have used is kept apart (the --no-cache figure)
    one = usage.prompt_tokens // 2
    assert usage.cached_prompt_tokens > 0 and abs(usage.cached_prompt_tokens - one) <= 5


def test_requests_that_bypass_the_cache_are_never_hits():
    lm = _estimate_lm()
    predict = dspy.Predict(Ask)
    with dspy.context(lm=lm), metering() as meter:
        predict(question="q")
        with dspy.context(lm=lm.copy(rollout_id=1, temperature=1.0)):  # how SIMBA and bootstrap rounds resample
            predict(question="q")
        with dspy.context(lm=lm.copy(rollout_id=2, temperature=1.0)):
            predict(question="q")
        predict(question="q", config={"cache": False})  # a call that asks for no cache
    assert (meter.usage.lm_calls, meter.usage.cached_calls) == (4, 0)
    lm.engine.start_estimate(model_cache=False)  # a --no-cache estimate: every call is priced
    with dspy.context(lm=lm), metering() as meter:
        predict(question="q")
        predict(question="q")
    assert meter.usage.cached_calls == 0 and meter.usage.lm_calls == 2


@pytest.fixture
def inputs(tmp_path):
    """A corpus, and questions whose gold answer is what the stub server and the dry-run LM both answer, so every
    trace passes the metric in both runs (the estimate's assumption) and the compiles take the same path. The
    questions carry a fresh token: no earlier test's cache entry can answer them."""
    from ragzoo.engines import placeholder_text

    corpus, data = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"Topic {i}", "text": f"Topic {i} is about {i}."})
                              + "\n" for i in range(20)))
    token = uuid.uuid4().hex[:8]
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is topic {i} about ({token})?",
                                        "answers": [placeholder_text("answer")]}) + "\n" for i in range(6)))
    return tmp_path, ["--method", "rag", "--data", str(data), "--train-n", "4", "--dev-n", "2",
                      "--optimizer", "bootstrap-rs", "--optimizer-setting", "num_candidate_programs=1",
                      "--retriever", f"bm25:{corpus}"]


def _rows(out: str) -> dict:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.split()}


def test_compile_dry_run_prices_what_the_server_receives_and_says_the_no_cache_cost(inputs, capsys):
    """bootstrap-rs validates the best candidate on the dev questions it already scored: those requests repeat.
    The estimate counts them as served from the cache, and its calls sent match what the stub server receives."""
    folder, inputs = inputs
    from ragzoo.stubserver import StubLMServer

    assert main(["compile", *inputs, "--dry-run", "--lm", "openai/gpt-4o-mini"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    calls, cached, prompt = (int(rows["total"][i]) for i in (2, 3, 4))
    assert int(rows["validation"][2]) == 2  # the dev questions were scored during the search: both from cache
    assert cached >= 2 and int(rows["validation"][3]) == 0  # ... so validation spends no tokens
    assert f"Without the cache (--no-cache): {calls} calls sent" in out
    with StubLMServer() as server:
        assert main(["compile", *inputs, "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1",
                     "--out", str(folder / "art")]) == 0
        received = server.requests
    used = _rows(capsys.readouterr().out)
    assert calls - cached == received  # the dry run prices exactly what was sent (same answers, same path)
    assert (int(used["total"][2]), int(used["total"][3])) == (calls, cached)  # the real table says it too
    assert prompt > 0
    # a --no-cache estimate prices every call
    assert main(["compile", *inputs, "--dry-run", "--lm", "openai/gpt-4o-mini", "--no-cache"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert (int(rows["total"][2]), int(rows["total"][3])) == (calls, 0) and int(rows["total"][4]) > prompt


def test_the_compile_table_says_how_many_calls_the_cache_served(inputs, capsys):
    """A rerun of a finished compile is answered from DSPy's cache: the table says so for every stage instead of
    'N calls, 0 tokens' without explanation, and the server receives nothing."""
    folder, inputs = inputs
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        common = [*inputs, "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1"]
        assert main(["compile", *common, "--out", str(folder / "a")]) == 0
        capsys.readouterr()
        first = server.requests
        assert main(["compile", *common, "--out", str(folder / "b")]) == 0
        assert server.requests == first
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["compile"][1] == rows["compile"][2] != "0"  # every compile call from the cache
    assert rows["validation"][1] == rows["validation"][2] == "2"
    assert rows["total"][2] == rows["total"][3] and rows["total"][4] == "0"
    assert f"{rows['total'][3]} of {rows['total'][2]} LM calls were served from the response cache" in out


def test_a_grid_prices_bootstrap_by_its_dry_run_compile_not_an_upper_bound(tmp_path):
    """Bootstrap stops once it has its demos: under the dry-run LM (every trace passes) that is 3 training
    questions, then the validation questions. The old bound, (train_n + dev_n) runs of the program, was ~10x."""
    from ragzoo.grid.price import price_grid
    from ragzoo.grid.spec import parse_grid

    grid = parse_grid({"grid": {"name": "t", "n": 4, "lms": ["dry-run"]},
                       "compile": {"optimizers": ["bootstrap"], "train_n": 10, "dev_n": 4},
                       "datasets": [{"name": "hotpotqa", "split": "dev_first500"}], "methods": [{"id": "direct"}]})
    (price,) = [p for p in price_grid(grid, sample=2) if p.cell.optimizer == "bootstrap"]
    assert price.per_question.calls == 1  # direct: one call a question
    assert price.compile.calls == 3 + 4  # 3 demos bootstrapped, then 4 validation questions; not (10 + 4)
