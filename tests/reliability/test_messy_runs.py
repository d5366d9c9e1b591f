"""Real models are messy (issue 14), through `ragzoo evaluate` and `ragzoo.runs.evaluate` against the loopback
stub: a hung request cannot hang a run, --retry-failed re-runs exactly the failed examples, a broken setup
stops the run early with a non-zero exit, failures exit non-zero, pre-flight fails in one line, every
method runs under each adapter, re-asks and degradations are counted per example and in the summary."""

from __future__ import annotations

import json
import socket
import time

import dspy
import pytest

from ragzoo import programs
from ragzoo.runs import evaluate
from ragzoo.stubserver import StubLMServer
from ragzoo.testing import StaticRetriever, make_passages


def make_examples(n: int) -> list:
    return [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answers=[f"answer {i}"],
                         answer=f"answer {i}").with_inputs("question") for i in range(n)]


def _records(run):
    return {r["id"]: r for r in map(json.loads, (run / "predictions.jsonl").read_text().splitlines())}


def _stub_args(server):
    return ["--lm", "openai/stub-model", "--api-base", server.base_url + "/v1", "--no-cache"]


def test_a_hung_request_is_a_timeout_failure_and_retry_failed_reruns_only_it(tmp_path, cli, questions_file,
                                                                               monkeypatch):
    import ragzoo.runs

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    monkeypatch.setattr(ragzoo.runs, "LATE_GRACE", 0.2)  # its hung request never returns: no use waiting 3 s
    data = questions_file(50)
    hang_on = "what is item 17?"

    def faults(index, body):  # 1 request in 50 hangs forever (until the server stops)
        return "hang" if hang_on in json.dumps(body) and not faults.served else None

    faults.served = False
    with StubLMServer(faults=lambda i, b: _once(faults, i, b), latency=0.01) as server:
        started = time.perf_counter()
        result = cli("evaluate", "--method", "direct", "--data", data, *_stub_args(server), "--threads", "8",
                     "--deadline", "1.5", "--timeout", "30", "--out", tmp_path / "run")
        seconds = time.perf_counter() - started
        assert result.code == 4, result.err  # finished, with a failure: non-zero unless --allow-failures
        records = _records(tmp_path / "run")
        assert len(records) == 50 and seconds < 1.5 + 8
        failed = [r for r in records.values() if r["error"]]
        assert [r["question"] for r in failed] == [hang_on] and failed[0]["error"]["kind"] == "timeout"
        assert "deadline" in failed[0]["error"]["message"] and "\n" not in failed[0]["error"]["message"]
        assert "1 of 50 examples failed (timeout: 1)" in result.err
        before = server.requests
        again = cli("evaluate", "--method", "direct", "--data", data, *_stub_args(server), "--threads", "8",
                    "--deadline", "1.5", "--out", tmp_path / "run", "--retry-failed")
        assert again.code == 0, again.err
        assert server.requests == before + 1  # exactly the failed example, once
    records = _records(tmp_path / "run")
    assert len(records) == 50 and not any(r["error"] for r in records.values())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures"] == 0 and summary["n"] == 50


def _once(state, index, body):
    fault = state(index, body)
    if fault:
        state.served = True
    return fault


def test_a_broken_setup_stops_early_with_a_non_zero_exit(tmp_path, cli, questions_file, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer(faults=lambda index, body: "400") as server:  # every chat request refused
        result = cli("evaluate", "--method", "direct", "--data", questions_file(40), *_stub_args(server),
                     "--threads", "2", "--out", tmp_path / "run")
    assert result.code == 5, result.err
    assert "stopped early" in result.err and "looks broken" in result.err
    assert len(result.err_lines) <= 5 and all(len(line) < 600 for line in result.err_lines)
    assert 10 <= len(_records(tmp_path / "run")) < 40  # stopped after the first 10 (+ those in flight)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["aborted"] and summary["complete"] is False


def test_preflight_fails_in_one_line_before_any_work(tmp_path, cli, questions_file, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = cli("evaluate", "--method", "direct", "--data", questions_file(20), "--lm", "openai/stub-model",
                 "--api-base", f"http://127.0.0.1:{port}/v1", "--out", tmp_path / "run")
    assert result.code == 2 and len(result.err_lines) == 1 and "cannot reach the LM server" in result.err
    assert not (tmp_path / "run").exists()
    monkeypatch.delenv("OPENAI_API_KEY")
    result = cli("evaluate", "--method", "direct", "--data", questions_file(20), "--lm", "openai/gpt-4o-mini",
                 "--out", tmp_path / "run")
    assert result.code == 2 and len(result.err_lines) == 1 and "OPENAI_API_KEY is not set" in result.err


def test_slips_are_counted_per_example_and_in_the_summary(tmp_path, cli, questions_file, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer(slips=lambda index, body: "empty" if index == 0 else "words" if index == 2 else None) as server:
        result = cli("evaluate", "--method", "cot", "--data", questions_file(3), *_stub_args(server),
                     "--adapter", "json", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    records = _records(tmp_path / "run")
    assert sum(r["reasks"] for r in records.values()) == 1 and sum(r["lm_calls"] for r in records.values()) == 4
    assert all(r["error"] is None for r in records.values())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reasks"] == 1 and summary["examples_reasked"] == 1 and summary["adapter"] == "json"
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["adapter"] == "json" and config["lenient"] is True
    assert "re-asks=1 (1 questions)" in result.out


def test_resume_extends_a_run_to_more_questions(tmp_path):
    retriever = StaticRetriever(make_passages(5))
    program = programs.get("rag", retriever=retriever, k=2)
    examples = make_examples(5)
    with StubLMServer() as server:
        from ragzoo.lm import make_lm

        with dspy.context(lm=make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False)):
            evaluate(program, examples[:3], "em", tmp_path / "run", progress=False)
            summary = evaluate(program, examples, "em", tmp_path / "run", resume=True, progress=False)
    assert summary["n"] == 5 and summary["resumed_from"] == 3 and server.requests == 5


@pytest.mark.parametrize("adapter", ["chat", "json", "xml"])
def test_every_method_runs_under_each_adapter(adapter):
    from ragzoo.lm import make_lm

    retriever = StaticRetriever(make_passages(6))
    examples = make_examples(1)
    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False)
        failures = {}
        for method in programs.methods():
            program = programs.get(method, retriever=retriever)
            with dspy.context(lm=lm):
                summary = evaluate(program, examples, "em", None, adapter=adapter, progress=False)
            record = summary["records"][0]
            if record["error"] or record["reasks"] or not record["lm_calls"]:
                failures[method] = (record["error"], record["reasks"])
    assert failures == {}
    assert server.requests > len(programs.methods())


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_during_evaluate_is_one_line_and_keeps_what_finished(tmp_path, questions_file, helpers, stop):
    """Ctrl-C used to print 'finished work is kept' and then one error dump per running thread, each with the
    whole example, as the threads wrote into the closed predictions file. SIGTERM (a scheduler's stop) stops the
    same way and says so, status 143 (it exited silently; found by review)."""
    import signal
    import subprocess

    data = questions_file(40)
    run = tmp_path / "run"
    with StubLMServer(latency=1.0) as server:
        process = subprocess.Popen(
            [helpers.PYTHON, "-m", "ragzoo.cli", "evaluate", "--method", "direct", "--data", str(data),
             "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1", "--threads", "8", "--no-cache",
             "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=helpers.subprocess_env())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                (run / "predictions.jsonl").exists() and len((run / "predictions.jsonl").read_text().splitlines()) >= 8):
            time.sleep(0.1)
        process.send_signal(getattr(signal, stop))
        out, err = process.communicate(timeout=60)
    assert process.returncode == (130 if stop == "SIGINT" else 143), err
    said = [line for line in err.splitlines() if line.startswith("ragzoo evaluate: ")]
    assert len(said) == 1 and said[0].startswith("ragzoo evaluate: interrupted; " if stop == "SIGINT" else
                                                 "ragzoo evaluate: stopped (SIGTERM); "), err
    assert "Example(" not in err and "Error for" not in err and "closed file" not in err, err
    kept = helpers.read_jsonl_strict(run / "predictions.jsonl")
    assert 8 <= len(kept) < 40 and all(r["error"] is None for r in kept)
