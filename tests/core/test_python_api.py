"""The Python API as the README teaches it (issue 21): the snippet runs as pasted (offline, with the LM line
the README itself says to use offline) and evaluates on questions its compile never saw; `ragzoo.configure`
gives programs ragzoo's lenient adapter, so a reply that slips its format is read as the CLI reads it; a
program from `ragzoo.load` runs under the adapter it was compiled with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dspy
import pytest

import ragzoo
from ragzoo import programs
from ragzoo.adapters import make_adapter
from ragzoo.stubserver import slip_answer
from ragzoo.testing import ScriptedLM

REPO = Path(__file__).resolve().parents[2]
OFFLINE = re.compile(r'^(?P<name>\w+) = "openai/gpt-4o-mini"(?P<rest>\s*#.*"dry-run".*)$', re.M)


def _readme_snippet() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture(autouse=True)
def _restore_dspy_settings():
    """`ragzoo.configure` sets DSPy's global settings, as the README does: put them back after each test."""
    before = {name: dspy.settings.get(name) for name in ("lm", "adapter")}
    yield
    dspy.configure(**before)


def _slipping_lm() -> ScriptedLM:
    """Every reply has its field headers in another style ("Answer: ..."): DSPy's ChatAdapter cannot read it."""
    return ScriptedLM(default=lambda context: slip_answer(context.system, "headers")[0])


def test_readme_python_snippet_runs_as_pasted_and_evaluates_on_unseen_questions(tmp_path, monkeypatch, capsys):
    snippet = _readme_snippet()
    assert OFFLINE.search(snippet), "the snippet names its LM on one line that says how to run it offline"
    offline = OFFLINE.sub(lambda m: f'{m["name"]} = "dry-run"{m["rest"]}', snippet, count=1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(offline, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    printed = capsys.readouterr().out
    assert printed.strip()  # the loaded program's answer
    config = json.loads((tmp_path / "runs" / "blendfilter" / "config.json").read_text())
    summary = json.loads((tmp_path / "runs" / "blendfilter" / "summary.json").read_text())
    assert summary["n"] > 0
    assert "compiled_on" in config
    leaked = config["compiled_on"] or {}
    assert not any(leaked.values()), leaked  # evaluated on questions the compile neither trained nor validated on
    manifest = json.loads((tmp_path / "artifacts" / "blendfilter" / "manifest.json").read_text())
    seen = manifest["seen_questions"]
    assert seen["train"] and seen["dev"] and not set(seen["train"]) & set(seen["dev"])  # validated on others


def test_configure_reads_a_slipped_reply_as_the_cli_does():
    lm = _slipping_lm()
    with dspy.context(lm=lm), pytest.raises(Exception):  # plain DSPy: a parse failure
        programs.get("direct")(question="Who wrote The Hobbit?")
    ragzoo.configure(lm=lm)
    prediction = programs.get("direct")(question="Who wrote The Hobbit?")
    assert prediction.answer


def test_configure_takes_a_spec_and_an_adapter():
    ragzoo.configure(lm="dry-run", adapter="json", max_reasks=1)
    assert dspy.settings.lm.model.startswith("dry-run")
    assert type(dspy.settings.adapter).__name__ == "LenientJSONAdapter"
    assert dspy.settings.adapter.max_reasks == 1


def _saved(tmp_path, adapter: str) -> Path:
    program = programs.get("direct")
    return ragzoo.save(program, tmp_path / f"art-{adapter}", method="direct", adapter=adapter, max_reasks=2)


def test_a_loaded_program_runs_under_the_lenient_adapter_it_was_compiled_with(tmp_path):
    path = _saved(tmp_path, "chat")
    lm = _slipping_lm()
    with dspy.context(lm=lm):  # the user set only the LM, as `dspy.configure(lm=...)` does
        prediction = ragzoo.load(path)(question="Who wrote The Hobbit?")
    assert prediction.answer


def test_a_loaded_json_program_asks_in_json(tmp_path, monkeypatch):
    path = _saved(tmp_path, "json")
    lm = ScriptedLM(default={"answer": "Tolkien"})
    ragzoo.configure(lm=lm)  # ragzoo's default adapter: the program's recorded one wins
    assert ragzoo.load(path)(question="Who wrote The Hobbit?").answer == "Tolkien"
    assert "json" in lm.calls[-1].prompt_text.lower()
    explicit = ScriptedLM(default={"answer": "Tolkien"})
    monkeypatch.setattr(ragzoo.adapters, "_warned", set())  # it warns once per process
    with dspy.context(lm=explicit, adapter=make_adapter("chat")), \
            pytest.warns(UserWarning, match="compiled under the json adapter and runs under the chat adapter"):
        ragzoo.load(path)(question="Who wrote The Hobbit?")  # the caller's explicit choice wins, with a warning
    assert "[[ ## answer ## ]]" in explicit.calls[-1].prompt_text


def test_a_library_evaluate_records_its_lm_and_method_as_the_cli_does(tmp_path):
    """Review: the README's Python snippet under `LM = "dry-run"` wrote a run that `report` showed as method "?"
    with em 0.000, scored as if real: the run recorded neither its LM nor its method."""
    import json

    import dspy

    from ragzoo import data, programs
    from ragzoo.lm import make_lm
    from ragzoo.retrieval import make_retriever
    from ragzoo.runs import evaluate

    program = programs.get("rag", retriever=make_retriever("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl"), k=2)
    with dspy.context(lm=make_lm("dry-run")):
        evaluate(program, data.load("hotpotqa", "dev_first500", n=2), "em", tmp_path / "run", progress=False)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["lm"]["dry_run"] is True and config["method"] == "rag" and config["knobs"]["k"] == 2


def test_a_run_written_before_its_lm_and_method_were_recorded_still_resumes(tmp_path):
    """Diff review: recording the LM, method and optimizer also on a resume made a run written before (with none of
    them) refused as another run's ("--optimizer was null, now 'bootstrap'")."""
    import json

    import dspy

    from ragzoo import data, programs
    from ragzoo.lm import make_lm
    from ragzoo.retrieval import make_retriever
    from ragzoo.runs import evaluate

    program = programs.get("rag", retriever=make_retriever("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl"), k=2)
    questions = data.load("hotpotqa", "dev_first500", n=3)
    with dspy.context(lm=make_lm("dry-run")):
        evaluate(program, questions[:2], "em", tmp_path / "run", progress=False)
        config_file = tmp_path / "run" / "config.json"
        config = json.loads(config_file.read_text())
        for key in ("lm", "method", "knobs"):  # as an earlier version wrote a library caller's run
            config.pop(key, None)
        config_file.write_text(json.dumps(config))
        summary = evaluate(program, questions, "em", tmp_path / "run", progress=False, resume=True)
    assert summary["n"] == 3
