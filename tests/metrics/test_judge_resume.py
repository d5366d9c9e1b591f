"""The judge LM changes scores as --adapter changes answers: `evaluate --resume` with another --judge-lm (or
--judge-api-base) is refused (`ragzoo.config.answer_view` holds the judge's LM), otherwise one run would hold the
verdicts of two judges under one label."""

from __future__ import annotations

import pytest

from ragzoo.cli import main

BASE = ["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "hotpotqa", "--split",
        "dev_distractor", "--lm", "dry-run", "--metric", "em,judge_faithful"]


@pytest.fixture
def judged_run(tmp_path, capsys):
    """2 of 4 questions judged by the dry-run judge (as if interrupted), to be resumed with -n 4."""
    out = tmp_path / "run"
    assert main([*BASE, "-n", "2", "--judge-lm", "dry-run", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _files(out):
    return {name: (out / name).read_bytes() for name in ("config.json", "predictions.jsonl", "summary.json")}


@pytest.mark.parametrize("judge, named", [
    (["--judge-lm", "dry-run:openai/gpt-4o"], "--judge-lm"),
    (["--judge-lm", "openai/another-judge", "--judge-api-base", "http://127.0.0.1:9/v1"], "--judge-lm"),
])
def test_resume_with_another_judge_is_refused_and_the_run_is_untouched(judged_run, capsys, judge, named):
    before = _files(judged_run)
    code = main([*BASE, "-n", "4", *judge, "--out", str(judged_run), "--resume"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0
    assert len(err) == 1 and named in err[0] and "resume" in err[0] and "Traceback" not in err[0], err
    assert _files(judged_run) == before


def test_resume_with_the_same_judge_goes_on(judged_run, capsys):
    code = main([*BASE, "-n", "4", "--judge-lm", "dry-run", "--out", str(judged_run), "--resume"])
    assert code == 0, capsys.readouterr().err
    assert len((judged_run / "predictions.jsonl").read_text().splitlines()) == 4


def test_the_judge_is_part_of_the_answer_view_only_when_a_metric_is_judged():
    from ragzoo.config import answer_differences, answer_view

    judged = {"metrics": ["judge"], "judge_lm": "a", "judge": {"lm": {"model": "openai/a", "api_base": "h:1"}}}
    other = {**judged, "judge_lm": "b", "judge": {"lm": {"model": "openai/b", "api_base": "h:1"}}}
    assert answer_differences(answer_view(judged), answer_view(other)) == [
        '--judge-lm was "openai/a", now "openai/b"']
    # --judge-lm given to a run that judges nothing changes no score
    assert answer_view({"metrics": ["em"], "judge_lm": "a"}) == answer_view({"metrics": ["em"], "judge_lm": "b"})
