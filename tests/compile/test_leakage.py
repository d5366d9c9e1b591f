"""A compile records the questions it trained and validated on; evaluating the program on any of them is flagged
(a loud warning, the overlap in the run record), refused on request (what grids do), and survives save/load."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo import leakage, programs
from ragzoo.artifacts import load, save
from ragzoo.cli import main
from ragzoo.errors import RunError
from ragzoo.optimizers import compile_program
from ragzoo.runs import evaluate


def _compiled(tiny_retriever, echo_lm, train, dev):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    with dspy.context(lm=echo_lm()):
        return compile_program(program, trainset=train, valset=dev, optimizer="bootstrap", metric="em")


def test_question_keys_ignore_case_punctuation_and_spacing():
    assert leakage.question_key("Who wrote  Hamlet?") == leakage.question_key("who wrote hamlet")
    assert leakage.question_key("Who wrote Hamlet?") != leakage.question_key("Who wrote Macbeth?")


def test_overlap_survives_save_and_load_and_is_counted_per_role(tmp_path, tiny_retriever, echo_lm, make_examples):
    pool = make_examples(13)
    train, dev, fresh = pool[:6], pool[6:9], pool[9:]
    result = _compiled(tiny_retriever, echo_lm, train, dev)
    loaded = load(save(result.program, tmp_path / "art"), retriever=tiny_retriever)
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert len(manifest["seen_questions"]["train"]) == 6 and len(manifest["seen_questions"]["dev"]) == 3
    assert leakage.overlap(loaded, train[:2] + dev[:1] + fresh) == {"train": 2, "dev": 1}
    assert leakage.overlap(loaded, fresh) == {}
    assert leakage.overlap(programs.get("_tinyqa", retriever=tiny_retriever), train) == {}  # never compiled


def test_evaluate_warns_and_records_or_refuses(tmp_path, tiny_retriever, echo_lm, make_examples, caplog):
    pool = make_examples(9)
    train, dev = pool[:6], pool[6:]
    result = _compiled(tiny_retriever, echo_lm, train, dev)
    with dspy.context(lm=echo_lm()):
        with pytest.raises(RunError, match="compiled on 2 in its training questions"):
            evaluate(result.program, train[:2], "em", tmp_path / "refused", progress=False, refuse_leakage=True)
        summary = evaluate(result.program, train[:2] + dev, "em", tmp_path / "warned", progress=False)
    assert not (tmp_path / "refused").exists()
    assert summary["compiled_on"] == {"train": 2, "dev": 3}
    assert json.loads((tmp_path / "warned" / "config.json").read_text())["compiled_on"] == {"train": 2, "dev": 3}
    assert "not held out" in caplog.text


def test_the_cli_warns_loudly_and_a_selection_score_says_so(tmp_path, capsys):
    art = tmp_path / "art"
    assert main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--split", "dev_first500",
                 "--dev-split", "dev_first500", "--train-n", "3", "--dev-n", "3", "--optimizer", "labeled",
                 "--lm", "dry-run", "--out", str(art)]) == 0
    capsys.readouterr()
    code = main(["evaluate", "--program", str(art), "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "5",
                 "--metric", "em", "--lm", "dry-run", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 0 and "WARNING: the program was compiled on some of these questions" in err
    code = main(["evaluate", "--program", str(art), "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "5",
                 "--metric", "em", "--lm", "dry-run", "--out", str(tmp_path / "run2"), "--refuse-leakage"])
    assert code == 2 and "not held out" in capsys.readouterr().err
