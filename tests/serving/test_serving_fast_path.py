"""What `ragzoo.serving` does to keep a served question cheap, checked for sameness: the memoised price lookup
returns DSPy's values, a question answered without a meter gets the same answer, trace and usage as with one,
a budget or an untracked LM still gets its meter, and `lm_max_concurrency` sets the endpoint's limit."""

from __future__ import annotations

import pytest

from ragzoo.stubserver import StubLMServer

QUESTIONS = ["Who directed the film Ed Wood?", "Which river flows through Paris?", "When was the Eiffel tower built?"]


def _without_clocks(result: dict) -> dict:
    for call in result["trace"]["lm_calls"] + result["trace"]["retrievals"]:
        call["latency"] = 0
    result["usage"]["latency"] = 0
    return result


def test_memoised_price_lookup_returns_dspys_values_as_copies():
    from dspy.clients import costs

    from ragzoo.usage import memoize_price_metadata

    assert memoize_price_metadata() and memoize_price_metadata()  # idempotent
    original = costs.model_info.__wrapped__
    for provider, model in [("openai-chat", "gpt-4o-mini"), ("openai-chat", "stub"), ("anthropic", "nope"),
                            ("vllm", "llama-3")]:
        assert costs.model_info(provider, model) == original(provider, model)
    assert costs.model_info("openai-chat", "gpt-4o-mini", namespaces=("openai",)) == \
        original("openai-chat", "gpt-4o-mini", namespaces=("openai",))
    assert costs.model_info("openai-chat", "gpt-4o-mini", namespaces=()) == {}
    first = costs.model_info("openai-chat", "gpt-4o-mini")
    assert first.get("input_cost_per_token")
    first["input_cost_per_token"] = -1.0  # a caller's change must not leak into the memo
    assert costs.model_info("openai-chat", "gpt-4o-mini")["input_cost_per_token"] > 0


@pytest.mark.parametrize("model", ["openai/stub", "openai/gpt-4o-mini"])
def test_no_meter_same_answer_trace_and_usage(artifact, monkeypatch, model):
    import ragzoo
    from ragzoo.lm import make_lm
    from ragzoo.serving import ProgramService

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer() as server:
        lm = make_lm(model, api_base=server.base_url + "/v1", cache=False)
        fast = ProgramService(ragzoo.load(artifact), lm, method="rag")
        metered = ProgramService(ragzoo.load(artifact), lm, method="rag")
        metered._meter = True
        assert fast._meter is False
        answers = [(_without_clocks(fast.answer(q)), _without_clocks(metered.answer(q))) for q in QUESTIONS]
        assert server.requests == 2 * len(QUESTIONS)
    for quick, slow in answers:
        assert quick == slow
        assert quick["usage"]["lm_calls"] == 1 and quick["usage"]["prompt_tokens"] > 0
        assert quick["trace"]["lm_calls"][0]["predictor"] == slow["trace"]["lm_calls"][0]["predictor"]
    if model.endswith("gpt-4o-mini"):
        assert answers[0][0]["usage"]["cost"] > 0  # priced through the memoised lookup


def test_budgets_and_untracked_lms_keep_the_meter(artifact, monkeypatch):
    import dspy

    import ragzoo
    from ragzoo.lm import make_lm
    from ragzoo.serving import ProgramService

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer() as server:
        tracked = make_lm("openai/stub", api_base=server.base_url + "/v1", cache=False)
        assert ProgramService(ragzoo.load(artifact), tracked, max_calls=5)._meter is True
        assert ProgramService(ragzoo.load(artifact), tracked, max_cost=1.0, memoize_prices=False)._meter is True
        plain = dspy.LM("openai/stub", api_base=server.base_url + "/v1", api_key="stub", cache=False)
        untracked = ProgramService(ragzoo.load(artifact), plain)
        assert untracked._meter is True
        result = untracked.answer(QUESTIONS[0])  # its calls are seen only through the meter's callback
    assert result["usage"]["lm_calls"] == 1 and result["trace"]["lm_calls"][0]["prompt_tokens"] > 0


def test_lm_max_concurrency_sets_the_endpoint_limit(artifact, monkeypatch):
    import ragzoo
    from ragzoo.endpoints import endpoint_of, limiter
    from ragzoo.lm import make_lm
    from ragzoo.serving import ProgramService

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer() as server:  # a fresh port: a limiter no other test shares
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", cache=False)
        gate = limiter(endpoint_of(lm))
        assert gate.limit == 8  # make_lm's default
        ProgramService(ragzoo.load(artifact), lm)
        assert gate.limit == 8  # left alone by default
        ProgramService(ragzoo.load(artifact), lm, max_concurrency=32, lm_max_concurrency=32)
        assert gate.limit == 32
