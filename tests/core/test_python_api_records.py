"""What a Python compile-then-save-then-evaluate records, as the CLI does (review of the Python API): the adapter a
program was compiled under goes into its manifest and `load` runs it so; an evaluation records the adapter the
program ran under; a run records its retriever, so `resume` refuses another; a report names the optimizer of a
loaded program; the judge's totals are each evaluation's own."""

from __future__ import annotations

import json

import dspy
import pytest

import ragzoo
from ragzoo import programs
from ragzoo.adapters import default_adapter, make_adapter
from ragzoo.lm import make_dry_run_lm
from ragzoo.optimizers import compile_program
from ragzoo.runs import evaluate


def _static():
    from ragzoo.testing import StaticRetriever

    return StaticRetriever([])


def _examples(n: int, prefix: str = "q") -> list:
    return [dspy.Example(id=f"{prefix}{i}", question=f"what is item {i}?", answers=[f"answer {i}"],
                         answer=f"answer {i}").with_inputs("question") for i in range(n)]


def test_a_program_compiled_and_saved_from_python_keeps_its_adapter_and_runs_under_it(tmp_path):
    lm = make_dry_run_lm()
    with dspy.context(lm=lm, adapter=make_adapter("json")):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="labeled")
    ragzoo.save(result.program, tmp_path / "art")
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["adapter"] == "json" and manifest["max_reasks"] == 2
    loaded = ragzoo.load(tmp_path / "art")
    with dspy.context(lm=lm, adapter=default_adapter()):  # what ragzoo.configure(lm=...) sets: no choice
        summary = evaluate(loaded, _examples(2, "t"), "em", str(tmp_path / "run"), progress=False)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["adapter"] == "json" and config["lenient"] is True and summary["n"] == 2
    with dspy.context(lm=lm):  # plain dspy.configure(lm=...): no adapter at all, the program's own is in force
        evaluate(loaded, _examples(2, "t"), "em", str(tmp_path / "run2"), progress=False)
    assert json.loads((tmp_path / "run2" / "config.json").read_text())["adapter"] == "json"
    with dspy.context(lm=lm, adapter=make_adapter("chat")), pytest.warns(UserWarning, match="compiled under"):
        evaluate(loaded, _examples(2, "t"), "em", str(tmp_path / "run3"), progress=False)  # the caller's choice
    assert json.loads((tmp_path / "run3" / "config.json").read_text())["adapter"] == "chat"


def test_a_python_run_records_its_retriever_and_a_resume_with_another_is_refused(tmp_path):
    from ragzoo.errors import RunError
    from ragzoo.retrieval.base import Passage
    from ragzoo.testing import StaticRetriever

    def retriever(name: str) -> StaticRetriever:
        found = StaticRetriever([Passage(pid=f"{name}{i}", title=f"T{i}", text=f"item {i} answer {i}")
                                 for i in range(3)])
        found.spec = f"bm25:{name}.jsonl"
        return found

    examples = _examples(4, "t")
    with dspy.context(lm=make_dry_run_lm()):
        evaluate(programs.get("rag", retriever=retriever("wiki17")), examples[:2], "em", str(tmp_path / "run"),
                 progress=False)
        assert json.loads((tmp_path / "run" / "config.json").read_text())["retriever"] == "bm25:wiki17.jsonl"
        with pytest.raises(RunError, match="retriever"):
            evaluate(programs.get("rag", retriever=retriever("wiki18")), examples, "em", str(tmp_path / "run"),
                     resume=True, progress=False)
        summary = evaluate(programs.get("rag", retriever=retriever("wiki17")), examples, "em", str(tmp_path / "run"),
                           resume=True, progress=False)
    assert summary["n"] == 4


def test_a_report_names_the_optimizer_of_a_loaded_program_evaluated_from_python(tmp_path, capsys):
    from ragzoo.cli import main

    lm = make_dry_run_lm()
    with dspy.context(lm=lm):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="labeled")
        ragzoo.save(result.program, tmp_path / "art", optimizer="labeled")
        evaluate(ragzoo.load(tmp_path / "art"), _examples(2, "t"), "em", str(tmp_path / "run"), progress=False)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "labeled" in out and "none (uncompiled)" not in out


@pytest.mark.parametrize("call, says", [
    (lambda tmp: evaluate(programs.get("direct"), _examples(2), None, None), "metrics must be"),
    (lambda tmp: evaluate(programs.get("direct"), _examples(2), "em", None, abort_failure_rate="x"),
     "abort-failure-rate"),
    (lambda tmp: evaluate(programs.get("direct"), _examples(2), "em", None, deadline=float("nan")), "deadline"),
    (lambda tmp: evaluate("rag", _examples(2), "em", None), "takes a program"),
    (lambda tmp: evaluate(dspy.Predict, _examples(2), "em", None), "takes a program"),
    (lambda tmp: ragzoo.load(3), "folder path"),
    (lambda tmp: ragzoo.save(programs.get("rag", retriever=_static(), k=3), tmp / "art", knobs={"k": 99}),
     "not those the program"),
])
def test_python_misuse_is_one_clear_error(tmp_path, call, says):
    """Review: each was a TypeError/ValueError from deep inside, or ran every question to fail the same way."""
    from ragzoo.errors import RagzooError

    with dspy.context(lm=make_dry_run_lm()), pytest.raises(RagzooError, match=says):
        call(tmp_path)
    assert not (tmp_path / "art").exists()


def test_evaluate_without_an_lm_stops_early_as_a_broken_setup(tmp_path):
    """Review: with no LM configured, every question ran (retrieval included) and failed as "other", so the
    early stop of a broken setup never came; DSPy's "No LM is loaded" is an LM failure now. A program that brings
    its own LM (`dspy.context(lm=...)` in its forward) still runs: refusing up front would refuse it."""
    assert dspy.settings.lm is None
    summary = evaluate(programs.get("direct"), _examples(30), "em", str(tmp_path / "run"), progress=False)
    assert summary["aborted"] and "No LM is loaded" in summary["aborted"] and summary["n"] == 10
    assert summary["failures_by_kind"] == {"lm": 10}

    class OwnLM(dspy.Module):
        def __init__(self):
            super().__init__()
            self.answer = dspy.Predict("question -> answer")
            self.own = make_dry_run_lm()

        def forward(self, question):
            with dspy.context(lm=self.own):
                return self.answer(question=question)

    summary = evaluate(OwnLM(), _examples(2), "em", str(tmp_path / "own"), progress=False)
    assert summary["n"] == 2 and summary["failures"] == 0


def test_a_retriever_given_as_a_spec_is_built_and_a_wrong_one_is_refused(tmp_path):
    """Review: a spec string was taken as the retriever, and every question failed "'str' object is not callable"."""
    from ragzoo.errors import ConfigError

    corpus = tmp_path / "c.jsonl"
    words = ["river", "mountain", "castle", "violin", "comet"]
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": word.title(), "text": f"A {word} of note."})
                              + "\n" for i, word in enumerate(words)))
    program = programs.get("rag", retriever=f"bm25:{corpus}", k=2)
    assert [p.pid for p in program.retriever("the violin", 1)] == ["p3"]
    with pytest.raises(ConfigError, match="retriever must be"):
        programs.get("rag", retriever=5)
    with pytest.raises(ConfigError, match="lm must be"):
        ragzoo.configure(lm=3)


def test_a_run_an_earlier_version_recorded_under_the_default_adapter_resumes_and_is_corrected(tmp_path):
    """Review of the fix: a loaded json program's run, written when `evaluate` recorded the caller's default "chat",
    could not be resumed (no adapter gets past "was chat, now json"): its answers came from json all along."""
    from ragzoo.errors import RunError

    lm = make_dry_run_lm()
    with dspy.context(lm=lm, adapter=make_adapter("json")):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="labeled")
    ragzoo.save(result.program, tmp_path / "art")
    loaded = ragzoo.load(tmp_path / "art")
    examples = _examples(4, "t")
    with dspy.context(lm=lm, adapter=default_adapter()):
        evaluate(loaded, examples[:2], "em", str(tmp_path / "run"), progress=False)
        path = tmp_path / "run" / "config.json"
        written = json.loads(path.read_text())
        assert written.pop("adapter_in_force") is True
        path.write_text(json.dumps({**written, "adapter": "chat"}))  # as a version before the fix wrote it
        summary = evaluate(loaded, examples, "em", str(tmp_path / "run"), resume=True, progress=False)
    assert summary["n"] == 4 and json.loads(path.read_text())["adapter"] == "json"
    # a run of this version that ran under chat by the caller's choice: a resume under json would mix the two
    with dspy.context(lm=lm, adapter=default_adapter()):
        evaluate(loaded, examples[:2], "em", str(tmp_path / "chosen"), adapter="chat", progress=False)
        with pytest.raises(RunError, match="adapter"):
            evaluate(loaded, examples, "em", str(tmp_path / "chosen"), resume=True, progress=False)
    path.write_text(json.dumps({**json.loads(path.read_text()), "adapter": "xml"}))  # another adapter: refused
    with dspy.context(lm=lm, adapter=default_adapter()), pytest.raises(RunError, match="adapter"):
        evaluate(loaded, examples, "em", str(tmp_path / "run"), resume=True, progress=False)


def test_saving_records_only_an_adapter_load_can_build_and_a_loaded_program_keeps_its_own(tmp_path):
    """Review of the fix: a user's own adapter class was recorded by its class name (load then refused the
    artifact), and a loaded json program re-saved under an active chat adapter was recorded as chat."""
    class MyAdapter(dspy.ChatAdapter):
        adapter_name = "mine"

    lm = make_dry_run_lm()
    with dspy.context(lm=lm, adapter=MyAdapter()):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="labeled")
    ragzoo.save(result.program, tmp_path / "mine")
    assert "adapter" not in json.loads((tmp_path / "mine" / "manifest.json").read_text())
    assert ragzoo.load(tmp_path / "mine") is not None
    with dspy.context(lm=lm, adapter=make_adapter("json")):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="bootstrap")
    ragzoo.save(result.program, tmp_path / "json")
    manifest = json.loads((tmp_path / "json" / "manifest.json").read_text())
    assert manifest["adapter"] == "json" and manifest["optimizer"] == "bootstrap"  # the compile's, unasked
    with dspy.context(lm=lm, adapter=make_adapter("chat")):
        ragzoo.save(ragzoo.load(tmp_path / "json"), tmp_path / "again")
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["adapter"] == "json"


def test_a_loaded_program_keeps_its_optimizer_saved_again_and_takes_a_new_one_compiled_again(tmp_path):
    lm = make_dry_run_lm()
    with dspy.context(lm=lm):
        result = compile_program(programs.get("direct"), trainset=_examples(4), valset=[], optimizer="labeled")
        ragzoo.save(result.program, tmp_path / "art")
        ragzoo.save(ragzoo.load(tmp_path / "art"), tmp_path / "again")
        assert json.loads((tmp_path / "again" / "manifest.json").read_text())["optimizer"] == "labeled"
        again = compile_program(ragzoo.load(tmp_path / "art"), trainset=_examples(4), valset=[],
                                optimizer="bootstrap")
        evaluate(again.program, _examples(2, "t"), "em", str(tmp_path / "run"), progress=False)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["optimizer"] == "bootstrap"
