"""One endpoint limit shared by several processes of a machine (`endpoints.share_limits`): the requests in flight,
summed over real processes, never pass --max-concurrency and reach it; a SIGKILLed holder's slots come back; a 429
storm still backs off inside the shared cap; a forked child never waits on a limiter lock its parent's other
threads held at the fork. Children are forked (multiprocessing "fork"), so no test pays an interpreter start."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from ragzoo import endpoints
from ragzoo.stubserver import StubLMServer

FORK = multiprocessing.get_context("fork")


def _calls(base: str, folder: str, limit: int, threads: int, calls: int, tag: str, report=None) -> None:
    """A child process: `threads` threads making `calls` LM calls each, the endpoint's limit shared by `folder`."""
    from ragzoo.lm import make_lm

    endpoints.share_limits(folder)
    lm = make_lm("openai/stub", api_base=base, max_concurrency=limit, cache=False, num_retries=0)
    failed = []

    def run(thread: int) -> None:
        for index in range(calls):
            try:
                lm(f"{tag} {thread} {index}")
            except Exception as error:  # noqa: BLE001 - counted: the parent asserts none
                failed.append(repr(error))

    pool = [threading.Thread(target=run, args=(thread,)) for thread in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    gate = endpoints.limiter(lm.endpoint)
    if report is not None:
        report.put({"failed": failed, "rate_limited": gate.rate_limited, "window": gate.window})
    os._exit(1 if failed else 0)


def _run_children(count: int, *args, report=None) -> list[int]:
    children = [FORK.Process(target=_calls, args=(*args, f"p{index}", report)) for index in range(count)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    return [child.exitcode for child in children]


@pytest.fixture(autouse=True)
def _not_shared_after():
    yield
    endpoints.share_limits(None)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """DSPy and LiteLLM's price table imported here, once: the forked children inherit them."""
    from ragzoo.lm import make_lm

    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)


def test_three_processes_keep_one_limit_and_reach_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    with StubLMServer(latency=0.05) as server:
        codes = _run_children(3, server.base_url + "/v1", str(tmp_path / "slots"), 3, 5, 4)
        assert codes == [0, 0, 0]
        assert server.requests == 3 * 5 * 4
        # 15 threads in 3 processes, each process allowed 3 on its own: at the server never more than 3, and 3
        assert server.max_in_flight == 3


def _hold_all(folder: str, count: int, ready) -> None:
    slots = endpoints.MachineSlots(folder, count)
    for _ in range(count):
        slots.acquire()
    ready.set()
    time.sleep(60)


def test_a_sigkilled_holders_slots_come_back(tmp_path):
    folder = tmp_path / "slots"
    ready = FORK.Event()
    holder = FORK.Process(target=_hold_all, args=(str(folder), 2, ready))
    holder.start()
    try:
        assert ready.wait(20)
        slots = endpoints.MachineSlots(folder, 2)
        with pytest.raises(TimeoutError):
            slots.acquire(time.monotonic() + 0.3)  # both held by the other process
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(slots.acquire(time.monotonic() + 20)))
        waiter.start()  # queued before the kill: its watcher threads wait in the kernel
        time.sleep(0.2)
        os.kill(holder.pid, signal.SIGKILL)
        started = time.monotonic()
        waiter.join(10)
        assert got and got[0] in (0, 1)
        assert time.monotonic() - started < 5
        other = slots.acquire(time.monotonic() + 5)  # the second slot too: nothing leaked
        assert {got[0], other} == {0, 1}
        with pytest.raises(TimeoutError):
            slots.acquire(time.monotonic() + 0.2)  # and never a third
        slots.release(other)
        assert slots.acquire(time.monotonic() + 1) == other
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join(5)


def test_a_429_storm_backs_off_inside_the_shared_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    report = FORK.SimpleQueue()  # written at once: the child leaves with os._exit
    # the server takes 2 at once and answers 429 (Retry-After 0.05 s) to more; the grid's cap is 6
    with StubLMServer(latency=0.05, capacity=2, capacity_retry_after=0.05) as server:
        codes = _run_children(2, server.base_url + "/v1", str(tmp_path / "slots"), 6, 4, 3, report=report)
        results = [report.get() for _ in codes]
        assert codes == [0, 0], results
        assert server.requests == 2 * 4 * 3  # every call answered in the end (`requests` counts the answered)
        assert server.max_in_flight <= 2
        # each process met 429s and lowered its own window below the shared cap of 6 (AIMD, per process)
        assert all(result["rate_limited"] and result["window"] is not None and result["window"] < 6
                   for result in results), results
        # and so the 429s stay below what 6 requests at a time would draw (about 2 per answer at this capacity)
        assert server.rejected < 2 * server.requests, (server.rejected, server.requests)


def _slot_in_child(done) -> None:
    gate = endpoints.limiter("http://fork-test")
    with gate.slot(time.monotonic() + 5):
        pass
    done.set()
    os._exit(0)


def test_a_forked_child_never_waits_on_a_lock_held_at_the_fork():
    gate = endpoints.set_max_concurrency("http://fork-test", 2)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with gate._condition:  # another thread (another grid cell) inside the limiter when the cell forks
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(5)
        done = FORK.Event()
        child = FORK.Process(target=_slot_in_child, args=(done,))
        child.start()
        assert done.wait(10), "the forked child waited on the limiter lock its parent's thread held"
        child.join(5)
    finally:
        release.set()
        holder.join(5)
        if child.is_alive():
            child.kill()


def test_the_slots_of_a_process_that_ended_all_go_to_the_one_still_running(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    folder = str(tmp_path / "slots")
    with StubLMServer(latency=0.05) as server:
        base = server.base_url + "/v1"
        short = FORK.Process(target=_calls, args=(base, folder, 4, 2, 2, "short", None))
        long = FORK.Process(target=_calls, args=(base, folder, 4, 4, 12, "long", None))
        short.start()
        long.start()
        short.join(60)
        assert short.exitcode == 0
        with server._lock:
            server.max_in_flight = server.in_flight  # from here on, the long process alone
        long.join(60)
        assert long.exitcode == 0
        # nothing the short one took stays taken: the long one alone reaches the whole limit
        assert server.max_in_flight == 4
