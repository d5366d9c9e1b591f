"""`ragzoo datasets`: the table, --json, a dataset filter, and one error line for a bad name."""

from __future__ import annotations

import json

import pytest

from ragzoo.cli import main


def test_table_lists_every_split_with_size(data_dir, capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["dataset", "split", "size", "source"]
    first500 = next(line for line in lines if line.startswith("hotpotqa") and "dev_first500" in line)
    assert "dev_first500 *" in first500 and " 500 " in first500 and "local" in first500
    assert any("train_full" in line and "hub: hotpotqa/hotpot_qa (distractor)" in line for line in lines)
    assert "RAGZOO_DATA" in out


@pytest.mark.needs_full_data
def test_json_output_and_dataset_filter(data_dir, capsys):
    assert main(["datasets", "strategyqa", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["split"], r["size"], r["ordered"]) for r in rows] == [("train", 2290, False),
                                                                     ("train_first500", 500, True)]


def test_unknown_dataset_is_one_stderr_line_and_exit_2(capsys):
    assert main(["datasets", "hotpot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown dataset 'hotpot'" in err and "hotpotqa" in err


def test_defaults_are_listed(data_dir, capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("strategyqa ") and "|" in line)
    assert line.split() == ["strategyqa", "train_first500", "|", "train", "without", "train_first500", "|", "acc"]
    assert main(["datasets", "nq_open", "--json"]) == 0
    rows = {row["split"]: row["default_for"] for row in json.loads(capsys.readouterr().out)}
    assert rows["dev"] == ["evaluate"] and rows["efficientqa_dev"] == ["compile"] and rows["train"] == []
