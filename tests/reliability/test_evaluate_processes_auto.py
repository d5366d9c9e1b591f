"""`evaluate --threads T` without `--processes`: past 64 requests in flight (one interpreter's CPU per LM call grows
with the lock's contention past that, benchmarks/throughput.py) the questions are split over worker processes by
themselves, one per usable CPU at most; `--processes` given, a budget, one CPU or a lower --max-concurrency keep
one process. The machine's CPU count is set by the test, so the split does not depend on where it runs."""

from __future__ import annotations

import json

import pytest

from ragzoo.stubserver import StubLMServer


def _argv(server, data, corpus, out, *extra):
    return ["evaluate", "--method", "rag", "--knob", "k=3", "--retriever", f"bm25:{corpus}", "--data", data,
            "--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--out", out, "--no-cache", *extra]


def _summary(run):
    return json.loads((run / "summary.json").read_text())


@pytest.fixture
def cpus(monkeypatch):
    import ragzoo.runs

    def set_cpus(count: int) -> None:
        monkeypatch.setattr(ragzoo.runs, "usable_cpus", lambda: count)

    return set_cpus


def test_many_threads_are_split_over_processes(tmp_path, cli, cpus, questions_file, small_corpus, helpers):
    cpus(2)
    data = questions_file(100)
    with StubLMServer(responder=helpers.digest_responder, latency=0.02) as server:
        result = cli(*_argv(server, data, small_corpus, tmp_path / "run", "--threads", "100", "--max-concurrency",
                            "100"))
        assert result.code == 0, result.err
        assert server.requests == 100
    summary = _summary(tmp_path / "run")
    assert summary["n"] == 100 and summary["failures"] == 0
    assert (summary["processes"], summary["threads"]) == (2, 50)
    assert "100 threads run as 2 processes of 50 threads" in result.err
    assert len([line for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]) == 100


def test_four_cpus_and_256_threads_make_four_processes(tmp_path, cli, cpus, questions_file, small_corpus, helpers):
    cpus(4)
    data = questions_file(70)  # fewer questions than threads: 70 in flight at most, so 2 processes of 35
    with StubLMServer(responder=helpers.digest_responder, latency=0.02) as server:
        result = cli(*_argv(server, data, small_corpus, tmp_path / "run", "--threads", "256", "--max-concurrency",
                            "256"))
        assert result.code == 0, result.err
    assert (_summary(tmp_path / "run")["processes"], _summary(tmp_path / "run")["threads"]) == (2, 35)


@pytest.mark.parametrize("case", ["explicit", "one_cpu", "concurrency", "budget", "few"])
def test_one_process_kept(tmp_path, cli, cpus, questions_file, small_corpus, helpers, case):
    cpus(1 if case == "one_cpu" else 2)
    data = questions_file(40 if case == "few" else 80)
    extra = {"explicit": ["--processes", "1"], "one_cpu": [], "concurrency": ["--max-concurrency", "64"],
             "budget": ["--max-calls", "1000"], "few": []}[case]
    if case != "concurrency":
        extra += ["--max-concurrency", "80"]
    with StubLMServer(responder=helpers.digest_responder, latency=0.0) as server:
        result = cli(*_argv(server, data, small_corpus, tmp_path / "run", "--threads", "80", *extra))
        assert result.code == 0, result.err
    summary = _summary(tmp_path / "run")
    assert (summary["processes"], summary["threads"]) == (1, 80) and summary["failures"] == 0
    assert "processes of" not in result.err


def test_processes_from_a_config_file(tmp_path, cli, cpus, questions_file, small_corpus, helpers):
    """`processes = 2` in a --config file is an integer as the flag is (its default, None, has no type to go by);
    `processes = "two"` is one line naming it."""
    cpus(2)
    data = questions_file(12)
    with StubLMServer(responder=helpers.digest_responder, latency=0.0) as server:
        for value, run in (("2", "two"), ("1", "one")):
            config = tmp_path / f"{run}.toml"
            config.write_text(f"processes = {value}\nthreads = 2\n")
            result = cli(*_argv(server, data, small_corpus, tmp_path / run, "--config", config))
            assert result.code == 0, result.err
            assert _summary(tmp_path / run)["processes"] == int(value)
        config = tmp_path / "bad.toml"
        config.write_text('processes = "two"\n')
        result = cli(*_argv(server, data, small_corpus, tmp_path / "bad", "--config", config))
        assert result.code not in (0, None) and "processes" in result.err and "Traceback" not in result.err
        assert len(result.err.strip().splitlines()) == 1, result.err


def test_a_judged_metric_keeps_one_process(tmp_path, cpus, capsys):
    """The judge's meter is per process and summary.json reports the parent's: a split run would report the judge's
    calls, cost and failed verdicts as zero, so a judged metric keeps one process unless --processes asks."""
    from ragzoo.cli import main

    cpus(2)
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "hotpotqa", "--split",
                 "dev_distractor", "--lm", "dry-run", "--metric", "em,judge_faithful", "--judge-lm", "dry-run",
                 "-n", "80", "--threads", "80", "--max-concurrency", "80", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    summary = _summary(out)
    assert (summary["processes"], summary["threads"]) == (1, 80)
    assert summary["judge"]["lm_calls"] == 80
    assert "processes of" not in capsys.readouterr().err
