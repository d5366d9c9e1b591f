"""`ragzoo methods`: the table, --json, one method, an unknown id."""

from __future__ import annotations

import json

import pytest

from ragzoo import programs
from ragzoo.cli import main


def test_methods_table_lists_ids_calls_and_papers_in_100_columns(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["method", "LM"]
    for method_id in programs.methods():
        assert sum(line.startswith(method_id + " ") for line in lines) == 1, method_id  # one row each
    iter_retgen = next(line for line in lines if line.startswith("iter_retgen "))
    # Knobs are no longer inlined (the table was 407 columns wide): `ragzoo methods NAME` shows them.
    assert "answer_mode" not in iter_retgen and "T (3)" in iter_retgen
    assert "Shao et al. 2023" in iter_retgen
    assert max(map(len, lines)) <= 100
    assert "ragzoo methods NAME" in out


def test_methods_json_is_machine_readable(capsys):
    assert main(["methods", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == set(programs.methods())
    assert by_id["multihop"]["knobs"] == {"hops": 2, "k": 3, "answer_mode": "short"}
    assert by_id["direct"]["uses_retrieval"] is False and by_id["direct"]["calls"] == "1"
    assert set(by_id["self_ask"]) == {"id", "paper", "summary", "knobs", "calls", "uses_retrieval", "differences"}
    assert by_id["self_ask"]["differences"] == [] and by_id["replug"]["differences"]


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


@pytest.mark.parametrize("method_id", sorted(programs.methods()))
def test_one_method_shows_paper_summary_calls_and_every_knob_in_100_columns(capsys, method_id):
    info = programs.info(method_id)
    assert main(["methods", method_id]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100
    flat = " ".join(out.split())  # wrapped text, joined again
    assert lines[0].startswith(f"{method_id}  ") and " ".join(info.paper.split()) in flat
    assert " ".join(info.summary.split()) in flat and f"LM calls per question: {info.calls}" in flat
    knob_lines = lines[lines.index("knobs (--knob NAME=VALUE):") + 1:] if info.knobs else []
    for spec in info.knob_specs():
        row = next(line for line in knob_lines if line.split()[:2] == [spec.name, "default"])
        assert spec.meaning, f"{method_id}: knob {spec.name} has no meaning in the class docstring's Knobs:"
        assert " ".join(spec.meaning.split()) in flat and " ".join(spec.allowed.split()) in flat, row
    for name in info.fixed_knobs:
        assert not any(line.split()[:1] == [name] for line in knob_lines)


def test_one_method_derives_types_choices_ranges_and_meanings_from_the_code(capsys):
    assert main(["methods", "raisf"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "k default 5; an integer with 1 <= k <= 100 passages retrieved per (sub-)question" in flat
    assert "max_depth default 3; an integer with max_depth >= 0" in flat
    assert "relevance default per_passage; one of 'per_passage', 'joint'" in flat
    assert "use_relevance default true; a boolean (true/false)" in flat
    assert main(["methods", "activerag"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert ("agents default associate; a comma-separated list, each one of 'associate', 'anchoring', "
            "'logician', 'cognition', 'all'") in flat
    assert main(["methods", "concat"]) == 0
    out = capsys.readouterr().out
    assert "fixed by this id: mode=concat" in out and "lenient_unknown" in out


def test_knob_meanings_come_from_the_class_docstring():
    class Documented:
        """Does things.

        Knobs:
            depth: how deep to go,
                on two lines.
            width: how wide.

        Not a knob: this paragraph ends the section.
        """

    assert programs.knob_meanings(Documented) == {"depth": "how deep to go, on two lines.", "width": "how wide."}
    assert programs.knob_meanings(type("Bare", (), {})) == {}


def test_optimizers_listing_has_a_header_and_fits_100_columns(capsys):
    from ragzoo.optimizers.presets import PRESETS

    assert main(["optimizers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["optimizer", "DSPy", "teleprompter"]
    rows = [line for line in lines[1:] if not line[:1].isspace()]  # summaries wrap under their column
    assert [row.split()[0] for row in rows] == list(PRESETS)
    assert max(map(len, lines)) <= 100
