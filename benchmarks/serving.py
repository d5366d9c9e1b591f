"""Serving benchmarks (issue 15), loopback only:

1. `ragzoo serve` (ColBERTv2 API, bm25 over the shipped sample): p50/p99 and req/s at 1, 8 and 32 clients with
   HotPotQA questions, driven by a lean raw-socket client (`benchmarks.loadgen`) and, for comparison with the
   earlier figures, by httpx's async client; results checked identical to direct searches; overload with a
   small `--max-pending` (503 + Retry-After counted). Targets: p99 < 50 ms at 32 clients, >= 1,000 req/s.
2. `ragzoo serve --program` (a saved `rag` program, k=3) with the stub LM server at 200 ms per call: 32
   clients, throughput vs the ideal concurrency / (latency x calls per question), errors, p99, and CPU per
   question of the server, the stub and the load generator (they share the cores). Target: >= 0.8 x ideal, 0
   errors. `--max-concurrency 32` also sets the served LM's endpoint limit (`--lm-max-concurrency` defaults to it;
   before, the LM kept ragzoo's default of 8 in flight: 8 x 1/0.2 s = 40 q/s at most).

   `--workers N` serves the program from N processes (`ragzoo serve --program --workers N`), each with
   `--max-concurrency` = the clients; `--clients` sets the closed-loop clients (default 32). Issue 24's table:
   `python -m benchmarks.serving --part program --clients 64 --workers 1` and `... --workers 2`.

    python -m benchmarks.serving [--requests 3200] [--questions 320] [--out results/serving.json]
        [--part all|retrieval|program] [--clients 32] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import percentile, wait_healthy, write_json
from benchmarks.loadgen import get_request, post_request, run_load
from benchmarks.retrieval import QUESTIONS, _free_port, _load
from ragzoo.retrieval.specs import DEFAULT_RETRIEVER


def _row(label: str, clients: int, latencies: list[float], statuses: list[int], elapsed: float,
         cpu: float | None = None) -> dict:
    row = {"run": label, "clients": clients, "requests": len(latencies),
           "ok": sum(s == 200 for s in statuses), "503": sum(s == 503 for s in statuses),
           "errors": sum(s not in (200, 503) for s in statuses),
           "p50 ms": 1000 * percentile(latencies, 50), "p99 ms": 1000 * percentile(latencies, 99),
           # answered (200) per second: a 503 or a dropped connection is not throughput
           "req/s": sum(s == 200 for s in statuses) / elapsed, "sent/s": len(latencies) / elapsed}
    if cpu is not None:
        row["server CPU ms/req"] = 1000 * cpu / max(1, len(latencies))
    return row


def bench_retrieval(questions: list[str], requests: int, env: dict, spec: str = DEFAULT_RETRIEVER) -> list[dict]:
    from ragzoo.retrieval import make_retriever

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever", spec, "--port",
                               str(port)], env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        ready = wait_healthy(url, server)
        process = psutil.Process(server.pid)
        wanted = [get_request("/", {"query": questions[i % len(questions)], "k": 10}) for i in range(requests)]
        asyncio.run(run_load("127.0.0.1", port, wanted[:200], 4))  # warm-up
        for clients in (1, 8, 32):
            count = requests if clients > 1 else requests // 4
            cpu0, started = sum(process.cpu_times()[:2]), time.perf_counter()
            latencies, statuses = asyncio.run(run_load("127.0.0.1", port, wanted[:count], clients))
            rows.append(_row("lean client", clients, latencies, statuses, time.perf_counter() - started,
                             sum(process.cpu_times()[:2]) - cpu0))
        started = time.perf_counter()
        latencies = asyncio.run(_load(url + "/", questions, 32, max(1, requests // 4 // 32)))
        rows.append(_row("httpx client (earlier benchmark)", 32, latencies, [200] * len(latencies),
                         time.perf_counter() - started))
        # identical results: the served top-10 against direct searches
        import httpx

        direct = make_retriever(spec, show_progress=False)
        same = sum([t["pid"] for t in httpx.get(url + "/", params={"query": q, "k": 10}).json()["topk"]]
                   == [p.pid for p in direct(q, 10)] for q in questions[:200])
        rows[-1]["identical top-10 (of 200)"] = same
        rows[0]["ready s"] = ready
    finally:
        server.terminate()
        server.wait(timeout=20)
    # overload: a small queue, 64 clients
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever", spec, "--port",
                               str(port), "--max-pending", "8"], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        wanted = [get_request("/", {"query": questions[i % len(questions)], "k": 100}) for i in range(requests)]
        started = time.perf_counter()
        latencies, statuses = asyncio.run(run_load("127.0.0.1", port, wanted, 64))
        rows.append(_row("overload: --max-pending 8, k=100", 64, latencies, statuses, time.perf_counter() - started))
    finally:
        server.terminate()
        server.wait(timeout=20)
    return rows


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _server_cpu(process: psutil.Process) -> float:
    """CPU of the server and its worker processes (`--workers N`: the parent only waits; they answer)."""
    total = _cpu(process)
    for child in process.children(recursive=True):
        try:
            total += _cpu(child)
        except psutil.NoSuchProcess:
            pass
    return total


def _workers(process: psutil.Process) -> list[psutil.Process]:
    """The `--workers` processes (not multiprocessing's resource tracker, also a child)."""
    found = []
    for child in process.children():
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _wait_for_workers(url: str, workers: int, server: subprocess.Popen, seconds: float = 180) -> None:
    """Until `workers` distinct processes answered /health (each new connection lands on any of them), so the
    load's connections are spread over all of them rather than over the first one up."""
    import httpx

    seen: set = set()
    end = time.monotonic() + seconds
    while len(seen) < workers:
        if server.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"only {len(seen)} of {workers} workers answered /health")
        try:
            seen.add(httpx.get(url + "/health", headers={"Connection": "close"}, timeout=5).json()["worker"])
        except httpx.TransportError:
            time.sleep(0.3)


def bench_program(questions: list[str], env: dict, tmp: Path, latency: float = 0.2, clients: int = 32,
                  workers: int = 1) -> dict:
    """The program server under `clients` closed-loop clients; CPU per question of each of the three processes
    (they share the machine's cores, so their sum bounds throughput) and the LM latency the program saw."""
    import ragzoo
    from ragzoo import programs
    from ragzoo.retrieval import make_retriever

    artifact = tmp / "rag"
    if not artifact.exists():
        ragzoo.save(programs.get("rag", retriever=make_retriever(DEFAULT_RETRIEVER, show_progress=False), k=3),
                    artifact, method="rag")
    calls_per_question = 1
    # the stub LM in its own process: in this one it would share a GIL with the load generator
    stub_port = _free_port()
    stub = subprocess.Popen([sys.executable, "-m", "ragzoo.stubserver", "--port", str(stub_port), "--latency",
                             str(latency)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ragzoo.cli", "serve", "--program",
         str(artifact), "--lm", "openai/stub", "--api-base", f"http://127.0.0.1:{stub_port}/v1", "--port", str(port),
         "--max-concurrency", str(clients), "--no-cache", "--workers", str(workers)],
        env={**env, "OPENAI_API_KEY": "stub"}, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        _wait_for_workers(f"http://127.0.0.1:{port}", workers, server)
        process, stub_process = psutil.Process(server.pid), psutil.Process(stub.pid)
        body = [post_request("/ask", json.dumps({"question": q}).encode()) for q in questions]
        asyncio.run(run_load("127.0.0.1", port, body[:2 * clients], clients))  # warm-up: imports, first calls
        cpu0, stub0, own0 = _server_cpu(process), _cpu(stub_process), time.process_time()
        child_cpu0 = {child.pid: _cpu(child) for child in _workers(process)}
        started = time.perf_counter()
        replies: list[bytes] = []
        latencies, statuses = asyncio.run(run_load("127.0.0.1", port, body, clients, bodies=replies))
        elapsed = time.perf_counter() - started
        cpu, stub_cpu, own = _server_cpu(process) - cpu0, _cpu(stub_process) - stub0, time.process_time() - own0
        worker_cpu = [_cpu(child) - child_cpu0.get(child.pid, 0.0) for child in _workers(process)]
    finally:
        for child in (server, stub):
            child.terminate()
            child.wait(timeout=20)
    ideal = clients / (latency * calls_per_question)
    label = f"program rag, stub LM {int(latency * 1000)} ms, {workers} worker{'s' if workers > 1 else ''}"
    row = _row(label, clients, latencies, statuses, elapsed, cpu)
    row["workers"] = workers
    if workers > 1:  # how the connections spread: each worker's share of the server's CPU
        row["worker CPU shares"] = [round(share / max(cpu, 1e-9), 2) for share in worker_cpu]
    count = max(1, len(latencies))
    row["stub CPU ms/req"] = 1000 * stub_cpu / count
    row["load generator CPU ms/req"] = 1000 * own / count
    row["total CPU ms/req"] = row["server CPU ms/req"] + row["stub CPU ms/req"] + row["load generator CPU ms/req"]
    lm_latencies = []  # what the program saw per LM call: the stub's latency + transport + waiting for a slot/GIL
    for reply in replies:
        try:
            lm_latencies += [call["latency"] for call in json.loads(reply)["trace"]["lm_calls"]]
        except (ValueError, KeyError, TypeError):
            pass
    if lm_latencies:
        row["LM call p50 ms"] = 1000 * percentile(lm_latencies, 50)
        row["LM call p99 ms"] = 1000 * percentile(lm_latencies, 99)
    row["ideal q/s"] = ideal
    row["throughput / ideal"] = row["req/s"] / ideal
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3200)
    parser.add_argument("--questions", type=int, default=320, help="program benchmark: questions asked")
    parser.add_argument("--out", default=None)
    parser.add_argument("--part", choices=("all", "retrieval", "program"), default="all",
                        help="run only the retrieval-server or the program-server benchmark")
    parser.add_argument("--clients", type=int, default=32, help="program benchmark: closed-loop clients")
    parser.add_argument("--workers", type=int, default=1, help="program benchmark: serve --workers N processes")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragzoo.paths import data_root

    questions = [json.loads(line)["question"] for line in open(data_root() / QUESTIONS)]
    with tempfile.TemporaryDirectory(prefix="ragzoo-bench-serving-") as scratch:
        tmp = Path(scratch)
        env = {**os.environ, "RAGZOO_CACHE": os.environ.get("RAGZOO_CACHE", str(tmp / "cache")),
               "DSPY_CACHEDIR": str(tmp / "dspy")}
        rows = bench_retrieval(questions, args.requests, env) if args.part in ("all", "retrieval") else []
        program = bench_program(questions[:args.questions], env, tmp, clients=args.clients, workers=args.workers) \
            if args.part in ("all", "program") else None
    for row in rows + ([program] if program else []):
        print(json.dumps(row))
    result: dict = {"retrieval": rows, "program": program, "targets": {}}
    if rows:
        top = next(r for r in rows if r["run"] == "lean client" and r["clients"] == 32)
        result["targets"].update({"retrieval p99 < 50 ms at 32 clients": top["p99 ms"] < 50,
                                  "retrieval >= 1000 req/s at 32 clients": top["req/s"] >= 1000})
    if program:
        result["targets"].update({"program throughput >= 0.8 ideal": program["throughput / ideal"] >= 0.8,
                                  "program 0 errors": program["errors"] == 0 and program["503"] == 0})
    print(json.dumps(result["targets"], indent=2))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
