"""A compile survives interruption: bootstrap's progress is checkpointed after each training example, a resumed
compile makes only the remaining LM calls and ends with the demos of an uninterrupted one; GEPA gets a
`log_dir` in the checkpoint; a checkpoint of another compile is refused, naming what differs."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.optimizers import compile_program, get_preset
from ragzoo.optimizers.compiler import CompileCheckpoint, build_teleprompter, checkpoint_path
from ragzoo.metrics.scoring import safe_metric
from ragzoo.testing import ScriptedLM

EM = lambda example, pred, trace=None: pred.answer == example.answer  # noqa: E731
FINGERPRINT = {"method": "_tinyqa", "knobs": {"k": 2}, "optimizer": "bootstrap", "seed": 0, "train": "abc"}


def picky_lm(interrupt_at: int | None = None) -> ScriptedLM:
    """Right on odd items only (so bootstrap must try 6 examples for 3 demos); Ctrl-C at call `interrupt_at`."""
    calls = []

    def respond(context):
        calls.append(1)
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        number = int(context.inputs["question"].split("item ")[-1].rstrip("?"))
        return {"answer": f"answer {number}" if number % 2 else "nope"}

    return ScriptedLM(default=respond)


def _compile(lm, train, tiny_retriever, checkpoint=None):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    with dspy.context(lm=lm):
        return compile_program(program, trainset=train, valset=[], optimizer="bootstrap", metric=EM,
                               checkpoint=checkpoint)


def _demos(program) -> list:
    return program.dump_state()["answer"]["demos"]


def test_interrupted_bootstrap_resumes_with_only_the_remaining_calls(tiny_retriever, tmp_path, make_examples):
    train = make_examples(8)
    plain_lm = picky_lm()
    plain = _compile(plain_lm, train, tiny_retriever)
    assert len(plain_lm.calls) == 6 and len(_demos(plain.program)) == 3  # items 1, 3, 5 bootstrapped

    where = checkpoint_path(tmp_path / "art")
    assert where == tmp_path / "art.checkpoint"
    first = picky_lm(interrupt_at=4)  # Ctrl-C during the 4th training example
    with pytest.raises(KeyboardInterrupt):
        _compile(first, train, tiny_retriever, CompileCheckpoint.open(where, FINGERPRINT))
    state = json.loads((where / "bootstrap.json").read_text())
    assert state["next_index"] == 3 and state["bootstrapped"] == [1]  # the 4th example was cut: not recorded
    assert [d["answer"] for d in state["name2traces"]["answer"]] == ["answer 1"]
    assert "3 training example(s) tried, 1 demo(s) kept" in CompileCheckpoint(where, FINGERPRINT).kept()

    second = picky_lm()
    resumed = _compile(second, train, tiny_retriever, CompileCheckpoint.open(where, FINGERPRINT, resume=True))
    asked = [call.inputs["question"] for call in second.calls]
    assert asked == ["what is item 3?", "what is item 4?", "what is item 5?"]  # only the remaining examples
    assert _demos(resumed.program) == _demos(plain.program)  # the same demos as an uninterrupted compile
    assert any("resumed from the checkpoint" in note for note in resumed.notes)


def test_a_budget_stop_keeps_the_checkpoint_and_a_larger_budget_continues(tiny_retriever, tmp_path, make_examples):
    train = make_examples(8)
    where = tmp_path / "art.checkpoint"
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    with dspy.context(lm=picky_lm()):
        stopped = compile_program(program, trainset=train, valset=[], optimizer="bootstrap", metric=EM, max_calls=2,
                                  checkpoint=CompileCheckpoint.open(where, FINGERPRINT))
    assert stopped.stopped and json.loads((where / "bootstrap.json").read_text())["next_index"] == 2
    lm = picky_lm()
    resumed = _compile(lm, train, tiny_retriever, CompileCheckpoint.open(where, FINGERPRINT, resume=True))
    assert len(lm.calls) == 4 and [d["answer"] for d in _demos(resumed.program)] == ["answer 1", "answer 3",
                                                                                        "answer 5"]


def test_a_checkpoint_of_another_compile_is_refused_naming_what_differs(tmp_path):
    where = tmp_path / "art.checkpoint"
    with pytest.raises(ConfigError, match="no checkpoint"):
        CompileCheckpoint.open(where, FINGERPRINT, resume=True)
    checkpoint = CompileCheckpoint.open(where, FINGERPRINT)
    checkpoint.write("bootstrap.json", {"next_index": 1, "name2traces": {}})  # some progress to lose
    other = {**FINGERPRINT, "seed": 1, "knobs": {"k": 3}}
    with pytest.raises(ConfigError, match=r"--knob was \{\"k\": 2\}, now \{\"k\": 3\}; --seed was 0, now 1") as error:
        CompileCheckpoint.open(where, other, resume=True)
    assert "method" not in str(error.value) and "optimizer" not in str(error.value)
    with pytest.raises(ConfigError, match="--resume to continue it, or --force"):
        CompileCheckpoint.open(where, other)  # not silently replaced
    CompileCheckpoint.open(where, other, force=True)
    assert not where.exists()  # --force started over; nothing is written until there is progress
    CompileCheckpoint.open(where, other).write("bootstrap.json", {"next_index": 0, "name2traces": {}})
    assert CompileCheckpoint.open(where, other, resume=True).resumed
    CompileCheckpoint.open(where, FINGERPRINT, force=True).folder("gepa")  # GEPA has not written yet
    assert CompileCheckpoint.open(where, FINGERPRINT, resume=True).resumed
    CompileCheckpoint.open(where, other)  # one that kept nothing yet is replaced without --force
    assert not where.exists()


def test_gepa_keeps_its_state_in_the_checkpoint(tmp_path):
    preset, settings = get_preset("gepa")
    checkpoint = CompileCheckpoint.open(tmp_path / "art.checkpoint", FINGERPRINT)
    with dspy.context(lm=ScriptedLM(default={"answer": "a"})):
        teleprompter = build_teleprompter(preset, settings, safe_metric(EM), 1, 0, [], checkpoint)
    assert teleprompter.log_dir == str(tmp_path / "art.checkpoint" / "gepa")



def test_cli_compile_resume_says_what_was_kept_and_continues(tmp_path, capsys, monkeypatch, interrupting_lm):
    import ragzoo.commands.common as common
    from ragzoo.cli import main

    lms = []

    def scripted_lm(config):
        lm = interrupting_lm(interrupt_at=3 if not lms else None)
        lms.append(lm)
        return lm

    monkeypatch.setattr(common, "build_lm", scripted_lm)
    out = tmp_path / "art"
    argv = ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "0",
            "--lm", "openai/scripted", "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ragzoo compile: interrupted; nothing was saved")
    assert "kept: bootstrap progress in" in err[-1] and "2 training example(s) tried" in err[-1]
    assert "--resume" in err[-1] and not out.exists()

    assert main(argv) == 2  # not started over silently
    assert "pass --resume to continue it" in capsys.readouterr().err
    assert main([*argv, "--resume", "--seed", "7"]) == 2
    assert "seed was 0, now 7" in capsys.readouterr().err

    assert main([*argv, "--resume"]) == 0
    assert len(lms[-1].calls) == 2  # only the 2 examples not tried before Ctrl-C
    assert out.is_dir() and not (tmp_path / "art.checkpoint").exists()  # removed once the artifact is saved


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],  # cut short
    lambda text: json.dumps({**json.loads(text), "name2traces": {"answer": ["not a demo"]}}),  # wrong types
    lambda text: json.dumps({**json.loads(text), "next_index": "three"}),
])
def test_a_damaged_bootstrap_checkpoint_is_refused_in_one_line(tiny_retriever, tmp_path, make_examples, damage):
    """Review: a truncated or edited bootstrap.json gave an internal JSONDecodeError/TypeError on --resume."""
    train = make_examples(8)
    where = tmp_path / "art.checkpoint"
    with pytest.raises(KeyboardInterrupt):
        _compile(picky_lm(interrupt_at=4), train, tiny_retriever, CompileCheckpoint.open(where, FINGERPRINT))
    state = where / "bootstrap.json"
    state.write_text(damage(state.read_text()))
    lm = picky_lm()
    with pytest.raises(ConfigError, match=r"bootstrap.json cannot be read \(.*\); run without --resume and with "
                                          r"--force to start over"):
        _compile(lm, train, tiny_retriever, CompileCheckpoint.open(where, FINGERPRINT, resume=True))
    assert not lm.calls
    state.write_text("{")  # what a stop then says it kept: never an internal error on the way out
    assert CompileCheckpoint(where, FINGERPRINT).kept() == f"a damaged bootstrap checkpoint in {where}"


def test_a_resumed_compile_counts_what_its_earlier_runs_spent(tmp_path, capsys, monkeypatch):
    """Review: each resume's budget started from 0 (`--max-calls 5` and --resume, again and again, spent without
    bound, though the stop asked for "a larger budget"), and the manifest counted only the last run's calls (3
    recorded against 18 sent). The checkpoint keeps the spend of the runs that kept its progress."""
    from ragzoo.cli import main
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "art"
    with StubLMServer() as server:  # placeholder answers: every training question is tried, one call each
        argv = ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "6", "--dev-n", "0",
                "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1", "--no-cache", "--out", str(out)]
        assert main([*argv, "--max-calls", "2"]) == 3
        assert server.requests == 2
        capsys.readouterr()
        assert main([*argv, "--max-calls", "2", "--resume", "--force"]) == 3
        assert server.requests == 2  # its 2 calls were spent: nothing more under the same budget
        said = capsys.readouterr().err
        # in the flag's own numbers (review: "0 of --max-calls 0", a budget the user never gave)
        assert "(2 of --max-calls 2, 2 of them by earlier runs)" in said, said
        assert "of --max-calls 0" not in said
        capsys.readouterr()
        assert main([*argv, "--max-calls", "1", "--resume", "--force"]) == 3  # below what was spent: nothing sent
        assert server.requests == 2 and "(2 of --max-calls 1, 2 of them by earlier runs)" in capsys.readouterr().err
        assert main([*argv, "--max-calls", "4", "--resume", "--force"]) == 3
        assert server.requests == 4
        assert main([*argv, "--resume", "--force"]) == 0
        sent = server.requests
    manifest = json.loads((out / "manifest.json").read_text())
    assert sent == 6 and manifest["usage"]["lm_calls"] == sent
    assert any("the usage counts the earlier runs' 4 LM call(s)" in note for note in manifest["notes"])
