"""Evaluation throughput against a slow LM: examples/s of `ragzoo.runs.evaluate` with the loopback stub LM
server answering every call after a fixed latency (default 200 ms), at 1/4/16 threads, through the real
`dspy.LM` (`make_lm("openai/stub", api_base=...)`, response cache off) and the bm25 retriever.

Ideal = threads / (latency × LM calls per example); efficiency = measured / ideal (target >= 0.8). Each
setting runs a fixed number of examples (`--per-thread` × threads, at least `--min-examples`), so it stops
by itself. Methods: `rag` (1 LM call per example) and `activerag` (3 sequential calls per example).

    python -m benchmarks.throughput [--latency 0.2] [--threads 1,4,16] [--methods rag,activerag]
"""

from __future__ import annotations

import argparse
import tempfile
import time

TARGET = 0.8


def run_setting(method_id: str, threads: int, n: int, latency: float, retriever, examples) -> dict:
    import dspy

    from ragzoo import programs
    from ragzoo.lm import make_lm
    from ragzoo.runs import evaluate
    from ragzoo.stubserver import StubLMServer

    program = programs.get(method_id, retriever=retriever)
    with StubLMServer(latency=latency) as server, tempfile.TemporaryDirectory(prefix="ragzoo-tput-") as out:
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        with dspy.context(lm=lm):
            evaluate(program, examples[:2], "em", None, threads=1, progress=False)  # warm-up: connections, imports
            server.reset_counters()
            started = time.perf_counter()
            summary = evaluate(program, examples[:n], "em", f"{out}/run", threads=threads, progress=False)
            elapsed = time.perf_counter() - started
        requests = server.requests
    calls = summary["usage"]["lm_calls_per_question"] or requests / max(1, n)
    rate = summary["n"] / elapsed
    ideal = threads / (latency * calls)
    return {"method": method_id, "threads": threads, "examples": summary["n"], "failures": summary["failures"],
            "lm_calls_per_example": calls, "server_requests": requests, "seconds": elapsed,
            "examples_per_s": rate, "ideal_per_s": ideal, "efficiency": rate / ideal}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2, help="stub LM latency per call, seconds")
    parser.add_argument("--threads", default="1,4,16")
    parser.add_argument("--methods", default="rag,activerag")
    parser.add_argument("--per-thread", type=int, default=8, help="examples per thread in each setting")
    parser.add_argument("--min-examples", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from ragzoo import data
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    from benchmarks.common import markdown_table, write_json

    thread_counts = [int(t) for t in args.threads.split(",") if t]
    n_max = max(max(args.min_examples, args.per_thread * t) for t in thread_counts)
    examples = data.load("hotpotqa", "dev", n=n_max + 2, seed=None)
    retriever = make_retriever(DEFAULT_RETRIEVER)
    results = []
    for method_id in filter(None, args.methods.split(",")):
        for threads in thread_counts:
            n = max(args.min_examples, args.per_thread * threads)
            results.append(run_setting(method_id, threads, n, args.latency, retriever, examples[2:]))
    rows = [[r["method"], r["threads"], r["examples"], f"{r['lm_calls_per_example']:g}", r["failures"],
             f"{r['seconds']:.2f}", f"{r['examples_per_s']:.2f}", f"{r['ideal_per_s']:.2f}",
             f"{r['efficiency']:.3f}", "yes" if r["efficiency"] >= TARGET else "NO"] for r in results]
    print(f"\nEvaluation throughput: stub LM at {1000 * args.latency:.0f} ms per call, real dspy.LM over loopback, "
          f"{DEFAULT_RETRIEVER}, ragzoo.runs.evaluate with a run directory\n")
    print(markdown_table(["method", "threads", "examples", "LM calls/ex", "failures", "seconds", "ex/s",
                          "ideal ex/s", "efficiency", f">= {TARGET}"], rows))
    write_json(args.out, {"latency": args.latency, "target": TARGET, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
