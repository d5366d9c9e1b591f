"""`--preset paper`: the papers' evaluation split, metric and answer mode for a dataset, and a compile pool that
shares no question with that split."""

from __future__ import annotations

import json

from ragzoo.cli import main


def test_strategyqa_paper_preset_is_yes_no_scored_by_accuracy_with_blendfilters_ten_calls(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "blendfilter", "--dataset", "strategyqa", "--preset", "paper", "-n", "2",
                 "--lm", "dry-run", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert (config["split"], config["metric"], config["knobs"]["answer_mode"]) == ("train_first500", "acc", "yes_no")
    assert "used the paper preset of strategyqa" in err and "--knob answer_mode=yes_no" in err
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [record["lm_calls"] for record in records] == [10, 10]  # the paper's 10 calls on StrategyQA


def test_an_explicit_knob_or_split_wins_over_the_preset(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["evaluate", "--method", "blendfilter", "--dataset", "strategyqa", "--preset", "paper", "-n", "1",
                 "--knob", "answer_mode=short", "--split", "train", "--lm", "dry-run", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["split"], config["knobs"]["answer_mode"]) == ("train", "short")


def test_hotpotqa_preset_evaluates_on_the_first_500_and_compiles_on_a_disjoint_split(tmp_path, capsys):
    art = tmp_path / "art"
    assert main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--preset", "paper", "--train-n", "3",
                 "--dev-n", "2", "--optimizer", "labeled", "--lm", "dry-run", "--out", str(art)]) == 0
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["split"] == "train" and manifest["defaults_used"]["disjoint_from"] == "dev_first500"
    capsys.readouterr()
    out = tmp_path / "run"
    assert main(["evaluate", "--program", str(art), "--dataset", "hotpotqa", "--preset", "paper", "-n", "3",
                 "--lm", "dry-run", "--out", str(out), "--refuse-leakage"]) == 0
    assert json.loads((out / "config.json").read_text())["split"] == "dev_first500"
