"""`ragzoo ask --program ARTIFACT --lm Y` runs the program under the adapter (and re-asks) it was compiled with, as
`evaluate --program` does, unless --adapter is given (flag or --config file); an explicit --adapter that differs
wins, said in one clean line on stderr, never as a Python warning. The upstream is the loopback stub server; its
responder notes the format of every prompt it gets (as tests/commands/test_evaluate_artifact_adapter.py)."""

from __future__ import annotations

import warnings

import pytest

import ragzoo
from ragzoo import programs
from ragzoo.cli import main
from ragzoo.stubserver import StubLMServer, adapter_responder, prompt_style

QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


@pytest.fixture
def json_artifact(tmp_path):
    return ragzoo.save(programs.get("direct"), tmp_path / "art-json", method="direct", adapter="json", max_reasks=1)


def _run(command, artifact, monkeypatch, capsys, *flags, unreadable=False):
    """(exit code, the format of each prompt the LM got, stderr, the Python warnings raised). `unreadable`: every
    reply is one no adapter can read, so the requests count the re-asks."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")
    styles: list[str] = []

    def noting(messages, body=None):
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        styles.append(prompt_style(system))
        return "no fields here" if unreadable else adapter_responder(messages, body)

    capsys.readouterr()
    with StubLMServer(responder=noting) as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main([*command, "--program", str(artifact), "--lm", "openai/stub-model", "--api-base",
                     server.base_url + "/v1", "--no-cache", *flags])
    said = [str(w.message) for w in caught if "adapter" in str(w.message)]
    return code, styles, capsys.readouterr().err, said


def _ask(artifact, monkeypatch, capsys, *flags, unreadable=False):
    return _run(["ask", QUESTION], artifact, monkeypatch, capsys, *flags, unreadable=unreadable)


def test_ask_follows_the_artifacts_recorded_adapter(json_artifact, monkeypatch, capsys):
    code, styles, err, python_warnings = _ask(json_artifact, monkeypatch, capsys)
    assert code == 0, err
    assert styles and set(styles) == {"json"}, styles
    assert "warning" not in err.lower() and not python_warnings, (err, python_warnings)


def test_ask_follows_the_artifacts_recorded_reasks(json_artifact, monkeypatch, capsys):
    _, styles, err, _ = _ask(json_artifact, monkeypatch, capsys, unreadable=True)
    assert len(styles) == 2, (styles, err)  # the first request and the artifact's one re-ask (default: 2)
    _, styles, err, _ = _ask(json_artifact, monkeypatch, capsys, "--max-reasks", "0", unreadable=True)
    assert len(styles) == 1, (styles, err)  # an explicit --max-reasks wins


def test_an_explicit_adapter_wins_with_one_clean_line(json_artifact, monkeypatch, capsys):
    code, styles, err, python_warnings = _ask(json_artifact, monkeypatch, capsys, "--adapter", "chat")
    assert code == 0, err
    assert styles and set(styles) == {"chat"}, styles
    said = [line for line in err.splitlines() if "adapter" in line]
    assert len(said) == 1 and said[0].startswith("ragzoo ask: warning:"), err
    assert "compiled under the json adapter" in said[0] and "--adapter json" in said[0], err
    assert not python_warnings, python_warnings


def test_an_adapter_from_a_config_file_is_explicit_too(json_artifact, tmp_path, monkeypatch, capsys):
    settings = tmp_path / "settings.toml"
    settings.write_text('adapter = "xml"\n')
    code, styles, err, python_warnings = _ask(json_artifact, monkeypatch, capsys, "--config", str(settings))
    assert code == 0, err
    assert styles and set(styles) == {"xml"}, styles
    assert "compiled under the json adapter" in err and not python_warnings, (err, python_warnings)


def test_the_same_adapter_given_explicitly_says_nothing(json_artifact, monkeypatch, capsys):
    code, styles, err, python_warnings = _ask(json_artifact, monkeypatch, capsys, "--adapter", "json")
    assert code == 0, err
    assert set(styles) == {"json"} and "warning" not in err.lower() and not python_warnings, err


def test_evaluate_says_the_mismatch_in_one_clean_line_too(json_artifact, tmp_path, monkeypatch, capsys):
    code, styles, err, python_warnings = _run(
        ["evaluate", "--dataset", "hotpotqa", "--split", "dev_distractor", "-n", "1", "--out", str(tmp_path / "run")],
        json_artifact, monkeypatch, capsys, "--adapter", "chat")
    assert code == 0, err
    assert set(styles) == {"chat"}, styles
    assert "compiled under the json adapter" in err and not python_warnings, (err, python_warnings)
