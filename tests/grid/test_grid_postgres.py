"""A grid over several machines on a real PostgreSQL (`--storage postgresql://...`): three workers as separate
processes, each with its own caches, home and working folder (as on three machines), share OUT (a shared
filesystem) and one database, exactly as the README's several-machines recipe says. One worker is SIGKILLed in
the middle of a cell; every cell runs once, no question is answered twice, the killed cell is taken over by
another worker, and the table is that of a one-worker run.

Needs a PostgreSQL server: `RAGZOO_TEST_POSTGRES` is its URL (`export RAGZOO_TEST_POSTGRES=$(make -s postgres)`
starts one on loopback). Without it the test is skipped, unless `RAGZOO_REQUIRE_POSTGRES=1` (CI) fails it."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from ragzoo.cli import main
from tests.grid.conftest import ragzoo_argv

POSTGRES = os.environ.get("RAGZOO_TEST_POSTGRES", "")
REQUIRED = os.environ.get("RAGZOO_REQUIRE_POSTGRES") == "1"
METHODS = (("direct", ""), ("cot", ""), ("rag", "k = 2"), ("cot_rag", "k = 2"))
N = 3


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"RAGZOO_REQUIRE_POSTGRES=1 and {reason}")
    pytest.skip(f"{reason}: export RAGZOO_TEST_POSTGRES=$(make -s postgres) to run it")


@pytest.fixture
def database():
    """A database of its own on the test server (the grid's study is named after the grid: a second run must not
    find the first one's), dropped afterwards."""
    if not POSTGRES:
        _unavailable("no PostgreSQL (RAGZOO_TEST_POSTGRES is unset)")
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    from sqlalchemy.engine import make_url

    url = make_url(POSTGRES)
    name = f"ragzoo_test_{uuid.uuid4().hex[:10]}"

    def admin():
        return psycopg.connect(host=url.host, port=url.port, user=url.username, password=url.password,
                               dbname=url.database, connect_timeout=5, autocommit=True)

    try:
        connection = admin()
        try:
            connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
    except psycopg.Error as error:  # a server was named: that it does not answer is a failure, not a skip
        pytest.fail(f"RAGZOO_TEST_POSTGRES: cannot create a database on {url.render_as_string(hide_password=True)}: "
                    f"{str(error).strip().splitlines()[0]}")
    yield url.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    connection = admin()
    try:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        connection.close()


class Stub:
    """The stub LM server, counting answers per request (its messages: one cell's prompt for one question). With
    `hold_key` set, it holds back the first request sent with that API key (that worker's) for a cell whose
    prompt it has already answered for that worker (so a question of the cell is written: mid-cell); `drop()`
    closes the held request unanswered (the worker was killed waiting for it)."""

    def __init__(self):
        import asyncio

        from ragzoo.stubserver import StubLMServer, adapter_responder

        stub = self
        self.answered = collections.Counter()
        self.lock = threading.Lock()
        self.hold_key = None
        self.held = threading.Event()
        self.dropped = False
        seen = set()  # (API key, system message) answered: a worker inside that cell

        class Server(StubLMServer):
            async def _complete(self, writer, body, messages, keep_alive, authorization=""):
                system = str(messages[0].get("content")) if messages else ""
                if stub.hold_key and authorization == f"Bearer {stub.hold_key}" and (authorization, system) in seen:
                    stub.held.set()
                    while not stub.dropped:
                        await asyncio.sleep(0.02)
                    return False  # never answered: the worker died waiting
                reply = await super()._complete(writer, body, messages, keep_alive, authorization)
                seen.add((authorization, system))
                return reply

        def responder(messages, body=None):
            with stub.lock:
                stub.answered[json.dumps(messages, sort_keys=True)] += 1
            return adapter_responder(messages, body)

        self.server = Server(responder, latency=0.25)

    def drop(self) -> None:
        self.dropped = True
        self.hold_key = None


@pytest.fixture
def stub():
    stub = Stub()
    with stub.server:
        yield stub


def _grid(path: Path, server) -> Path:
    lms = f'{{ spec = "openai/stub", api_base = "{server.base_url}/v1", cache = false }}'
    methods = "\n".join(f'[[methods]]\nid = "{m}"\nlabel = "{m}{k[-1:]}"\n' + (f"knobs = {{ {k} }}\n" if k else "")
                        for m, k in METHODS)
    path.write_text(f'[grid]\nname = "machines"\nn = {N}\nthreads = 1\nlms = [{lms}]\n\n[[datasets]]\n'
                    f'name = "hotpotqa"\nsplit = "dev_first500"\nmetrics = ["em", "f1"]\n\n{methods}',
                    encoding="utf-8")
    return path


def _machine(tmp_path: Path, name: str) -> tuple[Path, dict]:
    """A worker's own working folder, home, ragzoo cache and DSPy cache, as on a machine of its own."""
    home = tmp_path / name
    for sub in ("home", "cache", "dspy"):
        (home / sub).mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAGZOO_TEST_")}
    env.update(HOME=str(home / "home"), RAGZOO_CACHE=str(home / "cache"), DSPY_CACHEDIR=str(home / "dspy"),
               OPENAI_API_KEY=f"key-{name}", PYTHONUNBUFFERED="1")
    return home, env


def _own_hostname_works() -> bool:
    try:
        return subprocess.run(_on_host("ragzoo-probe", ["true"]), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _on_host(name: str, argv: list[str]) -> list[str]:
    """`argv` run under a hostname of its own (a UTS namespace; the same pid: each step execs the next)."""
    return ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', name, *argv]


def _predictions(out: Path) -> dict[str, list[str]]:
    found = {}
    for cell in sorted((out / "cells").iterdir()):
        path = cell / "run" / "predictions.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        found[cell.name] = [json.loads(line)["id"] for line in lines]
    return found


def _claims(storage) -> list:
    """The grid's claims (Optuna trials) in the storage (a URL, or an RDBStorage to poll with one engine)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = optuna.get_all_study_names(storage)
    if not names:
        return []
    return optuna.load_study(study_name=names[0], storage=storage).get_trials(deepcopy=False)


def _kill_one_mid_cell(workers: dict, database: str, out: Path, stub: Stub, started: float):
    """SIGKILL a worker inside a cell, a question of it written, while its next question is held at the stub
    (sent, never answered). Returns the worker's name, the cell, the questions it wrote, when it was killed."""
    from optuna.storages import RDBStorage
    from optuna.trial import TrialState

    polled = RDBStorage(database)

    def claims_of(pid: int) -> list:
        return [t for t in _claims(polled) if str(t.user_attrs.get("worker", "")).endswith(f":{pid}")]

    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:  # the first worker seen inside a cell
        victim = next((name for name, worker in workers.items()
                       if any(t.state == TrialState.RUNNING for t in claims_of(worker.pid))), None)
        time.sleep(0.05)
    if victim is not None:
        stub.hold_key = f"key-{victim}"
    if victim is None or not stub.held.wait(60):
        for worker in workers.values():
            worker.kill()
        pytest.fail("no worker was seen inside a cell: " + " | ".join(
            worker.communicate(timeout=10)[1][-1500:] for worker in workers.values()))
    killed_at = time.monotonic() - started
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    stub.drop()
    # the cell it held when it died (its claim still running, or already failed by a worker that saw it dead)
    cells = sorted({t.params["cell"] for t in claims_of(workers[victim].pid)
                    if t.state in (TrialState.RUNNING, TrialState.FAIL)})
    assert len(cells) == 1, cells
    written = len(_predictions(out)[cells[0]])
    assert 1 <= written < N, written  # mid-cell: some of its questions written, not all
    return victim, cells[0], written, killed_at


def _timeless(value):
    """A results.json without its wall-clock figures (mean latency per question), which no two runs share."""
    if isinstance(value, dict):
        return {key: _timeless(item) for key, item in value.items() if not key.startswith("latency")}
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value


@pytest.mark.slow
@pytest.mark.parametrize("hosts", ["one host", "three hosts"])
def test_three_machines_on_postgresql_one_killed_mid_cell(tmp_path, database, stub, monkeypatch, hosts):
    """On one host the survivors see the killed worker's process gone and take its cell at once; with a hostname
    each (as on three machines) they cannot, and take it once its heartbeat is older than the grace (4 s here, set
    through RAGZOO_GRID_GRACE: 30 s by default)."""
    from optuna.trial import TrialState
    from sqlalchemy.engine import make_url

    if hosts == "three hosts" and not _own_hostname_works():
        pytest.skip("cannot give a worker a hostname of its own here (unshare --uts needs root)")
    monkeypatch.setenv("OPENAI_API_KEY", "key-single")  # the one-worker run, in this process
    # the workers inherit these: a beat a second, a claim stale after 4 s (not 30 s: the test's wait), which a
    # live worker's beats still keep fresh on a loaded machine
    monkeypatch.setenv("RAGZOO_GRID_HEARTBEAT", "1")
    monkeypatch.setenv("RAGZOO_GRID_GRACE", "4")

    grid = _grid(tmp_path / "machines.toml", stub.server)
    out = tmp_path / "shared" / "grid"  # OUT on the shared filesystem
    # the README's recipe: the same command on every machine
    argv = ragzoo_argv("sweep", str(grid), "--out", str(out), "--storage", database, "--quiet")
    started = time.monotonic()
    workers = {}
    try:
        for name in ("m1", "m2", "m3"):
            home, env = _machine(tmp_path, name)
            command = _on_host(f"ragzoo-test-{name}", argv) if hosts == "three hosts" else argv
            workers[name] = subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True)
        victim, cell, written_by_victim, killed_at = _kill_one_mid_cell(workers, database, out, stub, started)
        errors = {name: worker.communicate(timeout=90)[1] for name, worker in workers.items()}
    finally:
        for worker in workers.values():  # a failed assertion leaves no worker behind
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    elapsed = time.monotonic() - started
    for name, err in errors.items():
        if name != victim:
            assert workers[name].returncode == 0, (name, err[-3000:])
            assert "Traceback" not in err and "internal error" not in err, err[-3000:]
            assert make_url(database).password not in err  # the database password never shows

    # every cell ran exactly once: each cell's predictions complete, no question written twice
    predictions = _predictions(out)
    assert sorted(predictions) == sorted({t.params["cell"] for t in _claims(database)})
    assert len(predictions) == len(METHODS)
    for key, ids in predictions.items():
        assert len(ids) == N and len(set(ids)) == N, (key, ids)
    trials = _claims(database)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["cell"] for t in complete) == sorted(predictions)  # one finished claim per cell
    # the killed cell was taken over by a worker still alive, which resumed where the victim stopped
    taker = next(t for t in complete if t.params["cell"] == cell)
    assert taker.user_attrs["worker"].rpartition(":")[2] in {str(w.pid) for n, w in workers.items() if n != victim}
    assert any(t.params["cell"] == cell and t.state == TrialState.FAIL for t in trials)  # the dead claim
    log = (out / "cells" / cell / "log.txt").read_text(encoding="utf-8")
    assert f"resuming from {written_by_victim}/{N}" in log, log[-2000:]
    hostnames = {str(t.user_attrs.get("worker")).rpartition(":")[0].partition("/pidns-")[0] for t in complete}
    retried = taker.system_attrs.get("failed_trial")  # set when the claim came back by its heartbeat's expiry
    if hosts == "three hosts":
        assert hostnames <= {"ragzoo-test-m1", "ragzoo-test-m2", "ragzoo-test-m3"}, hostnames
        assert retried is not None
    else:
        assert retried is None  # seen dead on its own machine: no heartbeat waited out

    # no question was answered twice (the one held when the victim died was never answered)
    shared_answers = dict(stub.answered)
    assert shared_answers and set(shared_answers.values()) == {1}, collections.Counter(shared_answers.values())
    assert len(shared_answers) == len(METHODS) * N  # one call per question in these methods

    # the same table as one worker alone, which asks exactly the same questions
    stub.answered.clear()
    single = tmp_path / "single"
    assert main(["sweep", str(grid), "--out", str(single), "--quiet"]) == 0
    assert dict(stub.answered) == shared_answers
    for name in ("results.md", "results.csv"):
        assert (out / name).read_text() == (single / name).read_text(), name
    assert _timeless(json.loads((out / "results.json").read_text())) == \
        _timeless(json.loads((single / "results.json").read_text()))
    print(f"three workers ({hosts}) on PostgreSQL, one killed mid-cell: {elapsed:.1f} s "
          f"(the kill at {killed_at:.1f} s), "
          f"{len(shared_answers)} answers")


# -- what a worker says when the database is not there (no server needed) --------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as sock:  # a port nothing listens on, once this socket is closed
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("case", ["no driver", "no server"])
def test_a_postgresql_storage_that_cannot_be_used_is_one_line_naming_the_fix(tmp_path, capsys, monkeypatch, case):
    import sys

    grid = tmp_path / "g.toml"
    grid.write_text('[grid]\nname = "pg"\nn = 1\nlms = ["dry-run"]\n\n[[datasets]]\nname = "hotpotqa"\n'
                    'split = "dev_first500"\nmetrics = ["em"]\n\n[[methods]]\nid = "direct"\n', encoding="utf-8")
    if case == "no driver":
        monkeypatch.setitem(sys.modules, "psycopg", None)  # as where the driver is not installed
    url = f"postgresql://ragzoo:s3cret-pw@127.0.0.1:{_free_port()}/grid"
    code = main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--storage", url, "--quiet"])
    err = capsys.readouterr().err
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "internal error" not in err and "Traceback" not in err, err
    assert "s3cret-pw" not in err and "--storage" in lines[0], err
    if case == "no driver":
        assert "pip install" in lines[0] and "psycopg" in lines[0], err
    else:
        assert "cannot connect" in lines[0] and "Connection refused" in lines[0], err
