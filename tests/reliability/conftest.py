"""Shared fixtures of the reliability suite: questions and corpus files, a fast DSPy back-off, the CLI runner,
and a deterministic stub responder whose answers depend on the prompt (so threads cannot hide a mix-up)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys):
    """Run `ragzoo ARGV` in-process; argparse's SystemExit becomes an exit code."""
    from ragzoo.cli import main

    def run(*argv: str) -> CliResult:
        capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def write_questions(path: Path, n: int, prefix: str = "q") -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({"id": f"{prefix}{i}", "question": f"what is item {i}?",
                                     "answers": [f"answer {i}"]}) + "\n")
    return path


@pytest.fixture
def questions_file(tmp_path):
    return lambda n, name="questions.jsonl": write_questions(tmp_path / name, n)


TOPICS = ["river", "mountain", "castle", "violin", "comet", "harbor", "glacier", "orchard", "lantern", "falcon"]


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """40 passages, each about one numbered item, so bm25 finds different passages per question."""
    path = tmp_path_factory.mktemp("corpus") / "small_corpus.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(40):
            topic = TOPICS[i % len(TOPICS)]
            handle.write(json.dumps({"id": f"p{i}", "title": f"Item {i}",
                                     "text": f"Item {i} is a {topic} numbered {i}. The answer {i} concerns {topic}."})
                         + "\n")
    return path


def digest_responder(messages, body=None) -> str:
    """Type-valid answers (as the stub's default responder), but every free-text field carries a digest of the
    last user message: the answer depends on the question and the passages the program saw."""
    from ragzoo.stubserver import _content, adapter_answer

    system = next((_content(m) for m in messages if m.get("role") in ("system", "developer")), "")
    user = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
    tag = hashlib.sha256(user.encode("utf-8")).hexdigest()[:10]
    values = adapter_answer(system)
    for name, value in values.items():
        if isinstance(value, str) and not value.lower() in ("true", "false", "yes", "no", "unknown"):
            values[name] = f"{name} {tag}"
    if "[[ ## completed ## ]]" in system:
        parts = []
        for name, value in values.items():
            rendered = value if isinstance(value, str) else json.dumps(value) if not isinstance(value, bool) else str(value)
            parts.append(f"[[ ## {name} ## ]]\n{rendered}")
        return "\n\n".join(parts) + "\n\n[[ ## completed ## ]]"
    return json.dumps(values)


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.setdefault("OPENAI_API_KEY", "stub")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


PYTHON = sys.executable


def files_holding(folder: Path, secret: str) -> list[str]:
    """Every file under `folder` whose bytes contain `secret` (text or not: a sqlite database counts too)."""
    needle = secret.encode()
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and needle in path.read_bytes())


def echo_faults(index, body):
    """A StubLMServer `faults` hook: every answer repeats the key its request was sent with (the stub's "echo")."""
    return "echo"


def read_jsonl_strict(path: Path) -> list[dict]:
    """Every line must be a complete JSON object (the test of 'no file left corrupt')."""
    raw = path.read_text(encoding="utf-8")
    assert raw == "" or raw.endswith("\n"), f"{path} ends with a torn line"
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


@pytest.fixture
def helpers():
    """The module-level helpers above, for test modules (conftest is not importable under importlib mode)."""
    from types import SimpleNamespace

    return SimpleNamespace(PYTHON=PYTHON, read_jsonl_strict=read_jsonl_strict, subprocess_env=subprocess_env,
                           write_questions=write_questions, digest_responder=digest_responder,
                           files_holding=files_holding, echo_faults=echo_faults)
