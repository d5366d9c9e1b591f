"""SIGKILL at random points of `ragzoo evaluate` and `ragzoo compile` (subprocesses, stub LM with latency).

evaluate: `--resume` then finishes with every example exactly once, every line valid JSON, summary.json valid.
compile: the --out directory is either absent or a complete artifact that `ragzoo.artifacts.load` accepts;
never a half-written one it would trust; and a rerun of the same command succeeds."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ragzoo.stubserver import StubLMServer

N = 14
SEEDS = [0, 1, 2]


def _start(python: str, argv: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([python, "-m", "ragzoo.cli", *map(str, argv)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return -1


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    process.stdout.close()
    process.stderr.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_killed_evaluate_resumes_with_every_example_once(tmp_path, seed, helpers, cli, monkeypatch):
    rng = random.Random(seed)
    data = helpers.write_questions(tmp_path / "questions.jsonl", N)
    run = tmp_path / "run"
    predictions = run / "predictions.jsonl"
    with StubLMServer(latency=0.04) as server:
        argv = ["evaluate", "--method", "direct", "--data", data, "--lm", "openai/stub", "--api-base",
                server.base_url + "/v1", "--out", run, "--threads", "2", "--no-cache"]
        env = helpers.subprocess_env()
        process = _start(helpers.PYTHON, argv, env)
        threshold = rng.randint(0, N - 4)  # finished lines before the kill (0 = right after the run dir appears)
        deadline = time.monotonic() + 60
        while _count_lines(predictions) < threshold and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))
        assert process.poll() is None, "the run finished before the kill; raise N or the latency"
        _kill(process)
        before = _count_lines(predictions)
        assert before < N

        # the resume runs in-process (same CLI entry point; saves an interpreter start-up per seed)
        monkeypatch.setenv("OPENAI_API_KEY", env["OPENAI_API_KEY"])
        resumed = cli(*argv, "--resume")
    assert resumed.code == 0, resumed.err[-2000:]
    records = helpers.read_jsonl_strict(predictions)
    ids = [r["id"] for r in records]
    assert sorted(ids) == sorted(f"q{i}" for i in range(N)) and len(ids) == len(set(ids)) == N
    assert all(r["error"] is None for r in records)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n"] == N and summary["complete"] is True and summary["failures"] == 0
    assert summary["resumed_from"] == max(before, 0) or summary["resumed_from"] == max(before - 1, 0)
    json.loads((run / "config.json").read_text())
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # no stray temp file


def _artifact_state(out: Path) -> str:
    """'absent', or 'complete' (loads); anything else fails the test."""
    from ragzoo.artifacts import load
    from ragzoo.errors import ArtifactError

    if not out.exists():
        return "absent"
    assert {p.name for p in out.iterdir()} >= {"manifest.json", "program.json"}, list(out.iterdir())
    try:
        load(out, retriever_spec=None)
    except ArtifactError as error:  # pragma: no cover - the failure we guard against
        pytest.fail(f"a killed compile left {out} that does not load: {error}")
    return "complete"


@pytest.mark.parametrize("seed", SEEDS)
def test_killed_compile_leaves_no_half_written_artifact(tmp_path, seed, helpers, cli, monkeypatch):
    rng = random.Random(100 + seed)
    out = tmp_path / "artifact"
    with StubLMServer(latency=0.03) as server:
        argv = ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "6", "--dev-n", "4",
                "--optimizer", "bootstrap", "--lm", "openai/stub", "--api-base", server.base_url + "/v1",
                "--out", out, "--no-cache"]
        env = helpers.subprocess_env()
        process = _start(helpers.PYTHON, argv, env)
        # the whole compile makes ~10 LM calls; kill after a random number of them (or while starting up)
        threshold = rng.randint(0, 10)
        deadline = time.monotonic() + 60
        while server.requests < threshold and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.1))
        finished_first = process.poll() is not None
        _kill(process)
        state = _artifact_state(out)
        if finished_first:
            assert state == "complete"
        # a rerun of the same command after the kill is not blocked by anything the killed one left
        # (in-process, same CLI entry point)
        monkeypatch.setenv("OPENAI_API_KEY", env["OPENAI_API_KEY"])
        rerun = cli(*argv, "--force")
    assert rerun.code == 0, rerun.err[-2000:]
    assert _artifact_state(out) == "complete"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["method"] == "direct"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("artifact",)]
    for name in leftovers:  # staging folders of a killed compile must not look like an artifact to load()
        from ragzoo.artifacts import load
        from ragzoo.errors import ArtifactError

        with pytest.raises(ArtifactError):
            load(tmp_path / name)
