"""Best-of-n ("oracle") metrics over a prediction's candidate answers (issue 22 item 3), the candidates kept in
each prediction record, and one definition of an abstention (item 9)."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo import metrics
from ragzoo.errors import ConfigError
from ragzoo.metrics.fields import predicted_candidates
from ragzoo.metrics.rates import is_unknown, unknown_metric

EXAMPLE = dspy.Example(question="Who wrote it?", answers=["Jane Austen"]).with_inputs("question")


def test_oracle_em_is_one_when_any_candidate_is_right():
    pred = dspy.Prediction(answer="Mary Shelley", candidates=["Mary Shelley", "jane austen.", "Austen"])
    assert metrics.get_metric("em")(EXAMPLE, pred) == 0.0
    assert metrics.get_metric("oracle_em")(EXAMPLE, pred) == 1.0


def test_oracle_f1_is_the_best_candidate_s_f1():
    pred = dspy.Prediction(answer="Mary Shelley", candidates=["Mary Shelley", "Austen", "Jane Austen wrote"])
    best = max(metrics.f1(c, ["Jane Austen"]) for c in pred.candidates)
    assert metrics.get_metric("oracle_f1")(EXAMPLE, pred) == pytest.approx(best) == pytest.approx(0.8)
    assert metrics.get_metric("f1")(EXAMPLE, pred) == 0.0


def test_oracle_acc_and_contains_follow_their_base_metric():
    yes_no = dspy.Example(question="q", answers=["yes"], answer_bool=True)
    pred = dspy.Prediction(answer="no", candidates=["no", "Yes."])
    assert metrics.get_metric("acc")(yes_no, pred) == 0.0 and metrics.get_metric("oracle_acc")(yes_no, pred) == 1.0
    pred = dspy.Prediction(answer="Shelley", candidates=["Shelley", "it was Jane Austen"])
    assert metrics.get_metric("oracle_contains")(EXAMPLE, pred) == 1.0


def test_oracle_falls_back_to_the_answer_without_candidates():
    for pred in (dspy.Prediction(answer="Jane Austen"), dspy.Prediction(answer="Jane Austen", candidates=None),
                 dspy.Prediction(answer="Jane Austen", candidates=[])):
        assert metrics.get_metric("oracle_em")(EXAMPLE, pred) == 1.0
    # candidates, when present, are the pool: an answer outside them does not count (ActiveRAG's oracle
    # rerank picks among the agents' answers, not the method's own final answer)
    assert metrics.get_metric("oracle_em")(EXAMPLE, dspy.Prediction(answer="Jane Austen",
                                                                     candidates=["Mary Shelley"])) == 0.0


@pytest.mark.parametrize("pred", [None, ValueError("unreadable"), dspy.Prediction(answer=None)])
def test_oracle_scores_a_failed_prediction_zero(pred):
    assert metrics.get_metric("oracle_em")(EXAMPLE, pred) == 0.0
    assert metrics.get_metric("oracle_f1")(EXAMPLE, pred) == 0.0


def test_candidates_read_from_predictions_and_records():
    assert predicted_candidates(dspy.Prediction(answer="a", candidates=["a", None, 3])) == ["a", "", "3"]
    assert predicted_candidates({"prediction": "a", "candidates": ["b"]}) == ["b"]
    assert predicted_candidates(dspy.Prediction(answer="a")) == []
    assert predicted_candidates(RuntimeError("x")) == []


def test_oracle_metrics_resolve_by_name_for_the_cli():
    from ragzoo.commands.common import check_metrics
    from ragzoo.metrics.scoring import resolve_metrics

    check_metrics("em,oracle_em,oracle_f1")
    names = [name for name, _ in resolve_metrics("oracle_em,oracle_f1,oracle_acc,oracle_contains")]
    assert names == ["oracle_em", "oracle_f1", "oracle_acc", "oracle_contains"]
    with pytest.raises(ConfigError, match="oracle_em"):  # the error lists them among the valid names
        metrics.get_metric("oracle_nope")


# --- the record keeps the candidates (runs.run_example) ---------------------------------------------------

class _Sampler(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer="Mary Shelley", candidates=["Mary Shelley", "Jane Austen", "Austen"])


class _Single(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer="Jane Austen")


def test_evaluate_keeps_candidates_in_each_record_and_scores_the_oracle(tmp_path):
    from ragzoo.runs import evaluate, read_predictions

    evaluate(_Sampler(), [EXAMPLE], metrics="em,oracle_em,oracle_f1", out_dir=tmp_path / "run", progress=False)
    (record,) = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert record["candidates"] == ["Mary Shelley", "Jane Austen", "Austen"]
    assert record["prediction"] == "Mary Shelley"
    assert record["metrics"] == {"em": 0.0, "oracle_em": 1.0, "oracle_f1": 1.0}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["metrics"]["oracle_em"] == 1.0 and summary["metrics"]["em"] == 0.0


def test_a_method_without_candidates_writes_no_candidates_field(tmp_path):
    from ragzoo.runs import evaluate, read_predictions

    evaluate(_Single(), [EXAMPLE], metrics="oracle_em", out_dir=tmp_path / "run", progress=False)
    (record,) = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert "candidates" not in record and record["metrics"] == {"oracle_em": 1.0}


# --- one definition of an abstention (item 9) -------------------------------------------------------------

@pytest.mark.parametrize("answer", ["unknown", "Unknown.", "", None])
def test_abstentions_by_the_one_definition(answer):
    assert is_unknown(answer)
    assert unknown_metric(EXAMPLE, dspy.Prediction(answer=answer)) == 1.0


@pytest.mark.parametrize("answer", ["I don't know", "Unknow", "not provided"])
def test_refusals_and_other_spellings_count_only_when_refusals_are_asked_for(answer):
    assert not is_unknown(answer) and unknown_metric(EXAMPLE, dspy.Prediction(answer=answer)) == 0.0
    assert is_unknown(answer, refusals=True)
    assert metrics.get_metric("unknown_lenient")(EXAMPLE, dspy.Prediction(answer=answer)) == 1.0


def test_report_reads_the_oracle_metric_of_a_run(tmp_path, capsys):
    from ragzoo.cli import main
    from ragzoo.runs import evaluate

    evaluate(_Sampler(), [EXAMPLE], metrics="em,oracle_em", out_dir=tmp_path / "run", progress=False)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "--metric", "oracle_em"]) == 0
    out = capsys.readouterr().out
    assert "oracle_em" in out and "1.000" in out
