"""Recovery of `ragzoo serve --program` after a storm against a hanging LM (issue 20 §4), loopback only.

Each round: the stub LM hangs (its replies never come); `--clients` clients (default 64) ask at once, which fills
every worker (`--max-concurrency`, default 32) and most of the queue; once the whole storm is in, the LM turns
healthy (the requests already sent stay hung, as a real hung server's would) and one client asks again and again
until a question is answered. Measured: the time from the storm's start and from the LM turning healthy to that
first answer, the time until nothing is in flight (`/health` `in_flight` 0), how the storm was answered (504 past
the deadline, 200 for questions that started on the healthy LM), and how long `/health` took meanwhile.
Target: the first answer within deadline + 1 s of the storm.

Before issue 20 the server had no deadline: `in_flight` stayed at the worker count for as long as the LM hung
(430+ s observed) and every new question got 503.

    python -m benchmarks.serve_recovery [--rounds 5] [--clients 64] [--deadline 1] [--out results/serve_recovery.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import markdown_table, wait_healthy, write_json
from benchmarks.loadgen import _read_response, get_request, post_request
from benchmarks.retrieval import _free_port
from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

QUESTION = json.dumps({"question": "Who directed the film Ed Wood?"}).encode()


async def _ask(port: int, request: bytes, timeout: float = 60) -> tuple[int, float]:
    """(status, seconds) of one request on a fresh connection (0 for a transport failure)."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            status, _ = await asyncio.wait_for(_read_response(reader), timeout)
        finally:
            writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        status = 0
    return status, time.monotonic() - started


async def _health(port: int) -> tuple[int, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    try:
        writer.write(get_request("/health", {}))
        _, body = await _read_response(reader)
    finally:
        writer.close()
    return json.loads(body)["in_flight"], time.monotonic() - started


async def storm_round(port: int, stub, state: dict, clients: int, workers: int, deadline: float) -> dict:
    request = post_request("/ask", QUESTION)
    sent_before = stub.requests
    state["hang"] = True
    started = time.monotonic()
    storm = [asyncio.ensure_future(_ask(port, request)) for _ in range(clients)]
    health_seconds: list[float] = []
    while True:  # the whole storm is in: every worker waits on the hung LM, the rest waits in the queue
        in_flight, took = await _health(port)
        health_seconds.append(took)
        finished = sum(task.done() for task in storm)
        if (stub.requests - sent_before >= workers and in_flight + finished >= clients) \
                or time.monotonic() - started > 10 * deadline:
            break
        await asyncio.sleep(0.01)
    state["hang"] = False
    healthy = time.monotonic()
    first_ok, probes = None, 0
    while first_ok is None and time.monotonic() - healthy < 10 * deadline + 10:
        status, _ = await _ask(port, request)
        probes += 1
        if status == 200:
            first_ok = time.monotonic()
    statuses = [status for status, _ in await asyncio.gather(*storm)]
    while True:
        in_flight, took = await _health(port)
        health_seconds.append(took)
        if in_flight == 0 or time.monotonic() - started > 60:
            break
        await asyncio.sleep(0.01)
    drained = time.monotonic()
    return {"first answer after storm start s": None if first_ok is None else first_ok - started,
            "first answer after LM healthy s": None if first_ok is None else first_ok - healthy,
            "storm fully in after s": healthy - started, "in_flight 0 after storm start s": drained - started,
            "probes": probes, "storm 504": statuses.count(504), "storm 200": statuses.count(200),
            "storm other": len(statuses) - statuses.count(504) - statuses.count(200),
            "health max ms": 1000 * max(health_seconds), "LM requests hung": stub.requests - sent_before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--deadline", type=float, default=1.0, help="serve --deadline (and --timeout), seconds")
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ragzoo
    from ragzoo import programs
    from ragzoo.retrieval import make_retriever
    from ragzoo.stubserver import StubLMServer

    state = {"hang": False}
    rounds = []
    with tempfile.TemporaryDirectory(prefix="ragzoo-bench-recovery-") as scratch, \
            StubLMServer(faults=lambda index, body: "hang" if state["hang"] else None) as stub:
        tmp = Path(scratch)
        artifact = tmp / "rag"
        ragzoo.save(programs.get("rag", retriever=make_retriever(DEFAULT_RETRIEVER, show_progress=False), k=3),
                    artifact, method="rag")
        env = {**os.environ, "RAGZOO_CACHE": os.environ.get("RAGZOO_CACHE", str(tmp / "cache")),
               "DSPY_CACHEDIR": str(tmp / "dspy"), "OPENAI_API_KEY": "stub-key-for-the-benchmark"}
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "ragzoo.cli", "serve", "--program", str(artifact), "--lm", "openai/stub",
             "--api-base", stub.base_url + "/v1", "--port", str(port), "--no-cache", "--deadline", str(args.deadline),
             "--timeout", str(args.deadline), "--max-concurrency", str(args.max_concurrency)], env=env,
            stderr=subprocess.DEVNULL)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", server)
            for _ in range(4):  # warm-up: imports, the first LM calls
                asyncio.run(_ask(port, post_request("/ask", QUESTION)))
            for number in range(args.rounds):
                row = asyncio.run(storm_round(port, stub, state, args.clients, args.max_concurrency, args.deadline))
                rounds.append({"round": number + 1, **row})
                print(json.dumps(rounds[-1]))
        finally:
            server.terminate()
            server.wait(timeout=20)
    answered = [r["first answer after storm start s"] for r in rounds]
    summary = {"deadline s": args.deadline, "clients": args.clients, "max concurrency": args.max_concurrency,
               "rounds": len(rounds),
               "first answer after storm start s (median)": statistics.median(a for a in answered if a is not None)
               if any(a is not None for a in answered) else None,
               "first answer after storm start s (max)": max(answered) if None not in answered else None,
               "first answer after LM healthy s (max)": max(r["first answer after LM healthy s"] or 0 for r in rounds),
               "in_flight 0 after storm start s (max)": max(r["in_flight 0 after storm start s"] for r in rounds),
               "health max ms": max(r["health max ms"] for r in rounds)}
    summary["target: first answer within deadline + 1 s"] = (
        summary["first answer after storm start s (max)"] is not None
        and summary["first answer after storm start s (max)"] <= args.deadline + 1)
    keys = ["round", "storm fully in after s", "first answer after storm start s", "first answer after LM healthy s",
            "in_flight 0 after storm start s", "storm 504", "storm 200", "storm other", "health max ms"]
    print(markdown_table(keys, [[r[k] for k in keys] for r in rounds]))
    print(json.dumps(summary, indent=2))
    write_json(args.out, {"rounds": rounds, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
