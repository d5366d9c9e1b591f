"""Numbers the user never gave: every numeric option of every command, from a flag or a --config file, is
finite and in range, or refused before any work with one line naming the option (issue 20 §6)."""

from __future__ import annotations

import json

import pytest

from ragzoo.cli import main

DRY = ["--lm", "dry-run"]


@pytest.fixture
def questions(questions_file):
    return str(questions_file(2))


def _refused(argv: list[str], capsys, flag: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0, err
    assert len(lines) == 1 and flag in lines[0], err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


EVALUATE_BAD = [
    (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"), (["--timeout", "-5"], "--timeout"),
    (["--timeout", "0"], "--timeout"), (["--deadline", "nan"], "--deadline"), (["--deadline", "inf"], "--deadline"),
    (["--deadline", "-1"], "--deadline"), (["--max-cost", "nan"], "--max-cost"), (["--max-cost", "inf"], "--max-cost"),
    (["--max-cost", "-1"], "--max-cost"), (["--price", "1e400,1"], "--price"), (["--price", "nan,1"], "--price"),
    (["--price", "1,-2"], "--price"), (["--price", "1,2,3"], "--price"), (["--price-per-hour", "inf"], "--price-per-hour"),
    (["--price-per-hour", "-1"], "--price-per-hour"), (["--abort-failure-rate", "nan"], "--abort-failure-rate"),
    (["--abort-failure-rate", "1.5"], "--abort-failure-rate"), (["--max-calls", "-1"], "--max-calls"),
    (["--max-concurrency", "0"], "--max-concurrency"), (["--max-reasks", "-1"], "--max-reasks"),
    (["-n", "0"], "-n"), (["--threads", "0"], "--threads"), (["--processes", "0"], "--processes"),
]


@pytest.mark.parametrize("flags, flag", EVALUATE_BAD, ids=[" ".join(f) for f, _ in EVALUATE_BAD])
def test_evaluate_refuses_a_number_out_of_range(tmp_path, questions, capsys, flags, flag):
    out = tmp_path / "run"
    line = _refused(["evaluate", "--method", "direct", "--data", questions, *DRY, "--out", str(out), *flags],
                    capsys, flag)
    assert flags[1] in line  # the value given is quoted back
    assert not out.exists()


@pytest.mark.parametrize("flags, flag", [
    (["--timeout", "nan"], "--timeout"), (["--train-n", "0"], "--train-n"), (["--dev-n", "-1"], "--dev-n"),
    (["--trials", "0"], "--trials"), (["--max-cost", "inf"], "--max-cost"),
])
def test_compile_refuses_a_number_out_of_range(tmp_path, capsys, flags, flag):
    out = tmp_path / "art"
    _refused(["compile", "--method", "direct", "--dataset", "hotpotqa", "--optimizer", "none", *DRY, "--out",
              str(out), *flags], capsys, flag)
    assert not out.exists()


@pytest.mark.parametrize("flags, flag", [(["--timeout", "inf"], "--timeout"), (["--max-cost", "nan"], "--max-cost")])
def test_ask_refuses_a_number_out_of_range(capsys, flags, flag):
    _refused(["ask", "--method", "direct", *DRY, "who?", *flags], capsys, flag)


def test_serve_refuses_an_infinite_budget(tmp_path, capsys):
    _refused(["serve", "--program", str(tmp_path), *DRY, "--max-cost", "inf"], capsys, "--max-cost")


@pytest.mark.parametrize("flags, flag", [(["--port", "0"], "--port"), (["--port", "65536"], "--port"),
                                         (["--workers", "0"], "--workers"), (["--max-pending", "0"], "--max-pending"),
                                         (["--max-query-chars", "0"], "--max-query-chars"),
                                         (["--max-concurrency", "0"], "--max-concurrency"),
                                         (["--max-queue", "-1"], "--max-queue")])
def test_serve_refuses_a_number_out_of_range(tmp_path, capsys, flags, flag):
    """serve's numbers by the one table (`config.NUMBER_OPTIONS`), as every command's, before a port is bound."""
    line = _refused(["serve", "--program", str(tmp_path), *DRY, *flags], capsys, flag)
    assert f"{flag} {flags[1]}: expected an integer" in line, line


def test_report_refuses_a_negative_show(tmp_path, capsys):
    line = _refused(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--compare", "--show", "-1"], capsys,
                    "--show")
    assert "--show -1: expected an integer with --show >= 0" in line, line


@pytest.mark.parametrize("flags, flag", [(["--max-cost", "inf"], "--max-cost"), (["--parallel", "0"], "--parallel"),
                                         (["--price-sample", "0"], "--price-sample"), (["--processes", "0"], "--processes"),
                                         (["-n", "0"], "-n")])
def test_sweep_refuses_a_number_out_of_range(tmp_path, capsys, flags, flag):
    _refused(["sweep", "filco-table4", "--out", str(tmp_path / "grid"), *flags], capsys, flag)
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize("line, name", [("timeout = nan", "timeout"), ("deadline = inf", "deadline"),
                                        ('price = "1e400,1"', "price"), ("max_cost = -0.5", "max_cost"),
                                        ("threads = 0", "threads")])
def test_a_config_file_value_is_checked_like_its_flag(tmp_path, questions, capsys, line, name):
    config = tmp_path / "cfg.toml"
    config.write_text(line + "\n")
    out = tmp_path / "run"
    message = _refused(["evaluate", "--method", "direct", "--data", questions, *DRY, "--out", str(out), "--config",
                        str(config)], capsys, name)
    assert str(config) in message
    assert not out.exists()


def test_a_budget_that_can_never_stop_anything_is_refused(tmp_path, questions, capsys):
    out = tmp_path / "run"
    # a priced-at-zero local model: --max-cost could never bind (refused before any request: port 9 is closed)
    line = _refused(["evaluate", "--method", "direct", "--data", questions, "--lm", "hosted_vllm/local",
                     "--api-base", "http://127.0.0.1:9/v1", "--price", "0,0", "--max-cost", "1", "--out", str(out)],
                    capsys, "--max-cost")
    assert "--price" in line and "--max-calls" in line
    assert not out.exists()


def test_numbers_in_range_pass_and_are_recorded(tmp_path, questions, capsys):
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--data", questions, *DRY, "--out", str(out), "--timeout", "5",
                 "--deadline", "30", "--max-cost", "10", "--price", "0.1,0.2", "--abort-failure-rate", "1",
                 "--max-calls", "100", "-n", "2"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["timeout"] == 5.0 and config["deadline"] == 30.0 and config["max_cost"] == 10.0


@pytest.mark.parametrize("flag", ["--api-base", "--judge-api-base"])
def test_an_lm_url_with_credentials_is_refused_naming_its_own_flag(tmp_path, questions, capsys, flag):
    """The refusal names the flag that carried the credentials (the judge's said --api-base; found by review)."""
    out = tmp_path / "run"
    extra = ["--judge-lm", "openai/judge"] if flag == "--judge-api-base" else []
    line = _refused(["evaluate", "--method", "direct", "--data", questions, "--lm", "openai/stub", "--out", str(out),
                     *extra, flag, "http://reader:pw12345678@127.0.0.1:9/v1"], capsys, flag)
    assert line.endswith(f"error: the {flag} URL carries credentials; give the bare server URL and set the key in "
                         f"the environment") and "pw12345678" not in line, line
    assert not out.exists()
