"""numba's disk cache (`cache=True`) checks only the stamp (mtime, size) of the file that defines the cached
function (numba PR #8396, unmerged): a compiled helper it calls from ANOTHER file is inlined into the cached
machine code, and an edit of that file (a `git pull` in an editable install) leaves the stale helper in use, with
no error. For a retriever that is a wrong top k. The rule: every function compiled with cache=True lives in the
same file as every compiled function it calls; a kernel passed at run time (bm25_topk's batch loop) is called through
its address, so the loop's cache holds none of its code."""

from __future__ import annotations

import inspect
import os
import pkgutil
import subprocess
import sys
import textwrap
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba.core.dispatcher import Dispatcher  # noqa: E402

import ragzoo.retrieval  # noqa: E402

RETRIEVAL = Path(ragzoo.retrieval.__file__).parent


def _numba_modules():
    return [import_module(f"ragzoo.retrieval.{info.name}") for info in pkgutil.iter_modules([str(RETRIEVAL)])
            if "numba" in (RETRIEVAL / f"{info.name}.py").read_text(encoding="utf-8")]


def _dispatchers(value):
    if isinstance(value, Dispatcher):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _dispatchers(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _dispatchers(item)


def _cached_dispatchers():
    """Every cache=True dispatcher the retrieval modules make: their zero-argument `_compiled*` entry points are
    called (numba compiles lazily, so this only wraps), and whatever they return or leave in module globals kept."""
    found = {}
    for module in _numba_modules():
        for name, function in vars(module).items():
            if name.startswith("_compiled") and inspect.isfunction(function) and function.__module__ == \
                    module.__name__ and not inspect.signature(function).parameters:
                for dispatcher in _dispatchers(function()):
                    found[id(dispatcher)] = dispatcher
        for value in list(vars(module).values()):
            for dispatcher in _dispatchers(value):
                found[id(dispatcher)] = dispatcher
    return [d for d in found.values() if type(d._cache).__name__ != "NullCache"]


def test_every_cached_kernel_calls_only_compiled_functions_of_its_own_file():
    cached = _cached_dispatchers()
    names = {d.py_func.__name__ for d in cached}
    assert {"_top_k", "_top_k_csc", "_scan_into", "_encode_bucket"} <= names  # the walk finds the kernels
    wrong = []
    for dispatcher in cached:
        function = dispatcher.py_func
        stamped = dispatcher._cache._impl.locator._py_file  # the one file numba's cache index checks
        assert os.path.samefile(stamped, inspect.getsourcefile(function))
        for name in function.__code__.co_names:
            callee = function.__globals__.get(name)
            if isinstance(callee, Dispatcher) and not os.path.samefile(inspect.getsourcefile(callee.py_func),
                                                                       stamped):
                wrong.append(f"{function.__qualname__} ({Path(stamped).name}) calls {name} "
                             f"({Path(inspect.getsourcefile(callee.py_func)).name})")
    assert not wrong, "a cached kernel inlines compiled code of another file: " + "; ".join(wrong)


_KERNEL = """
import numpy as np


def kernel(token_ids, k, data, indices, indptr, term_max, scratch, found, stats):
    rows = np.zeros(1, dtype=np.int64)
    rows[0] = ROW
    return rows, np.ones(1, dtype=np.float32)
"""

_RUN = """
import sys
import numba
import numpy as np
sys.path.insert(0, sys.argv[1])
import toykernel
from ragzoo.retrieval import bm25_topk

kernel = numba.njit(cache=True)(toykernel.kernel)
flat = np.zeros(2, dtype=np.int64)
arrays = (np.zeros(1, np.float32), np.zeros(1, np.int32), np.zeros(2, np.int64), np.zeros(1, np.float64),
          np.zeros(1, np.float32), np.zeros(1, np.int32), np.zeros(3, np.int64))
loop = bm25_topk._compiled_loop(kernel, flat, arrays)
rows, scores, counts = np.empty(2, np.int64), np.empty(2, np.float32), np.empty(2, np.int64)
loop(kernel, flat, np.array([1, 2]), 1, *arrays, rows, scores, counts)
print(rows.tolist(), sum(loop.stats.cache_hits.values()))
"""


def test_the_cached_batch_loop_runs_the_kernel_as_it_is_now(tmp_path):
    """The batch loop (`bm25_topk._top_k_loop`) is cached on disk but takes the kernel at run time: after the
    kernel's file changes, the loop comes from its cache (a hit) and still runs the new kernel."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    (tmp_path / "run.py").write_text(_RUN)

    def run(row):
        (tmp_path / "toykernel.py").write_text(textwrap.dedent(_KERNEL).replace("ROW", str(row)))
        os.utime(tmp_path / "toykernel.py", (row, row))  # a stamp of its own, whatever the clock's resolution
        out = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)], env=env, check=True,
                             capture_output=True, text=True, timeout=120).stdout.split()
        return out[0] + out[1], int(out[2])

    assert run(7) == ("[7,7]", 0)
    assert run(9) == ("[9,9]", 1)  # the loop from the disk cache, the kernel as edited
