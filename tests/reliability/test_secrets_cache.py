"""DSPy's response cache is a boundary that writes too: what an upstream answered is kept on disk (diskcache's
sqlite database and value files under DSPY_CACHEDIR), so an upstream that echoes the key would get it written
there. The responses ragzoo's LMs put into the cache go through the secrets rule first; a cached answer is then
served as it was redacted, with no new request."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    """DSPy's response cache on disk in tmp_path (what DSPY_CACHEDIR gives a user), memory cache off so every
    hit is read back from disk."""
    import dspy
    from dspy.clients.cache import Cache

    folder = tmp_path / "dspy_cache"
    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=True, enable_memory_cache=False,
                                             disk_cache_dir=str(folder)))
    return folder


def test_a_key_echoed_by_the_upstream_is_not_written_to_dspy_s_cache(helpers, tmp_path, cli, monkeypatch, disk_cache):
    from ragzoo.stubserver import StubLMServer

    key = "cachedechoedsecret0123456789"  # not shaped like a provider key: only its value can be recognised
    monkeypatch.setenv("OPENAI_API_KEY", key)
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answers": ["a"]}) + "\n"
                            for i, q in enumerate(["who?", "what?"])), encoding="utf-8")
    argv = ["evaluate", "--method", "direct", "--data", data, "--lm", "openai/stub"]
    with StubLMServer(faults=helpers.echo_faults) as server:
        first = cli(*argv, "--api-base", server.base_url + "/v1", "--out", tmp_path / "run1")
        assert first.code == 0, first.err
        sent = server.requests
        assert sent >= 2
        again = cli(*argv, "--api-base", server.base_url + "/v1", "--out", tmp_path / "run2")
        assert again.code == 0, again.err
        assert server.requests == sent  # the second run was answered from the cache on disk
    assert any(path.is_file() for path in disk_cache.rglob("*"))
    assert helpers.files_holding(disk_cache, key) == []
    records = [json.loads(line) for line in (tmp_path / "run2" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["prediction"].endswith("(you sent me ***)") for r in records), records


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_both_engines_store_their_responses_redacted(helpers, engine, monkeypatch, disk_cache):
    """DSPy's native engine caches a plain record, LiteLLM's its response object (a pydantic model): both are
    stored with the key hidden, and a cache hit answers as redacted."""
    from ragzoo.lm import make_lm
    from ragzoo.stubserver import StubLMServer

    key = f"{engine}echoedsecret0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with StubLMServer(faults=helpers.echo_faults) as server:
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", engine=engine, num_retries=0)
        fresh = lm(messages=[{"role": "user", "content": f"which key, {engine}?"}])
        cached = lm(messages=[{"role": "user", "content": f"which key, {engine}?"}])
        assert server.requests == 1
    # neither the program (secrets.scrub_reply, on every call ragzoo meters) nor the cache gets the key
    assert fresh == cached == ["you sent me ***"]
    assert helpers.files_holding(disk_cache, key) == []


def test_a_response_without_secrets_is_stored_as_it_is():
    from ragzoo.endpoints import cache_safe

    record = {"outputs": [("answer", "Paris")], "usage": {"prompt_tokens": 3}}
    assert cache_safe(record) is record  # nothing copied on the common path


def test_an_async_call_gets_the_echoed_key_scrubbed_too(helpers, monkeypatch):
    """`acall` (the served program's path) returns what `__call__` would: the reply with the key as ***; a reply
    without a secret is the very object DSPy returned (no copy on the common path)."""
    import asyncio

    from ragzoo.lm import make_lm
    from ragzoo.secrets import scrub_reply
    from ragzoo.stubserver import StubLMServer

    key = "asyncechoedsecret0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with StubLMServer(faults=helpers.echo_faults) as server:
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", num_retries=0, cache=False)
        assert asyncio.run(lm.acall(messages=[{"role": "user", "content": "which key?"}])) == ["you sent me ***"]
    clean = [{"text": "Paris", "reasoning_content": None}]
    assert scrub_reply(clean) is clean
    assert scrub_reply([{"text": f"it is {key}", "logprobs": [1]}]) == [{"text": "it is ***", "logprobs": [1]}]


def test_a_reply_is_scrubbed_of_known_secrets_only_down_to_its_tool_calls(monkeypatch):
    """What the program sees loses the values of known secrets, nothing else: an answer that holds a key's shape
    inside a word ("risk-adjusted-returns" holds "sk-adjusted-returns") is scored as the model gave it (found by
    review: EM fell from 1 to 0) and written as it is (a key shape starts a word). A key inside a tool call's
    arguments (an object, not a string) is hidden too."""
    from types import SimpleNamespace

    from ragzoo.secrets import redact, scrub_reply

    key = "toolcallsecretvalue0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    answers = ["risk-adjusted-returns", {"text": "task-oriented-dialogue systems", "reasoning_content": None}]
    assert scrub_reply(answers) is answers and redact(answers[0]) == answers[0]
    shaped = ["the example key in its docs is sk-abcdefghijklmnop1234"]  # a key's shape, no known key's value
    assert scrub_reply(shaped) is shaped and redact(shaped[0]).endswith("is ***")  # masked where it is written
    assert redact(answers[1]["text"]) == answers[1]["text"] and redact("key: sk-adjusted-returns1") == "key: ***"
    call = SimpleNamespace(id="c1", function=SimpleNamespace(name="search", arguments=f'{{"q": "{key}"}}'))
    outputs = [{"text": "risk-adjusted-returns", "tool_calls": [call]}]
    scrubbed = scrub_reply(outputs)
    assert scrubbed is not outputs and scrubbed[0]["text"] == "risk-adjusted-returns"
    assert scrubbed[0]["tool_calls"][0].function.arguments == '{"q": "***"}'
    assert key in call.function.arguments  # a copy: DSPy's own objects (its history, its cache) are not changed
