"""`evaluate --processes N`: the questions split over N worker processes give the same records as threads, the
parent alone writes the run (resume, Ctrl-C and SIGKILL keep every finished question), the budget and the
endpoint limit are shared by the workers, and bad values are one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ragzoo.stubserver import StubLMServer

N = 24


def _records(run):
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == len({r["id"] for r in records}), "an id written twice"
    return {r["id"]: (r["prediction"], r["passages"], r["metrics"], r["lm_calls"], r["error"]) for r in records}


def _argv(server, data, corpus, out, *extra):
    return ["evaluate", "--method", "rag", "--knob", "k=3", "--retriever", f"bm25:{corpus}", "--data", data,
            "--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--out", out, "--no-cache", *extra]


def test_processes_give_the_same_records_as_threads(tmp_path, cli, questions_file, small_corpus, helpers):
    data = questions_file(N)
    runs, requests = {}, {}
    for name, extra in (("threads", ["--threads", "4"]), ("processes", ["--threads", "2", "--processes", "2"])):
        with StubLMServer(responder=helpers.digest_responder, latency=0.005) as server:
            result = cli(*_argv(server, data, small_corpus, tmp_path / name, *extra))
            assert result.code == 0, result.err
            requests[name] = server.requests
        runs[name] = _records(tmp_path / name)
    assert runs["threads"] == runs["processes"] and len(runs["processes"]) == N
    assert requests["threads"] == requests["processes"] >= N
    assert len({prediction for prediction, *_ in runs["processes"].values()}) > N // 2
    summary = json.loads((tmp_path / "processes" / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["n"] == N and summary["failures"] == 0


def test_budget_is_shared_by_the_processes_and_resume_finishes(tmp_path, cli, questions_file, small_corpus, helpers):
    data = questions_file(N)
    with StubLMServer(responder=helpers.digest_responder, latency=0.005) as server:
        argv = _argv(server, data, small_corpus, tmp_path / "run", "--threads", "2", "--processes", "3")
        stopped = cli(*argv, "--max-calls", "7")
        assert stopped.code != 0 and "Traceback" not in stopped.err
        assert "LM call budget reached (--max-calls 7, split evenly over the 3 processes)" in stopped.err
        assert server.requests <= 7  # 3 + 2 + 2: the workers together never pass --max-calls
        first = _records(tmp_path / "run")
        assert 0 < len(first) <= 7
        resumed = cli(*argv, "--resume")
        assert resumed.code == 0, resumed.err
    final = _records(tmp_path / "run")
    assert sorted(final) == sorted(f"q{i}" for i in range(N))
    assert all(final[i] == first[i] for i in first)  # resume kept, did not redo, the finished questions
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["resumed_from"] == len(first) and summary["n"] == N


def test_endpoint_limit_is_shared_by_the_processes(tmp_path, cli, questions_file, small_corpus, helpers):
    data = questions_file(16)
    with StubLMServer(responder=helpers.digest_responder, latency=0.05) as server:
        result = cli(*_argv(server, data, small_corpus, tmp_path / "run", "--threads", "4", "--processes", "2",
                            "--max-concurrency", "3"))
        assert result.code == 0, result.err
        assert server.max_in_flight <= 3  # 2 + 1, not 3 per process


def test_bad_processes_are_one_line(tmp_path, cli, questions_file, small_corpus, helpers):
    """Refused in one line before any work: no question asked, no run folder, and no index built for the
    retriever (a corpus no test has indexed: its build would print a progress bar before the refusal)."""
    data = questions_file(4)
    corpus = tmp_path / "unindexed.jsonl"
    corpus.write_text(small_corpus.read_text() + json.dumps({"id": f"x-{tmp_path.name}", "title": "Only here",
                                                             "text": "A passage no other test indexes."}) + "\n")
    with StubLMServer(latency=0) as server:
        for extra, says in ((["--processes", "0"], "--processes 0: expected an integer with --processes >= 1"),
                            (["--processes", "4", "--max-concurrency", "2"], "--processes 4 is more than")):
            result = cli(*_argv(server, data, corpus, tmp_path / "run", *extra))
            assert result.code not in (0, None) and says in result.err, result.err
            assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
            assert not (tmp_path / "run").exists()
        assert server.requests == 0


def _start(helpers, argv):
    return subprocess.Popen([helpers.PYTHON, "-m", "ragzoo.cli", *map(str, argv)], env=helpers.subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            # a shell's background job ignores SIGINT, and Python keeps an ignored SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_lines(path, count, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} lines")


def _alive_in_group(group: int) -> bool:
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == group and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


def _workers_stopped(server, group):
    """The workers notice within 1.5 s (Ctrl-C: stopped by the parent; SIGKILL: their orphan watch): gone by then,
    or, if one is still there, the LM hears nothing from the group for another second; and all are gone within 30 s
    (a loaded machine can take longer than 1.5 s to end them)."""
    deadline = time.monotonic() + 1.5
    while _alive_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    served = server.requests
    if _alive_in_group(group):
        time.sleep(1.0)
    assert server.requests == served, "a worker outlived its parent and still calls the LM"
    # and they do exit: a worker still winding down holds the run folder's lock (inherited across fork), so a
    # resume started now would be refused as "being written by another ragzoo process" (seen under load in CI)
    deadline = time.monotonic() + 30
    while _alive_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive_in_group(group), "a worker outlived its parent"


def test_ctrl_c_and_sigkill_keep_finished_questions(tmp_path, cli, helpers, questions_file, small_corpus):
    n = 80
    data = questions_file(n)
    run = tmp_path / "run"
    with StubLMServer(responder=helpers.digest_responder, latency=0.1) as server:
        argv = _argv(server, data, small_corpus, run, "--threads", "2", "--processes", "2")
        process = _start(helpers, argv)
        _wait_lines(run / "predictions.jsonl", 6)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group: parent and workers
        process.wait(30)
        err = process.stderr.read().decode()
        assert process.returncode not in (0, None) and "Traceback" not in err, err[-2000:]
        _workers_stopped(server, process.pid)
        interrupted = _records(run)
        assert 6 <= len(interrupted) < n

        process = _start(helpers, [*argv, "--resume"])
        _wait_lines(run / "predictions.jsonl", len(interrupted) + 6)
        os.kill(process.pid, signal.SIGKILL)  # the parent only: its workers must not go on alone
        process.wait(30)
        _workers_stopped(server, process.pid)
        killed = _records(run)
        assert len(interrupted) + 6 <= len(killed) < n
        assert all(killed[i] == interrupted[i] for i in interrupted)

        resumed = cli(*argv, "--resume")
        assert resumed.code == 0, resumed.err
    final = _records(run)
    assert sorted(final) == sorted(f"q{i}" for i in range(n)) and all(final[i] == killed[i] for i in killed)


_ORPHAN = """
import multiprocessing, os, sys, time
from ragzoo import runs

def worker(parent, path):
    runs._die_with_parent(parent)  # and no watch: only the kernel can end this one early
    with open(path, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(60)

if __name__ == "__main__":
    child = multiprocessing.get_context("fork").Process(target=worker, args=(os.getpid(), sys.argv[1]), daemon=True)
    child.start()
    time.sleep(60)
"""


def test_a_worker_dies_with_its_killed_parent_at_once(tmp_path):
    """A SIGKILLed parent's worker ends at once (the kernel's parent-death signal), not when a watch next looks:
    in between it would go on paying for questions no one writes."""
    script, pid_file = tmp_path / "orphan.py", tmp_path / "worker.pid"
    script.write_text(_ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10  # a watch-free worker would live its whole 60 s
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            if _zombie(worker):
                break
            time.sleep(0.05)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("the worker outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_a_killed_worker_s_questions_make_the_run_a_stop_not_a_clean_exit(tmp_path, helpers, questions_file,
                                                                         small_corpus):
    """Review: a worker killed by the OOM killer (kill -9) lost its questions and evaluate exited 0 with
    `stopped` None; now the run says which worker ended, exits 4 and a resume runs the lost questions."""
    import psutil

    n = 12
    run = tmp_path / "run"
    with StubLMServer(responder=helpers.digest_responder, latency=0.25) as server:
        argv = _argv(server, questions_file(n), small_corpus, run, "--threads", "1", "--processes", "2")
        process = _start(helpers, argv)
        _wait_lines(run / "predictions.jsonl", 2)
        workers = psutil.Process(process.pid).children()
        assert len(workers) == 2
        workers[0].kill()
        process.wait(60)
        err = process.stderr.read().decode()
        assert process.returncode == 4, err[-2000:]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["complete"] is False and summary["stopped"] is None
        assert summary["lost"]["why"].startswith("worker process ragzoo-evaluate-") and \
            "exit code -9" in summary["lost"]["why"], summary["lost"]
        assert "ended with no record" in err and "rerun with --resume" in err
        kept = len(_records(run))
        assert kept < n
        process = _start(helpers, [*argv, "--resume"])
        process.wait(60)
        assert process.returncode == 0, process.stderr.read().decode()[-2000:]
    assert sorted(_records(run)) == sorted(f"q{i}" for i in range(n))


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_resumed_run_counts_what_its_earlier_runs_spent_against_the_budget(tmp_path, cli, helpers, questions_file,
                                                                          small_corpus, processes):
    """Review: `--resume` started the budget at 0: --max-calls 7 then --resume --max-calls 10 paid 17 calls, and
    "raise --max-calls to continue" was false (the same cap paid again)."""
    n = 8
    data = questions_file(n)
    with StubLMServer(responder=helpers.digest_responder) as server:
        argv = _argv(server, data, small_corpus, tmp_path / "run", "--threads", "1", "--processes", processes)
        first = cli(*argv, "--max-calls", "3")
        assert first.code == 3 and server.requests == 3, first.err
        again = cli(*argv, "--resume", "--max-calls", "3")
        assert again.code == 3 and server.requests == 3, again.err  # spent already: nothing sent
        assert "3 of them" in again.err and "by earlier runs" in again.err and "--max-calls 3" in again.err
        lower = cli(*argv, "--resume", "--max-calls", "2")  # a flag below what was spent: named as given
        assert lower.code == 3 and server.requests == 3 and "--max-calls 2" in lower.err, lower.err
        last = cli(*argv, "--resume", "--max-calls", "8")
        assert last.code == 0, last.err
        assert server.requests == 8
    assert sorted(_records(tmp_path / "run")) == sorted(f"q{i}" for i in range(n))


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_rented_server_s_time_is_in_the_summary_and_bounds_every_process_count_alike(
        tmp_path, cli, helpers, questions_file, small_corpus, processes):
    """Review: under --price-per-hour the stop said "server $0.0824" but summary.json and the summary line had no
    server cost at all; and with --processes 2 each worker charged the whole hourly rate against half the
    --max-cost, so the run stopped at half the time."""
    with StubLMServer(responder=helpers.digest_responder, latency=0.1) as server:
        argv = _argv(server, questions_file(200), small_corpus, tmp_path / "run", "--threads", "1", "--processes",
                     processes, "--price-per-hour", "72", "--max-cost", "0.03")  # $0.02 a second: 1.5 s
        result = cli(*argv)
    assert result.code == 3, result.err
    usage = json.loads((tmp_path / "run" / "summary.json").read_text())["usage"]
    assert 1.35 <= usage["server_seconds"] < 10 and usage["server_cost"] == pytest.approx(
        usage["server_seconds"] / 50, rel=1e-3, abs=1e-5)
    assert usage["total_cost"] == pytest.approx(usage["cost"] + usage["server_cost"], abs=2e-6)
    assert f"+ server ${usage['server_cost']:.4f}" in result.out


def test_a_forked_process_does_not_keep_a_run_s_lock_after_its_writer_let_go(tmp_path):
    """Third diff review: a cell's --processes workers, forked while other --parallel cells held their run folders,
    shared those locks until they exited, so a finished cell read as still being written."""
    from ragzoo import runs

    run = tmp_path / "run"
    run.mkdir()
    with runs._run_lock(run):
        child = os.fork()
        if child == 0:  # a worker of another cell, still running after this run's writer let go
            time.sleep(30)  # killed below
            os._exit(0)
    try:
        deadline = time.monotonic() + 3  # the child runs its at-fork hook when it is scheduled, not at once

        def child_holds() -> bool:
            names = []
            for fd in os.listdir(f"/proc/{child}/fd"):
                try:
                    names.append(os.readlink(f"/proc/{child}/fd/{fd}"))
                except OSError:
                    pass
            return any(name.startswith(str(run)) for name in names)

        while child_holds() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not runs.run_held(run)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_where_a_folder_cannot_be_locked_the_run_s_lock_file_tells(tmp_path, monkeypatch):
    """Third diff review: on NFS a folder cannot be flock'ed (`in_use` None), and the run's lock file is its only
    guard: a cell another machine's worker held was run again, refused, and counted failed."""
    import fcntl

    from ragzoo import files, runs

    run = tmp_path / "run"
    run.mkdir()
    (run / runs.LOCK_FILE).write_text("4242")
    real = files.in_use  # as on NFS: a folder cannot be flock'ed, a file opened for writing can
    monkeypatch.setattr(files, "in_use", lambda path, **kw: None if os.path.isdir(path) else real(path, **kw))
    assert not runs.run_held(run)
    holder = os.open(run / runs.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert runs.run_held(run)
    finally:
        os.close(holder)
    assert not runs.run_held(run)
