"""`ragzoo evaluate --program ARTIFACT` runs the program under the adapter it was compiled with (its demos and
instructions were chosen in that format) unless --adapter is given; an explicit --adapter that differs wins, with
the warning. The upstream is the loopback stub server; its responder notes the format of every prompt it gets."""

from __future__ import annotations

import json

import pytest

import ragzoo
from ragzoo import programs
from ragzoo.cli import main
from ragzoo.stubserver import StubLMServer, adapter_responder, prompt_style

EVAL = ["evaluate", "--dataset", "hotpotqa", "--split", "dev_distractor", "-n", "2", "--lm", "openai/stub",
        "--no-cache"]


@pytest.fixture
def json_artifact(tmp_path):
    return ragzoo.save(programs.get("direct"), tmp_path / "art-json", method="direct", adapter="json", max_reasks=1)


def _evaluate(artifact, out, monkeypatch, capsys, *flags) -> tuple[int, list[str], str]:
    """(exit code, the format of each prompt the LM got, stderr)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")
    import ragzoo.adapters

    monkeypatch.setattr(ragzoo.adapters, "_warned", set())  # the warning is said once per process
    styles: list[str] = []

    def noting(messages, body=None):
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        styles.append(prompt_style(system))
        return adapter_responder(messages, body)

    capsys.readouterr()
    with StubLMServer(responder=noting) as server:
        code = main([*EVAL, "--program", str(artifact), "--api-base", server.base_url + "/v1", "--out", str(out),
                     *flags])
    return code, styles, capsys.readouterr().err


def test_without_adapter_the_artifacts_recorded_adapter_is_followed(json_artifact, tmp_path, monkeypatch, capsys):
    code, styles, err = _evaluate(json_artifact, tmp_path / "run", monkeypatch, capsys)
    assert code == 0, err
    assert styles and set(styles) == {"json"}, styles
    assert "warning" not in err.lower(), err
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["adapter"] == "json" and config["max_reasks"] == 1  # the run records what it ran under


def test_an_explicit_adapter_wins_with_the_warning(json_artifact, tmp_path, monkeypatch, capsys):
    code, styles, err = _evaluate(json_artifact, tmp_path / "run", monkeypatch, capsys, "--adapter", "chat")
    assert code == 0, err
    assert styles and set(styles) == {"chat"}, styles
    assert "compiled under the json adapter" in err and "--adapter json" in err, err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["adapter"] == "chat"


def test_an_adapter_from_a_config_file_is_explicit_too(json_artifact, tmp_path, monkeypatch, capsys):
    settings = tmp_path / "settings.toml"
    settings.write_text('adapter = "xml"\n')
    code, styles, err = _evaluate(json_artifact, tmp_path / "run", monkeypatch, capsys, "--config", str(settings))
    assert code == 0, err
    assert styles and set(styles) == {"xml"}, styles
    assert "compiled under the json adapter" in err, err


@pytest.mark.parametrize("recorded", ["zzz", 5])
@pytest.mark.parametrize("explicit", [[], ["--adapter", "chat"]])
def test_an_adapter_this_ragzoo_cannot_build_is_refused_as_load_refuses_it(json_artifact, tmp_path, capsys,
                                                                          recorded, explicit):
    """An edited manifest's adapter: `ragzoo.load` refused it, the CLI ran the program anyway and advised
    `--adapter zzz`, a value the flag does not take (found by review); now one line, before any question."""
    manifest = json.loads((json_artifact / "manifest.json").read_text())
    manifest["adapter"] = recorded
    (json_artifact / "manifest.json").write_text(json.dumps(manifest))
    code = main(["evaluate", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run", "--program", str(json_artifact),
                 "--out", str(tmp_path / "run"), *explicit])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "records an adapter this ragzoo cannot build" in err, err
    assert not (tmp_path / "run").exists()


def test_a_dspy_minor_version_apart_is_one_warning_line(json_artifact, tmp_path, capsys):
    """An artifact compiled under another DSPy minor version loads, and the CLI says so in one line (it was
    Python's two lines, the second the source line that warned)."""
    from ragzoo.artifacts import package_versions

    current = package_versions()["dspy"]
    major, minor = current.split(".")[:2]
    older = f"{major}.{int(minor) + 1}.0"
    manifest = json.loads((json_artifact / "manifest.json").read_text())
    manifest["package_versions"]["dspy"] = older
    (json_artifact / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["ask", "--program", str(json_artifact), "--lm", "dry-run", "who directed Ed Wood?"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if f"compiled with DSPy {older}" in line]
    assert len(said) == 1 and said[0].startswith("ragzoo ask: warning: ") and "warnings.warn" not in err, err
