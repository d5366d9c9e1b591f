"""The suite's own distribution (tests/conftest.py): under `pytest -n 2`, the tests sharing a module-scoped fixture
run on one worker, so an expensive fixture (an MLflow server, a browser, a model) is set up once per run, not once
per worker, and the modules that run numba kernels share one worker. xdist's own grouping does not survive
pytest 9's node ids, so this guards the conftest's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SHARED = """
import os
import pytest

@pytest.fixture(scope="module")
def server():
    with open(os.environ["SETUPS"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return "up"

@pytest.mark.parametrize("n", range(6))
def test_uses_the_server(server, n):
    assert server == "up"
"""

KERNELS = """
import os
import pytest

@pytest.mark.parametrize("n", range(4))
def test_a_kernel(n):  # as the bm25 tests ask for it: backend="numba"
    with open(os.environ["KERNELS"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""

MARKED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("model")

@pytest.mark.parametrize("n", range(4))
def test_marked(n):
    with open(os.environ["MARKED"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""

ENGINES = """
import os
import pytest

@pytest.mark.parametrize("engine", ["auto", "litellm"])
@pytest.mark.parametrize("n", range(4))
def test_an_engine(n, engine):  # as the LM tests ask for LiteLLM: an engine parameter named after it
    if engine == "litellm":
        with open(os.environ["LITELLM"], "a") as log:
            log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""

MODEL = """
import os
import pytest

def log():
    with open(os.environ["MODEL"], "a") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

@pytest.mark.xdist_group("embedding-model")
@pytest.mark.parametrize("n", range(2))
def test_marked_with_the_models_group(n):
    log()

@pytest.mark.parametrize("n", range(2))
def test_a_dense_retriever_named_so(n):  # as the tests that load the embedding model without the mark
    log()
"""

PLAIN = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_plain(n):
    assert n >= 0
"""


def test_a_module_scoped_fixture_is_set_up_once_under_two_workers(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_cmdline_main, pytest_configure_node, "
                                          "pytest_collection_modifyitems  # noqa: F401\n")
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_plain.py").write_text(PLAIN)
    for name in ("test_kernels_a.py", "test_kernels_b.py"):
        (tmp_path / name).write_text(KERNELS)
    for name in ("test_marked_a.py", "test_marked_b.py"):
        (tmp_path / name).write_text(MARKED)
    for name in ("test_engines_a.py", "test_engines_b.py"):
        (tmp_path / name).write_text(ENGINES)
    for name in ("test_model_a.py", "test_model_b.py"):
        (tmp_path / name).write_text(MODEL)
    setups, kernels, marked = tmp_path / "setups.txt", tmp_path / "kernels.txt", tmp_path / "marked.txt"
    litellm, model = tmp_path / "litellm.txt", tmp_path / "model.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SETUPS": str(setups), "KERNELS": str(kernels), "MARKED": str(marked),
                               "LITELLM": str(litellm), "MODEL": str(model),
                               "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "52 passed" in done.stdout, done.stdout[-2000:]
    workers = setups.read_text().split()
    assert len(workers) == 1, workers  # one set-up, on one worker: not one per worker
    # the modules that run numba kernels share one worker: a cold kernel cache is compiled once, not per worker
    assert len(set(kernels.read_text().split())) == 1 and len(kernels.read_text().split()) == 8
    # and a test's own xdist_group mark groups it (xdist alone no longer does under pytest 9)
    assert len(set(marked.read_text().split())) == 1 and len(marked.read_text().split()) == 8
    # the tests that import LiteLLM (2.7 s of CPU) share one worker too, so only one worker pays for it
    assert len(set(litellm.read_text().split())) == 1 and len(litellm.read_text().split()) == 8
    # and the tests named for a dense retriever join the embedding model's group: one worker imports the model
    assert len(set(model.read_text().split())) == 1 and len(model.read_text().split()) == 8
