"""`ragzoo ask --program ARTIFACT "..."` as the README pastes it (issue 21): no --lm, so the LM the artifact
was compiled with answers (its api base too; the key from the environment), and one line says which."""

from __future__ import annotations

import json

import pytest

from ragzoo.cli import main
from ragzoo.stubserver import StubLMServer

QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


def _compile(out, *extra):
    return main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--optimizer", "labeled",
                 "--train-n", "4", "--dev-n", "0", "--out", str(out), *extra])


def test_ask_answers_with_the_lm_and_api_base_recorded_in_the_artifact(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with StubLMServer() as server:
        base = server.base_url + "/v1"
        assert _compile(tmp_path / "art", "--lm", "openai/stub-model", "--api-base", base, "--no-cache") == 0
        before = server.requests
        capsys.readouterr()
        code = main(["ask", "--program", str(tmp_path / "art"), QUESTION])
        out, err = capsys.readouterr()
        asked = server.requests - before
    assert code == 0, err
    assert asked >= 1  # the recorded server answered
    assert "answer:" in out and "(failed)" not in out
    said = [line for line in err.splitlines() if "openai/stub-model" in line]
    assert len(said) == 1 and base in said[0] and "recorded" in said[0]


def test_a_flag_still_wins_over_the_recorded_lm(tmp_path, monkeypatch, capsys):
    with StubLMServer() as server:
        assert _compile(tmp_path / "art", "--lm", "openai/stub-model", "--api-base",
                        server.base_url + "/v1", "--no-cache") == 0
    capsys.readouterr()
    code = main(["ask", "--program", str(tmp_path / "art"), "--lm", "dry-run", "--json", QUESTION])
    out, err = capsys.readouterr()
    assert code == 0 and "recorded" not in err  # the recorded server is gone; the flag's dry-run answered
    assert json.loads(out)["lm_calls"]


def test_a_recorded_provider_without_its_key_is_one_line(tmp_path, monkeypatch, capsys):
    assert _compile(tmp_path / "art", "--lm", "dry-run") == 0
    manifest_path = tmp_path / "art" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["lm"] = {**manifest["lm"], "model": "openai/gpt-4o-mini", "dry_run": False}
    manifest["config"] = {**manifest["config"], "lm": "openai/gpt-4o-mini", "api_base": None}
    manifest_path.write_text(json.dumps(manifest))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    capsys.readouterr()
    code = main(["ask", "--program", str(tmp_path / "art"), QUESTION])
    out, err = capsys.readouterr()
    assert code != 0 and "Traceback" not in err
    assert "OPENAI_API_KEY" in err and "openai/gpt-4o-mini" in err


@pytest.mark.parametrize("recorded", ["dry-run"])
def test_ask_runs_a_dry_run_artifact_as_recorded(tmp_path, capsys, recorded):
    assert _compile(tmp_path / "art", "--lm", recorded) == 0
    capsys.readouterr()
    code = main(["ask", "--program", str(tmp_path / "art"), "--json", QUESTION])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["lm_calls"] and "dry-run" in err


@pytest.mark.parametrize("server", ["http://203.0.113.7:8000/v1", "https://models.example.org/v1"])
def test_a_recorded_server_off_this_machine_is_refused_before_any_request(tmp_path, monkeypatch, capsys, server):
    """An artifact is untrusted input: the server it names would get the question and the key in the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-own-key-1234567890")
    with StubLMServer() as stub:
        assert _compile(tmp_path / "art", "--lm", "openai/stub-model", "--api-base", stub.base_url + "/v1",
                        "--no-cache") == 0
        manifest_path = tmp_path / "art" / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest["config"] = {**manifest["config"], "api_base": server}
        manifest_path.write_text(json.dumps(manifest))
        before = stub.requests
        capsys.readouterr()
        code = main(["ask", "--program", str(tmp_path / "art"), QUESTION])
        out, err = capsys.readouterr()
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert server in err and "--api-base" in err and "sk-user" not in err
        # naming the server yourself is the statement of trust: the stub (standing in for it) answers
        code = main(["ask", "--program", str(tmp_path / "art"), "--api-base", stub.base_url + "/v1", QUESTION])
        assert code == 0 and stub.requests > before


def test_a_recorded_api_base_that_is_not_text_is_one_line(tmp_path, capsys):
    assert _compile(tmp_path / "art", "--lm", "dry-run") == 0
    manifest_path = tmp_path / "art" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["config"] = {**manifest["config"], "lm": "openai/stub-model", "api_base": 5}
    manifest_path.write_text(json.dumps(manifest))
    capsys.readouterr()
    code = main(["ask", "--program", str(tmp_path / "art"), QUESTION])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "api_base" in err
