"""Ctrl-C says exactly what was kept: a compile saves nothing until it finishes, an evaluation keeps every
finished question (issue 14: compile used to say "finished work is kept" when nothing was)."""

from __future__ import annotations

import pytest

from ragzoo.cli import main


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_interrupted_compile_says_nothing_was_saved(tmp_path, capsys, monkeypatch):
    import ragzoo.optimizers

    monkeypatch.setattr(ragzoo.optimizers, "compile_program", _interrupt, raising=False)
    out = tmp_path / "art"
    code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--lm", "dry-run", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and not out.exists()
    assert err[-1].startswith("ragzoo compile: interrupted; nothing was saved")
    assert not any("finished work is kept" in line for line in err)


@pytest.mark.parametrize("command, kept", [("evaluate", "is in --out/predictions.jsonl"),
                                           ("ask", "nothing was written")])
def test_other_commands_say_what_they_keep(tmp_path, capsys, monkeypatch, command, kept):
    import ragzoo.runs

    monkeypatch.setattr(ragzoo.runs, "evaluate", _interrupt)
    monkeypatch.setattr("ragzoo.programs.get", _interrupt)
    argv = {"evaluate": ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run",
                         "--out", str(tmp_path / "run")],
            "ask": ["ask", "--method", "direct", "--lm", "dry-run", "who?"]}[command]
    assert main(argv) == 130
    assert kept in capsys.readouterr().err
