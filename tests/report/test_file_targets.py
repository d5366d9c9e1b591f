"""Single files a command writes (`report --plot`, `report --html`, a grid's `--plot`) follow the ownership rule
of folders: a file is replaced only if this command wrote it; a user's file of the same name is left byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragzoo.cli import main


def _run(path: Path, em: list[float]) -> str:
    path.mkdir(parents=True)
    config = {"method": "rag", "knobs": {}, "metrics": ["em"], "n": len(em), "dataset": "hotpotqa", "split": "dev",
              "lm": {"model": "openai/stub", "dry_run": False}}
    (path / "config.json").write_text(json.dumps(config))
    lines = [{"id": str(i), "question": f"q{i}", "gold": ["a"], "prediction": "a", "metrics": {"em": score},
              "lm_calls": 1, "prompt_tokens": 10, "completion_tokens": 2, "cost": 0.001, "latency": 0.5,
              "error": None} for i, score in enumerate(em)]
    (path / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (path / "summary.json").write_text(json.dumps({"n": len(em), "n_expected": len(em), "complete": True}))
    return str(path)


@pytest.mark.parametrize("name", ["figure.png", "figure.svg", "figure.pdf"])
def test_report_plot_never_overwrites_a_users_file_and_replaces_its_own(tmp_path, capsys, name):
    run = _run(tmp_path / "run", [1.0, 0.0, 1.0])
    users = tmp_path / name
    users.write_bytes(b"the user's own figure")
    assert main(["report", run, "--plot", str(users)]) == 2
    assert "this command did not write it" in capsys.readouterr().err
    assert users.read_bytes() == b"the user's own figure"
    ours = tmp_path / f"ours-{name}"
    assert main(["report", run, "--plot", str(ours)]) == 0
    first = ours.stat().st_size
    assert first > 0
    assert main(["report", run, "--plot", str(ours)]) == 0  # a plot it wrote is replaced
    assert ours.stat().st_size > 0


def test_report_plot_into_a_folder_is_one_line(tmp_path, capsys):
    run = _run(tmp_path / "run", [1.0, 0.0])
    (tmp_path / "folder").mkdir()
    assert main(["report", run, "--plot", str(tmp_path / "folder")]) == 2
    assert "it is a folder" in capsys.readouterr().err


def test_report_html_keeps_a_users_page_and_plot_flags_share_the_rule(tmp_path, capsys):
    run = _run(tmp_path / "run", [1.0, 0.0])
    page = tmp_path / "page.html"
    page.write_text("<html>my notes</html>")
    assert main(["report", run, "--html", str(page)]) == 2
    assert "this command did not write it" in capsys.readouterr().err
    assert page.read_text() == "<html>my notes</html>"


@pytest.mark.parametrize("flag, name", [("--html", "report.html"), ("--plot", "plot.png")])
def test_a_report_is_not_written_into_a_run_folder(tmp_path, capsys, flag, name):
    """Review: `report RUN --html RUN/report.html` was accepted, and a later `evaluate --out RUN --force` left the
    page among the run's files."""
    from ragzoo.cli import main

    run = tmp_path / "run"
    assert main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "3", "--lm", "dry-run", "--out",
                 str(run)]) == 0
    capsys.readouterr()
    assert main(["report", str(run), flag, str(run / name)]) == 2
    err = capsys.readouterr().err.strip()
    assert "ragzoo run directory" in err and len(err.splitlines()) == 1
    assert not (run / name).exists()
