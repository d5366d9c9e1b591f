"""`evaluate` forks worker processes (`--processes`, or by itself past 64 requests in flight). A dense retriever
runs native thread pools: faiss's OpenMP (libgomp) and torch's intra-op pool. A pool the parent used does not
survive fork(): the child's next parallel region waits for threads that do not exist, for ever (measured with
faiss 1.15.1: one search of 20,000+ vectors in the parent, then the same search in a forked child, hangs; so does
torch encoding 64 queries). So (1) a forked child of a process that loaded a dense retriever runs those pools on
one thread, which needs no pool, and (2) the automatic split keeps one process for a retriever that declares
`native_threads` (onnxruntime's own pool is not reset by (1)); an explicit --processes says what it does."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from ragzoo.stubserver import StubLMServer

pytest.importorskip("faiss")


def _in_a_forked_child(work, timeout: float = 20.0) -> tuple[int | None, float]:
    """(exit status of `work()` run in a forked child, None if it hung; seconds taken)."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            work()
            os._exit(0)
        except BaseException:
            os._exit(1)
    while time.monotonic() - started < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - started
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, time.monotonic() - started


def test_a_dense_retriever_searched_before_fork_still_searches_in_the_child(tmp_path):
    """Through DenseRetriever: an index of 30,000 vectors (the 3 passages' own embeddings, then zero rows, so
    faiss searches in parallel), 64 queries searched in the parent (torch and faiss pools now exist), then a
    search in a forked child: it finishes (it hung for ever before, killed here after 20 s)."""
    import faiss

    from ragzoo.retrieval import dense

    docs = [{"id": "z", "title": "Zebra", "text": "Zebras have black and white stripes."},
            {"id": "l", "title": "Lion", "text": "Lions are big cats of Africa."},
            {"id": "v", "title": "Volga", "text": "The Volga is the longest river in Europe."}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    folder, _meta, _built = dense.ensure_dense_index(corpus, out_dir=tmp_path / "index", show_progress=False)
    small = faiss.read_index(str(folder / dense.FAISS_FILE))
    vectors = np.zeros((30_000, small.d), dtype=np.float32)
    vectors[:3] = small.reconstruct_n(0, 3)
    big = faiss.IndexFlatIP(small.d)
    big.add(vectors)
    faiss.write_index(big, str(folder / dense.FAISS_FILE))
    retriever = dense.DenseRetriever(folder, check_stale=False)
    assert retriever.native_threads
    import torch

    # The suite runs with OMP_NUM_THREADS=1 (tests/conftest.py), under which no pool is ever started; a user's
    # process has one thread per core, as here.
    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(2)
    faiss.omp_set_num_threads(2)
    try:
        queries = [f"which animal has stripes, question {i}" for i in range(64)]
        assert [hits[0].pid for hits in retriever.batch(queries, 1)] == ["z"] * 64  # the pools are up now

        def search():
            assert [hits[0].pid for hits in retriever.batch(queries, 1)] == ["z"] * 64
            assert retriever("the longest river of Europe", 1)[0].pid == "v"

        status, seconds = _in_a_forked_child(search)
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])
    assert status == 0, f"the child's search {'hung' if status is None else 'failed'} ({seconds:.1f}s)"


def test_the_automatic_split_keeps_one_process_for_a_dense_retriever(tmp_path, cli, monkeypatch, questions_file,
                                                                      small_corpus, helpers):
    """80 threads on 2 CPUs split into 2 processes with bm25 (test_evaluate_processes_auto.py); with a dense
    retriever they stay in one process, and --processes 2 says what the workers' native pools do."""
    import ragzoo.runs

    monkeypatch.setattr(ragzoo.runs, "usable_cpus", lambda: 2)
    data = questions_file(80)
    with StubLMServer(responder=helpers.digest_responder, latency=0.0) as server:
        def evaluate(out, *extra):
            return cli("evaluate", "--method", "rag", "--knob", "k=1", "--retriever", f"dense:{small_corpus}",
                       "--data", data, "--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--out",
                       tmp_path / out, "--no-cache", "--threads", "80", "--max-concurrency", "80", *extra)

        auto = evaluate("auto")
        assert auto.code == 0, auto.err
        summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
        assert (summary["processes"], summary["threads"]) == (1, 80) and summary["failures"] == 0
        assert "processes of" not in auto.err
        explicit = evaluate("explicit", "--processes", "2", "-n", "8")
        assert explicit.code == 0, explicit.err
        assert json.loads((tmp_path / "explicit" / "summary.json").read_text())["processes"] == 2
        said = [line for line in explicit.err.splitlines() if "native thread pools" in line]
        assert len(said) == 1 and "one thread" in said[0], explicit.err


def test_the_fork_hook_lives_with_the_retriever_contract_not_one_backend(tmp_path):
    """Any backend that runs torch or faiss (dense, hybrid, colbert) gets one native thread in a forked child: the
    hook is registered by ragzoo.retrieval.base, which every retriever imports, not by dense.py alone. Fake torch and
    faiss modules record the calls, so no native library is loaded."""
    import subprocess
    import sys

    script = tmp_path / "fork_hook.py"
    script.write_text(
        "import os, sys, types\n"
        "calls = []\n"
        "sys.modules['torch'] = types.SimpleNamespace(set_num_threads=lambda n: calls.append(('torch', n)))\n"
        "sys.modules['faiss'] = types.SimpleNamespace(omp_set_num_threads=lambda n: calls.append(('faiss', n)))\n"
        "import ragzoo.retrieval.colbert_local as colbert\n"
        "assert 'ragzoo.retrieval.dense' not in sys.modules\n"
        "assert colbert.ColBERTLocalRetriever.native_threads\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if sorted(calls) == [('faiss', 1), ('torch', 1)] else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert calls == [], calls  # the parent keeps its threads\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
