"""report on odd run folders (found by review): an empty run, a corrupt line in the middle of predictions.jsonl,
and a --plot name matplotlib cannot write, each one line and exit 2 before anything is printed."""

from __future__ import annotations

import pytest

from ragzoo.cli import main


def _run(tmp_path, questions_file, name="run") -> str:
    out = tmp_path / name
    assert main(["evaluate", "--method", "direct", "--data", str(questions_file(3)), "--lm", "dry-run", "--out",
                 str(out)]) == 0
    return str(out)


def _refused(argv, capsys, says):
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and says in captured.err, (code, captured.err)
    assert captured.out == "", captured.out  # nothing printed before the refusal
    return captured.err


def test_an_empty_run_is_refused_not_scored_zero(tmp_path, questions_file, capsys):
    source = _run(tmp_path, questions_file)
    run = tmp_path / "empty"
    run.mkdir()
    (run / "config.json").write_text(open(source + "/config.json").read())  # a run with no question finished yet
    (run / "predictions.jsonl").write_text("")
    for extra in ([], ["--html", str(tmp_path / "e.html")]):
        _refused(["report", str(run), *extra], capsys, "has no finished question yet")
    assert not (tmp_path / "e.html").exists()


def test_a_corrupt_line_in_the_middle_is_refused(tmp_path, questions_file, capsys):
    run = _run(tmp_path, questions_file)
    lines = open(run + "/predictions.jsonl").read().splitlines()
    with open(run + "/predictions.jsonl", "w") as handle:
        handle.write("\n".join([lines[0], '{"id": broken', *lines[1:]]) + "\n")
    _refused(["report", run], capsys, "line 2 is not valid JSON")


def test_a_plot_name_matplotlib_cannot_write_is_refused_before_the_table(tmp_path, questions_file, capsys):
    run = _run(tmp_path, questions_file)
    _refused(["report", run, "--plot", str(tmp_path / "out.txt2")], capsys, ".txt2 is not a format ragzoo writes")
    # a format with no room for ragzoo's mark: written once, then refused as not ours (review): refused up front
    _refused(["report", run, "--plot", str(tmp_path / "out.jpg")], capsys, ".jpg is not a format ragzoo writes")


@pytest.mark.parametrize("edit, says", [
    (lambda record, config: record["metrics"].update(em=float("nan")), "predictions.jsonl is corrupt"),
    (lambda record, config: record["metrics"].update(em=7.0), "scores are in [0, 1]"),
    (lambda record, config: record.update(cost=-5), "usage figures finite and not negative"),
    (lambda record, config: record.update(gold=1945), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(stages=[1]), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(stages={"s": {"calls": "x"}}), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(stages={"s": {"passages": [[1]]}}), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(gold_pids=5), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(supporting_titles=7), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(lm_trace=[{"prompt_tokens": "abc"}]), "predictions.jsonl is corrupt"),
    (lambda record, config: record.update(passages=5), "predictions.jsonl is corrupt"),
    (lambda record, config: config.update(split={"a": 1}), "'split' is not a string"),
    (lambda record, config: config.update(defaults_used=[1]), "'defaults_used' is not an object"),
])
def test_a_hand_edited_run_is_refused_as_corrupt_not_scored(tmp_path, questions_file, capsys, edit, says):
    """Review: NaN or out-of-range scores printed `nan` or a CI above 1 (or an internal error under --ci), a
    negative cost a negative spend, a numeric gold or a dict split an internal error."""
    import json
    from pathlib import Path

    run = Path(_run(tmp_path, questions_file))
    lines = (run / "predictions.jsonl").read_text().splitlines()
    record, config = json.loads(lines[0]), json.loads((run / "config.json").read_text())
    edit(record, config)
    (run / "predictions.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    (run / "config.json").write_text(json.dumps(config))
    _refused(["report", str(run), "--ci"], capsys, says)


@pytest.mark.parametrize("line, says", [({"why": "retried", "id": "q0", "lm_calls": "abc"}, "lm_calls"),
                                        ({"why": "late", "id": "q0", "cost": "nan"}, "cost"),
                                        ({"why": "server", "server_cost": -3.0}, "server_cost")])
@pytest.mark.parametrize("extra", [[], ["--json"], ["--html"]])
def test_a_damaged_ledger_line_is_one_line_naming_it(tmp_path, questions_file, capsys, line, says, extra):
    """Review: a non-numeric figure in extra_usage.jsonl was an internal error (ValueError), "nan" a `spent $ nan`."""
    import json
    from pathlib import Path

    run = Path(_run(tmp_path, questions_file))
    (run / "extra_usage.jsonl").write_text(json.dumps({"why": "retried", "id": "q1", "lm_calls": 1}) + "\n"
                                           + json.dumps(line) + "\n")
    if extra == ["--html"]:
        extra = ["--html", str(tmp_path / "r.html")]
    err = _refused(["report", str(run), *extra], capsys, "extra_usage.jsonl:2 is corrupt")
    assert says in err
