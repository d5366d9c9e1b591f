"""A dataset's natural defaults through the CLI (issue 11): the default split and metric come from the dataset
registry, are recorded in the run config / manifest, and are named in one stderr line."""

from __future__ import annotations

import json
import time

import pytest

from ragzoo.cli import main


@pytest.mark.parametrize("dataset, split, metric", [
    ("strategyqa", "train_first500", "acc"),
    ("popqa", "test", "em,f1"),
    ("hotpotqa", "dev", "em,f1"),
])
def test_evaluate_uses_and_records_the_dataset_defaults(dataset, split, metric, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--dataset", dataset, "-n", "2", "--lm", "dry-run",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["split"] == split and config["metric"] == metric
    assert config["defaults_used"] == {"split": split, "metric": metric}
    lines = [line for line in err.splitlines() if "defaults" in line]
    assert len(lines) == 1 and f"--split {split}" in lines[0] and f"--metric {metric}" in lines[0]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["metrics"]) == set(metric.split(","))


def test_evaluate_with_explicit_split_and_metric_records_no_defaults(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["evaluate", "--method", "direct", "--dataset", "strategyqa", "--split", "train", "--metric", "em",
                 "-n", "2", "--lm", "dry-run", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["split"] == "train" and config["metric"] == "em" and "defaults_used" not in config
    assert "defaults" not in capsys.readouterr().err


def test_compile_defaults_to_a_split_on_disk(tmp_path, capsys):
    art = tmp_path / "art"
    started = time.monotonic()
    code = main(["compile", "--method", "direct", "--dataset", "nq_open", "--train-n", "2", "--dev-n", "1",
                 "--optimizer", "none", "--lm", "dry-run", "--out", str(art)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert time.monotonic() - started < 20  # no hub attempt (it took 28 s before failing)
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["split"] == "efficientqa_dev" and manifest["metric"] == "em"
    assert manifest["defaults_used"] == {"split": "efficientqa_dev", "disjoint_from": "dev", "metric": "em"}
    assert "nq_open's defaults" in err and "efficientqa_dev" in err


def test_compile_on_strategyqa_scores_accuracy_and_skips_the_evaluation_questions(tmp_path, capsys, data_dir):
    art = tmp_path / "art"
    code = main(["compile", "--method", "direct", "--dataset", "strategyqa", "--train-n", "4", "--dev-n", "2",
                 "--optimizer", "labeled", "--lm", "dry-run", "--out", str(art)])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["metric"] == "acc" and manifest["split"] == "train"
    assert manifest["defaults_used"]["excluded_split"] == "train_first500"
    evaluation = {json.loads(line)["question"] for line in
                  (data_dir / "strategyqa" / "train_first500.jsonl").read_text().splitlines() if line.strip()}
    demos = [demo["question"] for predictor in json.loads((art / "program.json").read_text()).values()
             if isinstance(predictor, dict) for demo in predictor.get("demos", [])]
    assert demos and not set(demos) & evaluation
