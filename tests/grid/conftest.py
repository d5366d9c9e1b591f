"""Helpers for grid tests: a tiny grid file, a subprocess `ragzoo` with the test environment, a stub LM server
that records which question each request was about."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

TINY = """
[grid]
name = "tiny"
n = {n}
lms = [{lms}]
scale = 100
main = "rag"

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em", "f1"]
label = "HotPotQA"

[[methods]]
id = "direct"
label = "Direct"
paper = {{ HotPotQA = {{ em = 30.4, f1 = 41.0 }} }}

[[methods]]
id = "rag"
label = "RAG"
knobs = {{ k = 2 }}
paper = {{ HotPotQA = {{ em = 41.2, f1 = 53.7 }} }}

[[methods]]
id = "future_method"
label = "Future"
paper = {{ HotPotQA = {{ em = 36.0, f1 = 47.5 }} }}
"""


def write_tiny(path: Path, n: int = 3, lms: str = '"dry-run"') -> Path:
    path.write_text(TINY.format(n=n, lms=lms), encoding="utf-8")
    return path


def stub_lms(server) -> str:
    return f'{{ spec = "openai/stub", api_base = "{server.base_url}/v1", cache = false }}'


class QuestionLog:
    """A stub responder that counts requests per question (the question is the last 'question' field of the
    user message) and answers like the default adapter responder."""

    def __init__(self):
        from ragzoo.stubserver import adapter_responder

        self._answer = adapter_responder
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, messages, body=None):
        with self.lock:
            self.count += 1
        return self._answer(messages, body)


@pytest.fixture
def stub_server():
    from ragzoo.stubserver import StubLMServer

    log = QuestionLog()
    with StubLMServer(log) as server:
        server.question_log = log
        yield server


@pytest.fixture
def grid_env(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    env = dict(os.environ)
    env["OPENAI_API_KEY"] = "stub"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def ragzoo_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ragzoo.cli", *args]
