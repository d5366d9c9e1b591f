"""Shared fixtures. The suite is offline by construction: no hub, no network but loopback."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# One OpenMP thread per process (torch's encoders, here and in the subprocesses tests start): the suite's workers
# (`-n 3`) already fill the cores, and torch's spinning threads on a busy core made a six-passage embedding take
# seconds instead of milliseconds (tests/retrieval/test_retrieval_dense_hybrid.py: 37 s -> see H4's report).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The Ctrl-C tests send SIGINT to the commands they start, as a terminal does. A suite started in the background
# of a non-interactive shell (`make test &`, some CI runners) has SIGINT ignored, which every child would inherit,
# and a command started with SIGINT ignored rightly keeps ignoring it (nohup's contract): give the suite's processes
# a terminal's disposition, which their children then start with.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# DSPy's response cache must not write into the user's home during tests; removed when this process exits (one
# such folder per run and worker was left in /tmp: thousands after a few days of runs)
os.environ["DSPY_CACHEDIR"] = tempfile.mkdtemp(prefix="ragzoo-dspy-cache-")
atexit.register(shutil.rmtree, os.environ["DSPY_CACHEDIR"], ignore_errors=True)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Index and LM caches go to a per-session folder, never the user's home."""
    cache = tmp_path_factory.mktemp("ragzoo-cache")
    previous = os.environ.get("RAGZOO_CACHE")
    os.environ["RAGZOO_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("RAGZOO_CACHE", None)
    else:
        os.environ["RAGZOO_CACHE"] = previous


@pytest.fixture(autouse=True)
def _endpoint_limits_per_test():
    """An LM endpoint's concurrency limit lives for the process, keyed by its URL: a test whose loopback server got
    a port an earlier test's server had (the kernel reuses them) inherited that test's limit and adaptive window
    (the flake hunt: a limit of 2 left by one test made the 16-thread rate-limit test see no 429). The limits a
    test made go with it."""
    from ragzoo import endpoints

    before = set(endpoints._LIMITERS)
    yield
    with endpoints._LIMITERS_LOCK:
        for key in set(endpoints._LIMITERS) - before:
            del endpoints._LIMITERS[key]


@pytest.fixture(autouse=True)
def _numba_not_failed_yet():
    """bm25's `auto` remembers, for the rest of the process, that numba could not run here; a test that makes it
    fail must not leave that verdict to the next tests of its worker."""
    yield
    bm25 = sys.modules.get("ragzoo.retrieval.bm25")
    if bm25 is not None:
        bm25._numba_failure = None


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """PYTHONDONTWRITEBYTECODE (set by some shells and CI images) made each xdist worker rewrite the assertions of
    every test file again on every run (~4.5 s of CPU a worker). The bytecode of what collection imports (the test
    files, ragzoo, the venv's packages) is written, when the interpreter is the checkout's own venv (`make install`):
    then all of it lands inside the checkout (git-ignored). Only collection: a test's own scratch modules (a
    program file, a kernel it rewrites within the same second) keep the user's setting, so no stale bytecode."""
    saved = sys.dont_write_bytecode
    if REPO in Path(sys.prefix).resolve().parents:
        sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


FULL_DATA_REASON = "needs the full benchmark data"


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_full_data: reads the full benchmark files (exact sizes, whole "
                                       "splits, the 17,703-abstract sample); skipped on the demo slice")


SHARED_SCOPES = ("module", "class", "package")
# a test module that runs the numba kernels (bm25 `backend=numba`, `format=packed`): all of them on one worker, so a
# cold numba cache (a fresh clone, an edited kernel) is compiled once per run (~23 s of CPU), not in each worker
NUMBA_USER = re.compile(r"""["']numba["']|backend=["']?numba|format=["']?packed""")
# a test that imports LiteLLM (2.7 s of CPU a process, which only these few need): all of them on one worker, which
# then imports it once a run; they say so in their ids (`[litellm]`, `..._litellm_price_table`)
LITELLM_USER = re.compile(r"litellm", re.IGNORECASE)
# a test that loads the embedding model through a dense retriever without the "embedding-model" mark (the
# sentence-transformers import, ~6 s of CPU): with the marked ones, so one worker imports it; named for it
DENSE_USER = re.compile(r"dense", re.IGNORECASE)


@pytest.hookimpl(tryfirst=True)  # before xdist turns `-n N` without --dist into --dist load
def pytest_cmdline_main(config):
    """`-n N` without `--dist` distributes with `loadgroup` (see pytest_collection_modifyitems). Set here, not in
    pyproject's addopts: a `--dist` there breaks pytest where xdist is not installed (.venv-colbert)."""
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "no" \
            and config.getoption("numprocesses", None):
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    # a worker reads the command line again, which does not say loadgroup when pytest_cmdline_main chose it
    node.workerinput["ragzoo_dist"] = node.config.option.dist


@pytest.hookimpl(trylast=True)  # after deselection (-k, --deselect), which reads the ids this changes
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, the tests that share a module-scoped fixture (an MLflow server, a browser, an
    embedding model, a built index) go to one xdist worker, so it is set up once per run and not once per
    worker, and so do all the modules that run numba kernels (NUMBA_USER), the tests that import LiteLLM
    (LITELLM_USER) and those that load the embedding model (DENSE_USER); every other test is still handed out
    one at a time."""
    if getattr(config, "workerinput", {}).get("ragzoo_dist") == "loadgroup":
        config.option.loadgroup = True
    numba_users: dict[Path, bool] = {}
    for item in items:
        if item.path not in numba_users:
            numba_users[item.path] = bool(NUMBA_USER.search(item.path.read_text(encoding="utf-8")))
        info = getattr(item, "_fixtureinfo", None)
        explicit = item.get_closest_marker("xdist_group")
        if explicit is not None:  # a test's own xdist_group mark, which xdist alone no longer applies (below)
            group = str(explicit.args[0] if explicit.args else explicit.kwargs.get("name", "default"))
        elif numba_users[item.path]:
            group = "numba"
        elif info is not None and any((defs := info.name2fixturedefs.get(name)) and defs[-1].scope in SHARED_SCOPES
                                      for name in info.names_closure):
            group = item.path.stem
        elif LITELLM_USER.search(item.name):
            group = "litellm"
        elif DENSE_USER.search(item.name):
            group = "embedding-model"
        else:
            continue
        if explicit is None:
            item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
            # what xdist does to group a test (its `item._nodeid = ...@group`), which pytest 9's structured
            # node ids ignore: the scheduler reads the group from the id's "@" suffix
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(f"{item.nodeid}@{group}")


def pytest_runtest_setup(item):
    from ragzoo.paths import is_demo_data

    if item.get_closest_marker("needs_full_data") is not None and is_demo_data():
        pytest.skip(FULL_DATA_REASON)


def pytest_terminal_summary(terminalreporter):
    """One line for all the tests skipped for want of the full data, instead of one per test."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if FULL_DATA_REASON in str(getattr(report, "longrepr", ""))]
    if skipped:
        from ragzoo.paths import locate_data

        root, why = locate_data()
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: they need the full benchmark data, and the data folder is {why} "
            f"({root}); set RAGZOO_DATA to the full data folder to run them")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data folder: the full benchmark data, or the demo slice (tests that need the full files carry
    `@pytest.mark.needs_full_data`)."""
    from ragzoo.paths import data_root

    return data_root()


@pytest.fixture(scope="session")
def wiki17_corpus(data_dir) -> Path:
    return data_dir / "hotpotqa" / "corpus_wiki17_abstracts.jsonl"


@pytest.fixture
def passages():
    from ragzoo.testing import make_passages

    return make_passages(10)


@pytest.fixture
def static_retriever(passages):
    from ragzoo.testing import StaticRetriever

    return StaticRetriever(passages)


@pytest.fixture
def retry_delays(monkeypatch) -> list[float]:
    """DSPy's retry back-off delays (Retry-After or exponential), recorded instead of slept."""
    import dspy.clients.execution as execution

    seen: list[float] = []
    original = execution._delay

    def record(exc, attempt):
        seen.append(original(exc, attempt))
        return 0.0

    monkeypatch.setattr(execution, "_delay", record)
    return seen


@pytest.fixture
def hub_retry_waits(monkeypatch) -> list[float]:
    """huggingface_hub's wait (1 s) before it resumes a dropped download, recorded instead of slept: the tests judge
    the resume, not the wait."""
    import time

    import huggingface_hub.file_download as file_download

    seen: list[float] = []

    class Clock:
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds):
            seen.append(seconds)

    monkeypatch.setattr(file_download, "time", Clock())
    return seen


@pytest.fixture
def raw_exchange():
    """`raw_exchange(url, payload, wait=3.0)`: send raw bytes to a loopback server, for framing tests an HTTP
    client would refuse to send; returns what came back and whether the server closed the connection."""
    import socket

    def exchange(url: str, payload: bytes, wait: float = 3.0) -> tuple[bytes, bool]:
        host, port = url.split("//", 1)[1].split(":")
        with socket.create_connection((host, int(port)), timeout=wait) as sock:
            sock.sendall(payload)
            data = b""
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return data, True
                    data += chunk
            except socket.timeout:
                return data, False

    return exchange


@pytest.fixture
def interrupting_lm():
    """`interrupting_lm(interrupt_at=None)`: a ScriptedLM that answers "no idea" and raises KeyboardInterrupt (the
    user's Ctrl-C) at its call `interrupt_at`, for the tests of what an interrupted compile keeps."""
    from ragzoo.testing import ScriptedLM

    def make(interrupt_at: int | None = None) -> ScriptedLM:
        calls = []

        def respond(context):
            calls.append(1)
            if interrupt_at is not None and len(calls) == interrupt_at:
                raise KeyboardInterrupt
            return {"answer": "no idea"}

        return ScriptedLM(default=respond)

    return make
