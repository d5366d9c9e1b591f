"""A grid keeps the configured number of LM requests in flight across its cells and their processes: one
`--max-concurrency` per endpoint for every cell running, every `--processes` worker of theirs and every `--storage`
worker sharing OUT on this machine (counted at a loopback stub that records its maximum in flight); bad numbers
are one-line errors. Workers are forked from this process (no interpreter start per test)."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import threading
import time

import pytest

from ragzoo.cli import main
from tests.grid.conftest import stub_lms, write_tiny

FORK = multiprocessing.get_context("fork")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """DSPy, the methods and LiteLLM's price table imported once, here: forked workers inherit them."""
    from ragzoo import programs
    from ragzoo.lm import make_lm

    programs.methods()
    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)


TWO_DIRECT = """
[grid]
name = "two"
n = 24
lms = [{lms}]

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]
label = "A"

[[datasets]]
name = "hotpotqa"
split = "dev_ircot500"
metrics = ["em"]
label = "B"

[[methods]]
id = "direct"
label = "Direct"
"""


def test_cells_in_processes_share_one_limit_and_keep_it_full(tmp_path, stub_server, grid_env):
    grid = tmp_path / "two.toml"
    grid.write_text(TWO_DIRECT.format(lms=stub_lms(stub_server)).replace("n = 24", "n = 8"))
    stub_server.latency = 0.05
    out = tmp_path / "g"
    # 2 cells x 2 worker processes x 3 threads want 12 requests at once; the grid allows 3 in all
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--parallel", "2", "--processes", "2",
                 "--threads", "3", "--max-concurrency", "3"]) == 0
    assert stub_server.requests == 2 * 8
    assert stub_server.max_in_flight == 3
    for cell in (out / "cells").iterdir():
        summary = json.loads((cell / "run" / "summary.json").read_text())
        assert summary["complete"] and summary["n"] == 8 and summary["processes"] == 2
    assert {path.name for path in (out / ".ragzoo-slots").iterdir()} == {socket.gethostname()}


def _worker(argv: list[str]) -> None:
    os._exit(main(argv))


def test_two_storage_workers_on_one_machine_share_the_limit(tmp_path, stub_server, grid_env):
    grid = tmp_path / "two.toml"  # two cells with no retriever to load: both workers send at once
    grid.write_text(TWO_DIRECT.format(lms=stub_lms(stub_server)))
    stub_server.latency = 0.1
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--threads", "4", "--max-concurrency", "2",
            "--storage", f"journal:{tmp_path / 'grid.journal'}"]
    workers = [FORK.Process(target=_worker, args=(argv,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert stub_server.requests == 2 * 24
    # each worker process allows 2 of its own; the machine's two workers together never pass 2 either
    assert stub_server.max_in_flight == 2


@pytest.mark.parametrize("flags, toml, message", [
    (["--processes", "0"], "", "--processes 0: expected an integer with --processes >= 1"),
    (["--max-concurrency", "0"], "", "--max-concurrency 0: expected an integer"),
    ([], "max_concurrency = 0", "[grid] max_concurrency 0: expected an integer"),
    ([], 'processes = "2"', "[grid] processes '2': expected an integer with processes >= 1"),
    (["--processes", "2", "--max-calls", "5"], "", "drop --processes, or the budget"),
    (["--processes", "4", "--max-concurrency", "2"], "", "--processes 4 is more than --max-concurrency 2"),
])
def test_bad_numbers_are_one_line_errors_before_any_cell(tmp_path, capsys, flags, toml, message):
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    grid.write_text(grid.read_text().replace("n = 2\n", f"n = 2\n{toml}\n"))
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", *flags]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in errors[0]
    assert not (out / "cells").exists()


def test_the_stub_reports_its_requests_in_flight_for_a_load_test_in_another_process(stub_server):
    import urllib.request

    from ragzoo.lm import make_lm

    stub_server.latency = 1.0
    lm = make_lm("openai/stub", api_base=stub_server.base_url + "/v1", cache=False, max_concurrency=4)
    calls = [threading.Thread(target=lm, args=(f"q{index}",)) for index in range(3)]
    for call in calls:
        call.start()
    for _ in range(20):  # until the three are at the server (a loaded machine sends them late)
        stats = json.loads(urllib.request.urlopen(stub_server.base_url + "/v1/stats", timeout=5).read())
        if stats["in_flight"] == 3:
            break
        time.sleep(0.03)
    for call in calls:
        call.join()
    assert stats["in_flight"] == 3 and stats["requests"] == 3 and stats["max_in_flight"] == 3


def _reserve_in_child(budget, done) -> None:
    budget.reserve()
    done.set()
    os._exit(0)


def test_a_worker_forked_while_another_cell_holds_the_grid_budget_lock_does_not_wait_on_it():
    from ragzoo.grid import runner
    from ragzoo.usage import Budget

    budget = Budget(None, None)  # the grid's, shared by every cell's meter: each call reserves on it
    holding, release = threading.Event(), threading.Event()

    def another_cell() -> None:
        with budget._lock:
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=another_cell)
    thread.start()
    runner._FORK_LOCKS[:] = runner._shared_locks(budget)  # as `sweep` sets them with --processes
    child = None
    try:
        assert holding.wait(5)
        done = FORK.Event()
        child = FORK.Process(target=_reserve_in_child, args=(budget, done))
        child.start()
        assert done.wait(10), "the forked worker waited on the budget lock another cell's thread held at the fork"
    finally:
        runner._FORK_LOCKS.clear()
        release.set()
        thread.join(5)
        if child is not None:
            child.join(5)
            if child.is_alive():
                child.kill()


def test_ctrl_c_stops_a_grid_whose_cells_run_in_processes(tmp_path, stub_server, grid_env):
    import signal

    grid = tmp_path / "two.toml"
    grid.write_text(TWO_DIRECT.format(lms=stub_lms(stub_server)).replace("n = 24", "n = 200"))
    stub_server.latency = 0.5
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--parallel", "2", "--processes", "2", "--threads", "4",
            "--max-concurrency", "8"]
    sweep = FORK.Process(target=_worker, args=(argv,))
    sweep.start()
    try:
        for _ in range(600):
            if stub_server.requests >= 10:
                break
            time.sleep(0.05)
        os.kill(sweep.pid, signal.SIGINT)
        sweep.join(10)  # the 400 questions would take ~25 s more: the workers are stopped, not waited for
        assert sweep.exitcode == 130
        sent = stub_server.requests
        time.sleep(1.0)
        assert stub_server.requests == sent and sent < 2 * 200  # no worker left sending
    finally:
        if sweep.is_alive():
            sweep.kill()
            sweep.join(5)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="open files are read from /proc")
def test_a_grid_that_ended_keeps_no_slot_file_open(tmp_path, stub_server, grid_env):
    from ragzoo import endpoints

    grid = tmp_path / "two.toml"
    grid.write_text(TWO_DIRECT.format(lms=stub_lms(stub_server)).replace("n = 24", "n = 3"))
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--threads", "2", "--max-concurrency", "2"]) == 0
    slots = out / ".ragzoo-slots" / socket.gethostname()
    assert list(slots.glob("*/slot-*"))  # the cells' requests took the machine's slots
    assert not [key for key in endpoints._MACHINE if key[0] == str(slots)]
    opened = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
              if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [path for path in opened if str(slots) in path]


def test_the_progress_view_counts_the_calls_of_cells_running_in_processes(tmp_path, stub_server, grid_env):
    from ragzoo.grid.runner import sweep
    from ragzoo.grid.spec import load_grid

    path = tmp_path / "two.toml"
    path.write_text(TWO_DIRECT.format(lms=stub_lms(stub_server)).replace("n = 24", "n = 20"))
    stub_server.latency = 0.1
    grid = load_grid(path)
    grid.processes, grid.threads, grid.max_concurrency = 2, 2, 4
    snapshots = []
    result = sweep(grid, tmp_path / "g", parallel=2, progress=snapshots.append, tick=0.05)
    assert not result.failed
    running = [row for snap in snapshots if snap["event"] == "tick" for row in snap["running"]]
    # mid-cell rows show the workers' calls as their records arrive (they used to stay at 0 until the cell ended)
    assert any(0 < row["calls"] < 20 and row["calls"] == row["done"] for row in running), running[-3:]
    assert snapshots[-1]["calls"] == 40
