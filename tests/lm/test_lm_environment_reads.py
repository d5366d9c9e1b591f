"""What ragzoo derives from the environment on every LM call or record (the proxy variables DSPy's HTTP client
consults before each request, the secret values every record is scrubbed of) is read again only when the
environment changed: decoding every variable per call cost ~6% of ragzoo's CPU per LM call, and as much again
per record. A change is still seen at the next call."""

from __future__ import annotations

import os

import pytest

from ragzoo import secrets
from ragzoo.lm import _memoize_env_proxies, make_lm


@pytest.fixture
def environ_reads(monkeypatch):
    """How many times the whole environment was walked (each walk decodes every variable)."""
    reads = [0]
    real = os._Environ.__iter__

    def counted(self):
        reads[0] += 1
        return real(self)

    monkeypatch.setattr(os._Environ, "__iter__", counted)
    return reads


def test_proxy_variables_are_read_again_only_when_the_environment_changes(monkeypatch, environ_reads):
    from dspy._vendor.lm15.transports._proxy import ProxyRoute, proxy_route_for
    from dspy._vendor.lm15.transports._url import parse_url

    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)  # installs the memo, as any LM does
    assert _memoize_env_proxies()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    target = parse_url("http://127.0.0.1:8000/v1/chat/completions")

    assert proxy_route_for(target, proxy=None, trust_env=True) is None
    before = environ_reads[0]
    for _ in range(50):
        assert proxy_route_for(target, proxy=None, trust_env=True) is None
    assert environ_reads[0] == before  # not one walk of the environment for 50 requests

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")  # seen by the very next request
    assert proxy_route_for(target, proxy=None, trust_env=True) == ProxyRoute("127.0.0.1", 3128)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert proxy_route_for(target, proxy=None, trust_env=True) is None
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3129")
    assert proxy_route_for(target, proxy=None, trust_env=True) == ProxyRoute("127.0.0.1", 3129)
    monkeypatch.delenv("HTTP_PROXY")
    assert proxy_route_for(target, proxy=None, trust_env=True) is None


def test_records_are_scrubbed_without_walking_the_environment_each_time(monkeypatch, environ_reads):
    key = "sk-" + "k3y" * 8
    monkeypatch.setenv("RAGZOO_TEST_API_KEY", "not-a-shape-" + "9" * 12)
    record = {"id": "q1", "prediction": "the key is not-a-shape-999999999999", "error": None}
    assert secrets.scrub(record)["prediction"] == "the key is ***"
    before = environ_reads[0]
    for _ in range(50):
        assert secrets.scrub(record)["prediction"] == "the key is ***"
    assert environ_reads[0] == before

    monkeypatch.setenv("RAGZOO_OTHER_TOKEN", "fresh-value-1234")  # a secret set mid-run: hidden at once
    assert secrets.redact("fresh-value-1234 and " + key) == "*** and ***"
    monkeypatch.setenv("RAGZOO_OTHER_TOKEN", "changed-value-5678")  # a changed value too
    assert secrets.redact("changed-value-5678") == "***"
    secrets.register_secret("registered-credential-42")  # and a credential met at run time
    assert secrets.redact("x registered-credential-42 x") == "x *** x"


def test_without_raw_items_to_compare_every_call_computes(monkeypatch):
    calls = []
    memo = secrets.environ_memo(lambda: calls.append(1) or len(calls))
    assert memo() == 1 and memo() == 1
    monkeypatch.setattr(os, "environ", dict(os.environ))  # a plain mapping: nothing to tell a change by
    assert memo() == 2 and memo() == 3
