"""One secrets rule at every boundary that writes: a grid's grid.json, cell logs and runs, a run's predictions,
summary and config, an Optuna storage, an artifact's program.json and a compile checkpoint keep no credential
given in `--api-base` (user:password, a query value, a key as a path segment) and no key an upstream echoes
back in its answers (the environment's key, caught by its value: it is not shaped like a provider key)."""

from __future__ import annotations

import json

import pytest

GRID = """
[grid]
name = "secrets"
n = 2

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]

[[methods]]
id = "direct"
"""


@pytest.mark.parametrize("form", ["userinfo", "query", "path-segment"])
def test_a_sweep_stores_no_credential_of_its_api_base(helpers, form, tmp_path, cli, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    secret = {"userinfo": "Pa55wordSweep77", "query": "qk3yValueSweep0042",
              "path-segment": "pk3yValueSweep0042xyzQ"}[form]
    (tmp_path / "grid.toml").write_text(GRID, encoding="utf-8")
    with StubLMServer() as server:
        host = server.base_url.removeprefix("http://")
        api_base = {"userinfo": f"http://sweeper:{secret}@{host}/v1",
                    "query": f"http://{host}/v1?api_key={secret}",
                    "path-segment": f"http://{host}/{secret}/v1"}[form]
        result = cli("sweep", tmp_path / "grid.toml", "--lm", "openai/stub", "--api-base", api_base, "--no-cache",
                     "--out", tmp_path / "grid", "--quiet")
    assert secret not in result.out and secret not in result.err
    if form in ("userinfo", "query"):  # credentials in the URL: refused once, before the grid folder is written
        assert result.code == 2 and len(result.err_lines) == 1 and "carries credentials" in result.err
        assert not (tmp_path / "grid").exists()
        return
    grid = json.loads((tmp_path / "grid" / "grid.json").read_text())
    assert grid["lms"][0]["api_base"].startswith(server.base_url)  # the endpoint is kept, without credentials
    assert list((tmp_path / "grid" / "cells").iterdir())  # the cell ran (or was refused) and left its files
    assert helpers.files_holding(tmp_path / "grid", secret) == []
    assert secret not in result.out and secret not in result.err


def test_a_shared_storage_and_the_grid_keep_no_key_echoed_by_the_upstream(helpers, tmp_path, cli, monkeypatch):
    """Workers sharing an Optuna storage: the database, grid.json, cell logs and runs keep no trace of the key
    the upstream echoed in every answer."""
    import sqlite3

    from ragzoo.stubserver import StubLMServer

    key = "gridechoedsecret0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    (tmp_path / "grid.toml").write_text(GRID, encoding="utf-8")
    storage = tmp_path / "grid.db"
    with StubLMServer(faults=helpers.echo_faults) as server:
        result = cli("sweep", tmp_path / "grid.toml", "--lm", "openai/stub", "--no-cache", "--quiet",
                     "--api-base", f"{server.base_url}/v1", "--out", tmp_path / "grid",
                     "--storage", f"sqlite:///{storage}")
        assert server.requests > 0  # the key went to the upstream and came back in its answers
    with sqlite3.connect(storage) as db:  # the cell was claimed through the storage
        assert db.execute("select count(*) from trials").fetchone()[0] >= 1
    (run,) = (tmp_path / "grid" / "cells").glob("*/run")
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert records and all("(you sent me ***)" in r["prediction"] for r in records), records
    assert helpers.files_holding(tmp_path, key) == []
    assert key not in result.out and key not in result.err


def test_an_upstream_that_echoes_the_key_in_its_answers_gets_it_stored_nowhere(helpers, tmp_path, cli, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    key = "echoedsecretvalue9876543210"  # not shaped like a provider key: only its value can be recognised
    monkeypatch.setenv("OPENAI_API_KEY", key)
    data = tmp_path / "questions.jsonl"  # one question even quotes the key: it is kept as *** and resumes as itself
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": question, "answers": ["a"]}) + "\n" for i, question
                            in enumerate(["who?", "what?", f"is {key} a key?"])), encoding="utf-8")
    argv = ["evaluate", "--method", "direct", "--data", data, "--lm", "openai/stub", "--no-cache", "--out",
            tmp_path / "run"]
    with StubLMServer(faults=helpers.echo_faults) as server:
        result = cli(*argv, "--api-base", server.base_url + "/v1")
        assert server.faults_served >= 3
        again = cli(*argv, "--api-base", server.base_url + "/v1", "--resume")
    assert result.code == 0, result.err
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["prediction"].endswith("(you sent me ***)") for r in records)
    assert records[2]["question"] == "is *** a key?"
    assert helpers.files_holding(tmp_path / "run", key) == []
    assert key not in result.out + result.err
    assert again.code == 0 and server.requests == 3, again.err  # resumed: nothing to redo


def test_a_reask_reason_cut_short_keeps_no_prefix_of_the_key(monkeypatch):
    """A trace entry is cut to 200 characters: the key is hidden before the cut, or its first characters
    (no longer the whole known value) would be kept."""
    from ragzoo.tracing import record_degradation, record_reask, trace_example

    key = "tracesecretvalue0123456789"
    monkeypatch.setenv("RAGZOO_TEST_API_KEY", key)
    with trace_example() as trace:
        record_reask("answer", "x" * 190 + f" the reply was: {key}")
        record_degradation("filter", "y" * 290 + f" reply {key}")
    kept = json.dumps([trace.reasks, trace.degradations])
    assert key[:6] not in kept and "***" in kept


def test_a_compiled_program_keeps_no_key_echoed_into_its_demos(helpers, tmp_path, monkeypatch):
    """Bootstrapped demos are LM outputs: an artifact's program.json keeps the demo, with the key as ***."""
    import dspy

    from ragzoo import programs
    from ragzoo.artifacts import load, save

    key = "demosecretvalue0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    program = programs.get("direct")
    (_name, predictor), = program.named_predictors()
    predictor.demos = [dspy.Example(question="who?", answer=f"placeholder (you sent me {key})").with_inputs("question")]
    out = save(program, tmp_path / "artifact", method="direct")
    assert helpers.files_holding(out, key) == []
    (_name, loaded), = load(out).named_predictors()
    assert [demo["answer"] for demo in loaded.demos] == ["placeholder (you sent me ***)"]


def test_a_compile_checkpoint_keeps_no_key_echoed_into_its_traces(helpers, tmp_path, monkeypatch):
    """An interrupted compile keeps its bootstrapped traces (LM outputs) beside --out until it resumes."""
    from ragzoo.optimizers.compiler import CompileCheckpoint

    key = "checkpointsecretvalue0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    checkpoint = CompileCheckpoint(tmp_path / "checkpoint", {"method": "direct"})
    checkpoint.write("bootstrap.json", {"next_index": 1, "name2traces": {"answer": [
        {"question": "who?", "answer": f"placeholder (you sent me {key})"}]}})
    assert helpers.files_holding(tmp_path, key) == []
    assert checkpoint.read("bootstrap.json")["name2traces"]["answer"][0]["answer"] == "placeholder (you sent me ***)"


def test_gepa_s_own_state_files_keep_no_key_echoed_by_the_upstream(helpers, tmp_path, cli, monkeypatch):
    """GEPA writes its state into the compile checkpoint itself (`log_dir`: gepa_state.bin, the seed's valset
    outputs as JSON, candidates), past every writer of ragzoo's (found by review). The LM's replies are scrubbed
    as they come back (`secrets.scrub_reply`), so what GEPA keeps of them has no key either."""
    from ragzoo.stubserver import StubLMServer

    key = "gepastatesecretvalue0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i}?", "answers": ["a"]}) + "\n"
                            for i in range(12)), encoding="utf-8")
    with StubLMServer(faults=helpers.echo_faults) as server:
        result = cli("compile", "--method", "direct", "--data", data, "--optimizer", "gepa:light", "--train-n", "8",
                     "--dev-n", "4", "--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--no-cache",
                     "--out", tmp_path / "compiled", "--max-calls", "40")
        assert server.requests >= 8, result.err  # GEPA evaluated its seed program: the upstream echoed the key
    gepa = tmp_path / "compiled.checkpoint" / "gepa"
    assert result.code == 3 and (gepa / "gepa_state.bin").is_file(), (result.code, result.err)  # kept on the budget
    assert any(path.suffix == ".json" for path in gepa.rglob("*")), sorted(gepa.rglob("*"))
    assert "***" in "".join(path.read_text() for path in gepa.rglob("*.json"))  # the echo, scrubbed
    assert helpers.files_holding(tmp_path, key) == []
