"""A resume refuses every option that changes answers, from one list (`ragzoo.config.ANSWER_OPTIONS`) shared by
evaluate's runs and compile's checkpoints (and so by grids, whose cells are those): otherwise the answers of
two setups end up under one label (issue 20 §6: `evaluate --resume --adapter json` relabelled all 70 answers)."""

from __future__ import annotations

import pytest

from ragzoo.cli import main

DRY = ["--lm", "dry-run"]


@pytest.fixture
def questions(questions_file):
    return str(questions_file(4))


@pytest.fixture
def interrupted_run(tmp_path, questions, capsys):
    """A run of 2 of the 4 questions (as if interrupted), to be resumed with -n 4."""
    out = tmp_path / "run"
    assert main(["evaluate", "--method", "direct", "--data", questions, "-n", "2", *DRY, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _evaluate(questions, out, *flags):
    return main(["evaluate", "--method", "direct", "--data", questions, "-n", "4", *DRY, "--out", str(out),
                 "--resume", *flags])


@pytest.mark.parametrize("flags, named", [
    (["--adapter", "json"], "--adapter"),
    (["--max-reasks", "0"], "--max-reasks"),
    (["--seed", "3"], "--seed"),
    (["--metric", "f1"], "--metric"),
    (["--knob", "answer_mode=yes_no"], "--knob"),
    (["--lm", "dry-run:openai/gpt-4o"], "--lm"),
])
def test_evaluate_resume_refuses_an_option_that_changes_answers(interrupted_run, questions, capsys, flags, named):
    before = (interrupted_run / "predictions.jsonl").read_bytes(), (interrupted_run / "config.json").read_bytes()
    code = _evaluate(questions, interrupted_run, *flags)  # a later --lm wins over the first
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0
    assert len(err) == 1 and named in err[0] and "resume" in err[0], err
    after = (interrupted_run / "predictions.jsonl").read_bytes(), (interrupted_run / "config.json").read_bytes()
    assert after == before  # nothing relabelled, nothing added


def test_evaluate_resume_accepts_options_that_only_pace_or_bound_the_work(interrupted_run, questions, capsys):
    code = _evaluate(questions, interrupted_run, "--threads", "2", "--timeout", "30", "--deadline", "60",
                     "--max-cost", "5", "--max-concurrency", "3")
    assert code == 0, capsys.readouterr().err
    assert len((interrupted_run / "predictions.jsonl").read_text().splitlines()) == 4


def test_compile_resume_refuses_an_option_evaluate_refuses(tmp_path, capsys):
    out = tmp_path / "art"
    argv = ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "0", *DRY,
            "--out", str(out)]
    assert main([*argv, "--max-calls", "2"]) == 3  # a budget stop keeps bootstrap's progress
    assert (tmp_path / "art.checkpoint" / "checkpoint.json").is_file()
    capsys.readouterr()
    for flags, named in ((["--max-reasks", "0"], "--max-reasks"), (["--metric", "f1"], "--metric"),
                         (["--lm", "dry-run:openai/gpt-4o"], "--lm")):
        assert main([*argv, "--resume", "--force", *flags]) == 2
        err = capsys.readouterr().err
        assert named in err and "checkpoint" in err, err
    assert main([*argv, "--resume", "--force"]) == 0  # the same options still resume


def test_one_list_for_evaluate_and_compile():
    """Both resumes are checked against the one list (the refusals above come from it)."""
    from ragzoo import runs
    from ragzoo.config import ANSWER_OPTIONS, answer_view

    config = {name: f"value of {name}" for name in ANSWER_OPTIONS}
    assert set(runs._resume_view(config)) == set(ANSWER_OPTIONS)
    assert set(answer_view(config)) == set(ANSWER_OPTIONS)
    for name in ("adapter", "max_reasks", "retriever", "metrics", "seed", "knobs", "method", "api_base"):
        assert name in ANSWER_OPTIONS


def test_a_knob_search_rerun_with_other_answer_options_does_not_reuse_the_trials(tmp_path, capsys):
    """`compile --search --storage` resumes by rerunning the same command; the same command with another adapter
    must not take the first one's trials (and their scores) as its own."""
    import re

    argv = ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "2",
            "--optimizer", "none", "--search", "answer_mode=short,yes_no", "--trials", "2", *DRY,
            "--storage", f"sqlite:///{tmp_path / 'search.db'}"]

    def run(out: str, *flags) -> tuple[int, str]:
        assert main([*argv, "--out", str(tmp_path / out), *flags]) == 0
        line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("knob search"))
        ran, study = re.search(r"(\d+) run here; study (\S+)", line).groups()
        return int(ran), study

    first = run("a")
    assert first[0] == 2
    assert run("b") == (0, first[1])  # the same command: resumed, nothing run again
    again = run("c", "--adapter", "json")
    assert again[0] == 2 and again[1] != first[1]
