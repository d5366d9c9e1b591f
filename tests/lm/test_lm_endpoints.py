"""Endpoints (issue 14): one concurrency limit per endpoint shared by all threads, 429 + Retry-After, the
endpoint in the cache key, cached calls counted with their tokens, prices for unpriced models, pre-flight."""

from __future__ import annotations

import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from ragzoo.endpoints import endpoint_of, limiter, preflight
from ragzoo.errors import ConfigError, LMError
from ragzoo.lm import make_lm
from ragzoo.stubserver import StubLMServer
from ragzoo.tracing import trace_example
from ragzoo.usage import metering


def _call(lm, question):
    with dspy.context(lm=lm):
        return dspy.Predict("question -> answer")(question=question).answer


def test_sixteen_threads_share_four_slots_and_lose_nothing():
    latency, calls = 0.25, 48  # a latency well above per-request CPU, so a loaded CI machine measures the limit
    with StubLMServer(latency=latency, capacity=4, capacity_retry_after=0.05) as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, max_concurrency=4)
        _call(lm, "warm-up")  # the first call of a process sets up the client: not part of the throughput
        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda i: _call(lm, f"q{i}"), range(calls)))
        seconds = time.perf_counter() - started
    capacity = 4 / latency  # requests per second the stub can serve
    assert len(answers) == calls and all(answers) and server.requests == calls + 1  # nothing lost
    assert server.rejected == 0 and server.max_in_flight == 4  # the limit held across threads, no 429 provoked
    assert calls / seconds >= 0.8 * capacity, f"{calls / seconds:.1f}/s vs capacity {capacity:.0f}/s"
    assert limiter(endpoint_of(lm)).max_in_flight <= 4


def test_a_second_lm_of_the_same_endpoint_shares_the_limit():
    with StubLMServer(latency=0.05) as server:
        first = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, max_concurrency=2)
        second = make_lm("openai/other-model", api_base=server.base_url + "/v1/", cache=False, max_concurrency=2)
        assert endpoint_of(first) == endpoint_of(second)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: _call(first if i % 2 else second, f"q{i}"), range(16)))
    assert server.max_in_flight == 2


def test_429_beyond_capacity_is_retried_after_retry_after_and_nothing_is_lost():
    with StubLMServer(latency=0.05, capacity=2, capacity_retry_after=0.05) as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, max_concurrency=8,
                     num_retries=10)
        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: _call(lm, f"q{i}"), range(16)))
        seconds = time.perf_counter() - started
    assert len(answers) == 16 and all(answers) and server.rejected > 0
    assert seconds < 5  # backed off by Retry-After (0.05 s), not DSPy's exponential 1 s, 2 s, 4 s ...


def test_the_endpoint_is_part_of_the_cache_key():
    question = f"which server? {uuid.uuid4().hex}"
    with StubLMServer("[[ ## answer ## ]]\nfirst\n\n[[ ## completed ## ]]") as one, \
            StubLMServer("[[ ## answer ## ]]\nsecond\n\n[[ ## completed ## ]]") as two:
        first = _call(make_lm("openai/same-name", api_base=one.base_url + "/v1", cache=True), question)
        second = _call(make_lm("openai/same-name", api_base=two.base_url + "/v1", cache=True), question)
        again = _call(make_lm("openai/same-name", api_base=two.base_url + "/v1", cache=True), question)
    assert (first, second, again) == ("first", "second", "second")
    assert one.requests == 1 and two.requests == 1  # the third call was a cache hit of the second server


def test_cached_calls_keep_their_tokens_apart_from_the_spend():
    question = f"cached? {uuid.uuid4().hex}"
    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=True, price="1,2")
        with trace_example() as first:
            _call(lm, question)
        with trace_example() as second:
            _call(lm, question)
    miss, hit = first.lm_calls[0], second.lm_calls[0]
    assert not miss.cached and miss.prompt_tokens > 0 and miss.cost > 0
    assert hit.cached and hit.prompt_tokens == 0 and hit.cost == 0  # spent nothing
    assert hit.cached_prompt_tokens == pytest.approx(miss.prompt_tokens, rel=0.2)  # ... but counted as if uncached
    assert hit.cached_cost == pytest.approx(miss.cost, rel=0.3)
    assert lm.usage.cached_calls == 1 and lm.usage.cached_prompt_tokens == hit.cached_prompt_tokens


def test_a_cost_budget_needs_a_price():
    with StubLMServer() as server:
        unpriced = make_lm("openai/my-local-model", api_base=server.base_url + "/v1", cache=False)
        with dspy.context(lm=unpriced), pytest.raises(ConfigError, match="--price"):
            with metering(max_cost=1.0):
                pass
        priced = make_lm("openai/my-local-model", api_base=server.base_url + "/v1", cache=False, price="100,100")
        with dspy.context(lm=priced), metering(max_cost=1e-9) as meter:
            with pytest.raises(Exception, match="max-cost"):
                _call(priced, "q1")  # priced, it could cost more than the budget: refused before it is sent
    assert meter.usage.cost == 0 and server.requests == 0
    with pytest.raises(ConfigError, match="--price"):
        make_lm("openai/x", api_base="http://127.0.0.1:9/v1", price="cheap")


def test_preflight_says_in_one_line_what_is_wrong(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = make_lm("openai/stub-model", api_base=f"http://127.0.0.1:{port}/v1")
    started = time.perf_counter()
    with pytest.raises(LMError, match="cannot reach the LM server") as error:
        preflight(down)
    assert "\n" not in str(error.value) and time.perf_counter() - started < 5
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LMError, match="OPENAI_API_KEY is not set"):
        preflight(make_lm("openai/gpt-4o-mini"))
    with StubLMServer() as server:
        preflight(make_lm("openai/stub-model", api_base=server.base_url + "/v1"))
    assert server.models_requests == 1 and server.requests == 0
    preflight(make_lm("dry-run"))  # nothing to check


def test_a_hung_request_ends_at_the_per_call_timeout():
    with StubLMServer(faults=["hang"]) as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, timeout=0.5, num_retries=1)
        started = time.perf_counter()
        answer = _call(lm, "q")  # the hung first request times out; DSPy's retry is answered
        seconds = time.perf_counter() - started
    assert answer and server.requests == 2 and seconds < 4


def test_concurrent_price_lookups_leave_stdout_alone():
    """LiteLLM's lookup of an unknown model prints; ragzoo hides that with redirect_stdout, which swaps the
    process-wide sys.stdout: two threads doing it at once used to leave every later print in a StringIO."""
    import sys

    from ragzoo.usage import _price_lookup

    before = sys.stdout
    names = [f"openai/unpriced-{uuid.uuid4().hex[:8]}-{i}" for i in range(32)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(_price_lookup, names))
    assert sys.stdout is before


def test_an_lm_built_without_a_limit_keeps_the_endpoint_s_limit_in_force():
    """Review: a second LM of the same endpoint built without max_concurrency (a judge, another temperature) set
    the endpoint's limit back to the default 8: the first LM's `max_concurrency=2` ran 8 requests at once."""
    from ragzoo.endpoints import limiter
    from ragzoo.lm import make_lm

    base = "http://127.0.0.1:9/only-this-test/v1"  # never contacted: building an LM sends nothing
    first = make_lm("openai/stub-model", api_base=base, max_concurrency=2)
    second = make_lm("openai/stub-model", api_base=base, temperature=0.5)
    assert limiter(first.endpoint).limit == 2 and first.max_concurrency == second.max_concurrency == 2
    third = make_lm("openai/stub-model", api_base=base, max_concurrency=5)  # asked for: it is the limit now
    assert limiter(first.endpoint).limit == 5 and third.max_concurrency == 5
    fresh = make_lm("openai/stub-model", api_base="http://127.0.0.1:9/another-endpoint/v1")
    assert fresh.max_concurrency == 8  # the default, where none is in force
