"""`ragzoo methods`: the table, --json, one method, an unknown id."""

from __future__ import annotations

import json

from ragzoo import programs
from ragzoo.cli import main


def test_methods_table_lists_ids_calls_and_knob_defaults(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["method", "LM"]
    for method_id in programs.methods():
        assert any(line.startswith(method_id + " ") for line in lines), method_id
    iter_retgen = next(line for line in lines if line.startswith("iter_retgen "))
    assert "T=3, k=5, answer_mode=short" in iter_retgen and "T (3)" in iter_retgen
    assert "Shao et al. 2023" in iter_retgen


def test_methods_json_is_machine_readable(capsys):
    assert main(["methods", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == set(programs.methods())
    assert by_id["multihop"]["knobs"] == {"hops": 2, "k": 3, "answer_mode": "short"}
    assert by_id["direct"]["uses_retrieval"] is False and by_id["direct"]["calls"] == "1"
    assert set(by_id["self_ask"]) == {"id", "paper", "summary", "knobs", "calls", "uses_retrieval"}


def test_methods_one_id(capsys):
    assert main(["methods", "self_ask", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in rows] == ["self_ask"] and rows[0]["knobs"]["max_steps"] == 4


def test_unknown_method_is_one_error_line_with_the_valid_ids(capsys):
    assert main(["methods", "retgen"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "unknown method 'retgen'" in err and "iter_retgen" in err
