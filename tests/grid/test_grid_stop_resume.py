"""Grids that stop when told and resume what they can: Ctrl-C stops the grid at once and says what was kept and
the command that resumes; a shared Optuna storage survives a SIGKILLed worker; a larger -n extends each cell
(only the new questions reach the LM, the compile is reused); resumes say "resuming from 18/30"; the running
cells' progress shows while a cell runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ragzoo.cli import main
from tests.grid.conftest import ragzoo_argv, stub_lms, write_tiny


def _written(out: Path) -> int:
    return sum(len((cell / "run" / "predictions.jsonl").read_text().splitlines())
               for cell in (out / "cells").iterdir() if (cell / "run" / "predictions.jsonl").is_file())


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_the_grid_and_says_what_was_kept_and_the_command_that_resumes(tmp_path, stub_server, grid_env,
                                                                                     stop):
    n = 8
    grid = write_tiny(tmp_path / "tiny.toml", n=n, lms=stub_lms(stub_server))
    stub_server.latency = 0.3
    out = tmp_path / "g"
    args = ("sweep", str(grid), "--out", str(out), "--quiet", "--threads", "2")
    # its own process group, as a terminal makes one for a command: Ctrl-C reaches the whole group
    process = subprocess.Popen(ragzoo_argv(*args), env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while stub_server.requests < 3 and time.monotonic() < deadline:  # inside the first cell
        time.sleep(0.02)
    said = []  # (time, line) as the grid writes them

    def read():
        for line in process.stderr:
            said.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    os.killpg(process.pid, getattr(signal, stop))  # SIGTERM: the cell in the main thread stops, then the grid
    sent = time.monotonic()
    process.wait(timeout=30)
    reader.join(timeout=10)
    after_exit = stub_server.requests
    time.sleep(1.0)
    assert stub_server.requests == after_exit  # nothing keeps asking the LM
    err = "".join(line for _, line in said)
    said_line = "interrupted" if stop == "SIGINT" else "stopped (SIGTERM)"
    stopped_at = next(when for when, line in said if said_line in line)
    # the grid stops within the in-flight requests (0.3 s); the interpreter's own teardown (LiteLLM: ~3 s on a
    # loaded machine) comes after
    assert stopped_at - sent < 3, (stopped_at - sent, err)
    assert process.returncode == (130 if stop == "SIGINT" else 143), err
    assert after_exit <= 3 + 2 + 2, err  # the questions in flight (2 threads) at most, never a next cell
    lines = [line for line in err.splitlines() if line.startswith("ragzoo sweep: ")]
    assert len(lines) == 1, err
    written = _written(out)
    assert f"{written}/{2 * n} questions" in lines[0] and "ragzoo sweep " in lines[0] and str(out) in lines[0], err
    assert "resume" in lines[0]
    # the command it names resumes: each question once, the grid completes
    stub_server.latency = 0.0
    assert main(list(args)) == 0
    assert _written(out) == 2 * n
    assert stub_server.requests <= 2 * n + (after_exit - written)


@pytest.mark.slow
# one thread a cell runs in the evaluation's pool as two do (every run under a deadline is pooled): one case each
@pytest.mark.parametrize("threads, stop", [("1", "SIGINT"), ("2", "SIGTERM")])
def test_ctrl_c_stops_parallel_cells_whose_lm_hangs(tmp_path, stub_server, grid_env, threads, stop):
    """`--parallel 2`: the cells run in threads no signal reaches, their questions stuck at an LM that does not
    answer (found by review: Ctrl-C did nothing, a second one printed the line but the process never exited).
    Each cell's wait for its questions ends as Ctrl-C ends a run in the main thread (`runs.stop_when`)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=4, lms=stub_lms(stub_server))
    stub_server.latency = 600.0  # hung: no answer within the test
    out = tmp_path / "g"
    process = subprocess.Popen(ragzoo_argv("sweep", str(grid), "--out", str(out), "--quiet", "--parallel", "2",
                                           "--threads", threads), env=grid_env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while stub_server.in_flight < 2 and time.monotonic() < deadline:  # both cells wait on the LM
        time.sleep(0.02)
    assert stub_server.in_flight >= 2, process.stderr.read() if process.poll() is not None else "not started"
    os.killpg(process.pid, getattr(signal, stop))  # SIGTERM (a scheduler's stop): as Ctrl-C, status 143
    sent = time.monotonic()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"one {stop} did not stop a grid whose cells wait on a hung LM") from None
    err = process.stderr.read()
    assert time.monotonic() - sent < 20 and process.returncode == (130 if stop == "SIGINT" else 143), err
    lines = [line for line in err.splitlines() if line.startswith("ragzoo sweep: ")]
    assert len(lines) == 1 and "0/8 questions" in lines[0] and "resume" in lines[0], err
    assert ("interrupted;" if stop == "SIGINT" else "stopped (SIGTERM);") in lines[0], err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_second_ctrl_c_leaves_at_once_when_a_cell_s_compile_waits_on_a_hung_lm(tmp_path, stub_server, grid_env):
    """A compile blocked in an LM call is reached by nothing but the LM or its timeout: the first Ctrl-C says so
    and what to do; the second leaves at once (the cells' threads are daemons: no thread left for the interpreter
    to join at exit, where the second Ctrl-C used to hang for good)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=4, lms=stub_lms(stub_server))
    grid.write_text(grid.read_text() + '\n[compile]\noptimizers = ["bootstrap"]\n')
    stub_server.latency = 600.0
    process = subprocess.Popen(ragzoo_argv("sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet",
                                           "--parallel", "2"), env=grid_env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while stub_server.in_flight < 2 and time.monotonic() < deadline:  # both cells compiling, at the LM
        time.sleep(0.02)
    assert stub_server.in_flight >= 2, "".join(lines)
    os.killpg(process.pid, signal.SIGINT)
    deadline = time.monotonic() + 15
    while not any("press Ctrl-C again" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any("press Ctrl-C again" in line for line in lines) and process.poll() is None, "".join(lines)
    os.killpg(process.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("a second Ctrl-C did not end the grid") from None
    reader.join(5)
    assert time.monotonic() - sent < 15 and process.returncode == 130, "".join(lines)
    assert sum("interrupted" in line for line in lines) == 1 and "Traceback" not in "".join(lines), "".join(lines)


def test_a_larger_n_extends_each_cell_and_reuses_the_compile(tmp_path, stub_server, grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--optimizer", "none,labeled"]
    assert main(argv) == 0
    first = stub_server.requests
    assert first >= 2 * 2 * 2  # direct, rag x none, labeled x 2 questions, and the compiles' validation
    cells = sorted(p.name for p in (out / "cells").iterdir())
    manifests = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/artifact/manifest.json")}
    assert len(manifests) == 2
    capsys.readouterr()
    assert main([*argv, "-n", "3"]) == 0
    assert stub_server.requests - first == 4  # only the one new question of each of the 4 cells
    assert sorted(p.name for p in (out / "cells").iterdir()) == cells  # the same cells, extended
    assert manifests == {p: p.stat().st_mtime_ns for p in manifests}  # the compiles were reused
    err = capsys.readouterr().err
    assert "resuming from 8/12 questions" in err, err
    for cell in (out / "cells").iterdir():
        assert len((cell / "run" / "predictions.jsonl").read_text().splitlines()) == 3


def test_evaluate_resume_says_where_it_resumes_from(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "--split", "dev_first500", "--lm", "dry-run",
            "--out", str(run)]
    assert main([*argv, "-n", "2"]) == 0
    capsys.readouterr()
    assert main([*argv, "-n", "3", "--resume"]) == 0
    assert "resuming from 2/3" in capsys.readouterr().err


def test_progress_of_the_running_cell_is_shown_in_plain_lines_when_not_a_terminal(tmp_path, stub_server, grid_env,
                                                                                  capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=6, lms=stub_lms(stub_server))
    stub_server.latency = 0.25
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--methods", "direct,rag"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err  # not a terminal: plain lines
    during = [line for line in err.splitlines() if line.startswith("grid:") and "0/2 cells done" in line
              and "1 running" in line]
    # while the first cell runs: its questions done / total, calls, spend, and an ETA
    assert any("Direct HotPotQA 3/6 q" in line or "Direct HotPotQA 4/6 q" in line for line in during), err
    assert any("ETA" in line and "calls" in line and "$" in line for line in during), err
    assert len(during) < 20, err  # periodic, not one per poll


@pytest.mark.slow
def test_shared_storage_survives_a_sigkilled_worker_and_reruns_do_not_hang(tmp_path, stub_server, grid_env, capsys):
    n = 4
    grid = write_tiny(tmp_path / "tiny.toml", n=n, lms=stub_lms(stub_server))
    stub_server.latency = 0.1
    out = tmp_path / "g"
    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    argv = ragzoo_argv("sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet")
    process = subprocess.Popen(argv, env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while stub_server.requests < n + 2 and time.monotonic() < deadline:  # the first cell done, inside the second
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    stub_server.latency = 0.0
    capsys.readouterr()
    for attempt in range(2):  # the rerun finishes the grid; a second rerun finds it done (used to hang)
        started = time.monotonic()
        # in this process (its pid is not the dead worker's): no interpreter start-up inside the 30 s, which a loaded
        # machine could fill on its own
        code = main(argv[3:])
        err = capsys.readouterr().err
        assert code == 0, (attempt, err[-3000:])
        assert "internal error" not in err
        assert time.monotonic() - started < 30, attempt  # the dead worker's claim is not waited out (30 s grace)
    assert _written(out) == 2 * n
    assert stub_server.requests <= 2 * n + 1


@pytest.mark.slow
def test_ctrl_c_stops_a_one_thread_evaluate(tmp_path, stub_server, grid_env):
    """On one thread Ctrl-C landed inside the question being run, which was dropped, and the run went on."""
    run = tmp_path / "run"
    stub_server.latency = 0.3
    process = subprocess.Popen(ragzoo_argv("evaluate", "--method", "direct", "--dataset", "hotpotqa", "--split",
                                           "dev_first500", "-n", "30", "--lm", "openai/stub", "--api-base",
                                           f"{stub_server.base_url}/v1", "--no-cache", "--out", str(run)),
                               env=grid_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + 60
    while stub_server.requests < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert stub_server.requests <= 4, err  # the question in flight at most, nothing after it


@pytest.mark.slow
def test_a_worker_stopped_by_ctrl_c_hands_its_cell_back_to_the_workers_still_running(tmp_path, stub_server,
                                                                                      grid_env):
    n = 8
    grid = tmp_path / "wide.toml"
    methods = "\n".join(f'[[methods]]\nid = "{m}"\nlabel = "{m}"\n' for m in ("direct", "cot", "rag", "cot_rag"))
    grid.write_text(f'[grid]\nname = "wide"\nn = {n}\nlms = [{stub_lms(stub_server)}]\n\n'
                    f'[[datasets]]\nname = "hotpotqa"\nsplit = "dev_first500"\nmetrics = ["em", "f1"]\n\n{methods}')
    # Slow replies until both workers are inside a cell (a cell lasts 8 s, the grid 32 s for one worker alone): the
    # two start together, so a loaded machine's slow start of one cannot let the other finish every cell first.
    stub_server.latency = 1.0
    out = tmp_path / "g"
    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    argv = ragzoo_argv("sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet")
    stopped = subprocess.Popen(argv, env=grid_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    running = subprocess.Popen(argv, env=grid_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while stub_server.requests < 1 and time.monotonic() < deadline:  # a worker is inside a cell: the study is there
        time.sleep(0.02)
    import optuna

    def claims_of(pid: int) -> list:
        study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
        return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                if t.user_attrs.get("worker", "").endswith(f":{pid}")]

    while not (claims_of(running.pid) and claims_of(stopped.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)  # both workers inside a cell: the one stopped holds a claim the other one knows of
    os.killpg(stopped.pid, signal.SIGINT)
    _, err = stopped.communicate(timeout=30)
    assert stopped.returncode == 130, err
    stub_server.latency = 0.0  # the worker still running finishes the grid at full speed
    _, err = running.communicate(timeout=120)
    assert running.returncode == 0, err[-3000:]
    assert _written(out) == 4 * n  # the interrupted cell was finished by the worker still running, no rerun


def test_a_grid_folder_made_when_n_was_in_the_cell_key_is_resumed_and_extended_in_place(tmp_path, stub_server,
                                                                                         grid_env):
    from ragzoo.grid import load_grid

    grid_file = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    argv = ["sweep", str(grid_file), "--out", str(out), "--quiet"]
    assert main(argv) == 0
    grid = load_grid(grid_file)
    for cell in grid.cells()[:2]:  # direct, rag: as an earlier ragzoo named their folders (n in the key)
        (out / "cells" / cell.key).rename(out / "cells" / cell.legacy_key(2))
    before = stub_server.requests
    assert main([*argv, "-n", "3"]) == 0
    assert stub_server.requests - before == 2  # one new question per cell, not 3
    for cell in grid.cells()[:2]:  # run in place; the current key names it
        assert (out / "cells" / cell.legacy_key(2) / "run" / "predictions.jsonl").read_text().count("\n") == 3
        assert (out / "cells" / cell.key).resolve() == (out / "cells" / cell.legacy_key(2)).resolve()
    assert main([*argv, "-n", "3"]) == 0 and stub_server.requests - before == 2  # and stays done
    table = json.loads((out / "results.json").read_text())
    assert [row["cells"]["HotPotQA"]["n"] for row in table["rows"][:2]] == [3, 3]


def test_a_library_caller_s_sweep_leaves_sigterm_alone(tmp_path):
    """`ragzoo.grid.runner.sweep()` called from a program of the user's takes SIGINT (Ctrl-C stops the grid) but
    not SIGTERM, which the CLI alone makes a stop: a scheduler's SIGTERM still ends the caller's process as it
    would have (found by review)."""
    import sys

    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    script = tmp_path / "library.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from ragzoo.grid import runner\n"
        "from ragzoo.grid.spec import load_grid\n"
        "def cell(*args, **kwargs):\n"
        "    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "    print('survived SIGTERM')\n"
        "runner.run_cell = cell\n"
        "runner.sweep(load_grid(sys.argv[1]), sys.argv[2], quiet_cells=False)\n")
    done = subprocess.run([sys.executable, str(script), str(grid), str(tmp_path / "g")], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == -signal.SIGTERM and "survived" not in done.stdout, (done.returncode, done.stderr[-500:])


def test_ctrl_c_stops_a_parallel_worker_that_waits_on_another_workers_cells(tmp_path, stub_server, grid_env):
    """Grid review: worker A (--parallel 2) runs both cells; worker B (--parallel 2) waits on them. Ctrl-C to B
    did not stop it: its cell threads slept in one-second turns until A's cells ended (or their heartbeats went
    stale), saying a cell was waiting on its LM call. B now stops at once, leaving A's cells to A."""
    stub_server.latency = 1.0  # A's cells run for a while: 8 questions each, a second a call
    grid = write_tiny(tmp_path / "tiny.toml", n=8, lms=stub_lms(stub_server))
    args = ("sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet", "--parallel", "2", "--storage",
            f"sqlite:///{tmp_path / 'grid.db'}")
    a = subprocess.Popen(ragzoo_argv(*args), env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    b = None
    try:
        deadline = time.monotonic() + 60
        while stub_server.requests < 2 and time.monotonic() < deadline:  # A runs both cells
            time.sleep(0.05)
        b = subprocess.Popen(ragzoo_argv(*args), env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        said = ""
        while "other workers are running" not in said:
            line = b.stderr.readline()
            assert line, said  # B is waiting, not done
            said += line
        os.killpg(b.pid, signal.SIGINT)
        stopped = time.monotonic()
        b.wait(timeout=20)
        assert time.monotonic() - stopped < 8, "the waiting worker kept waiting after Ctrl-C"
        assert b.returncode == 130
        assert a.poll() is None  # A's cells are A's: still running
    finally:
        for process in (a, b):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
