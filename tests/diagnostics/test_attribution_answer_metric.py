"""What "right" means for attribution and flips (review of the report): an answer metric, never a retrieval or a
diagnostic one. With `--metric recall,em`, 7 of 8 wrong answers had been attributed "correct" by recall."""

from __future__ import annotations

from ragzoo.diagnostics import answer_metric, attribute, flips


def test_the_answer_metric_is_the_first_that_scores_the_answer():
    assert answer_metric(["recall", "em", "f1"]) == "em"
    assert answer_metric(["unknown", "vote_miss", "f1"]) == "f1"
    assert answer_metric(["recall", "precision", "judge_faithful"]) is None
    assert answer_metric(["judge"]) == "judge"


def test_a_wrong_answer_with_perfect_recall_is_not_correct():
    record = {"metrics": {"recall": 1.0, "em": 0.0}, "prediction": "Ohio", "evidence": "titles",
              "stages": {"retrieve": {}}, "gold_pids": ["1"], "passages": [{"pid": "1"}]}
    assert attribute(record) == "reader_miss"
    assert attribute({**record, "metrics": {"recall": 1.0}}) is None  # nothing says whether the answer is right
    assert attribute({**record, "metrics": {"recall": 1.0}, "prediction": "unknown"}) == "abstained"
    right = {**record, "id": "q", "metrics": {"recall": 0.0, "em": 1.0}, "attribution": "correct"}
    wrong = {**record, "id": "q", "metrics": {"recall": 1.0, "em": 0.0}, "attribution": "reader_miss"}
    assert flips([right], [wrong])["a_right_b_wrong"]["count"] == 1
    assert flips([wrong], [right])["a_right_b_wrong"]["count"] == 0


def test_report_outputs_that_one_form_does_not_make_are_refused(tmp_path, capsys):
    """Review: --html dropped --plot and --json, --compare dropped --html and --plot, all with exit 0."""
    from ragzoo.cli import main

    for extra in (["--html", str(tmp_path / "r.html"), "--plot", str(tmp_path / "p.png")],
                  ["--html", str(tmp_path / "r.html"), "--json"],
                  ["--compare", "--html", str(tmp_path / "r.html")],
                  ["--compare", "--plot", str(tmp_path / "p.png")]):
        assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), *extra]) == 2
        err = capsys.readouterr().err
        assert "makes no" in err and "run the report once for each" in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


def test_a_gate_whose_yes_alone_carries_a_label_reports_its_precision_not_an_accuracy():
    """Review: RA-ISF's self-knowledge gate stores a closed-book answer only when it says yes; "decision_accuracy"
    was P(right | yes), and a wrong "no" was never counted."""
    from ragzoo.diagnostics import stage_summary

    def record(decision, answer, gold):
        stage = {"calls": 1, "decision": decision, **({"answer": answer} if answer is not None else {})}
        return {"gold": [gold], "stages": {"gate": stage}, "metrics": {"em": 0.0}}

    only_yes = [record(True, "Paris", "Paris"), record(True, "Rome", "Paris"), record(False, None, "Paris")]
    gate = stage_summary(only_yes)["gate"]
    assert gate["yes_precision"] == 0.5 and "decision_accuracy" not in gate
    both = [record(True, "Paris", "Paris"), record(False, "Rome", "Paris")]
    assert stage_summary(both)["gate"]["decision_accuracy"] == 1.0 and "yes_precision" not in stage_summary(both)["gate"]


def test_a_dry_runs_stage_measures_leave_out_what_is_read_off_its_placeholder_answers():
    """Review: a dry run printed %Unk, vote agreement (always 1.00) and vote miss of its placeholder answers."""
    from ragzoo.diagnostics import stage_summary

    records = [{"gold": ["Paris"], "prediction": "placeholder answer", "metrics": {"em": 0.0},
                "stages": {"vote": {"calls": 3, "answers": ["placeholder answer"] * 3, "passages": ["1", "2"]}}}]
    real = stage_summary(records)["vote"]
    dry = stage_summary(records, answers=False)["vote"]
    assert "vote_agreement" in real and "unknown_rate" in real
    assert not {"vote_agreement", "unknown_rate", "vote_miss"} & set(dry) and dry["calls"] == real["calls"]
