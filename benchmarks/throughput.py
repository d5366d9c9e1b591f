"""Evaluation throughput against a slow LM: questions/s of `ragzoo.runs.evaluate` (with a run directory) against
the stub LM server (`python -m ragzoo.stubserver --latency`, default 200 ms, in a process of its own so its CPU is
not counted as ragzoo's), through the real `dspy.LM` (`make_lm("openai/stub", api_base=...)`, response cache off,
`--max-concurrency` = requests in flight) and the bm25 retriever (`--retriever`: its numpy backend by default;
`?backend=numba` for the compiled one, less CPU a question where many threads share one interpreter: 2.4-2.6 ms a
call against 3.2-4.6 at 64 in flight, none measurable at 1), at several threads x processes.

For each setting: in flight = threads x processes; ideal q/s = in flight / (latency x LM calls per question);
ratio = measured / ideal; CPU ms per LM call = ragzoo's process CPU time (this process and its worker processes,
user + system, to the microsecond) / LM calls, the figure a busy machine changes least. The 1-minute load average is
printed with the table: on a shared machine, read the ratios beside it.

A run also costs CPU once, whatever its size (the run folder, its config and summary written and fsync'ed, the
LM's first request: its engine, router and connection; threads or worker processes started): spread over 15
questions at 1 x 1 it is a tenth of the figure. So each setting is also run on one round of questions (in flight
questions) first, and the table gives apart: per call excluding set-up = (CPU of the full run - CPU of the short
one) / (their difference in LM calls), and set-up = CPU of the short run - its calls x that. The verdict is on the
whole figure, set-up included.

    python -m benchmarks.throughput [--latency 0.2] [--settings 1x1,32x1,64x1,128x1,256x1,32x2,64x2,128x2] [--rounds 5]

A setting is THREADSxPROCESSES (`evaluate --threads T --processes P`), or THREADSxauto (`evaluate --threads T`:
the split `ragzoo.runs.auto_processes` picks, in the table as the threads and processes it ran); each runs
`--rounds` questions per request in flight (at least `--min-examples`), so it stops by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

TARGETS = {32: 0.9, 64: 0.85}  # the targets for the ratio at that many requests in flight
CPU_TARGET_MS = 3.0


@contextlib.contextmanager
def stub_server(latency: float):
    """The stub LM server in its own process; yields its /v1 base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "ragzoo.stubserver", "--port", str(port), "--latency",
                                str(latency)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/models", timeout=1).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the stub LM server did not start") from None
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(10)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its ended children (evaluate's worker processes), to the microsecond:
    `os.times()` counts in clock ticks (10 ms), a sixth of the CPU of a 15-question setting."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def run_setting(method_id: str, threads: int, processes: int, n: int, latency: float, base: str, retriever,
                examples, short: dict | None = None) -> dict:
    """One evaluate run of `n` questions; `short`: this setting's run of one round, for the set-up apart."""
    import dspy

    from ragzoo import programs
    from ragzoo.lm import make_lm
    from ragzoo.runs import evaluate

    program = programs.get(method_id, retriever=retriever)
    in_flight = threads * (processes or 1)  # processes None: evaluate's own split (`auto_processes`)
    with tempfile.TemporaryDirectory(prefix="ragzoo-tput-") as out:
        # a fresh LM per setting: no pooled connection of an earlier setting is inherited by forked workers
        lm = make_lm("openai/stub", api_base=base, cache=False, num_retries=0, max_concurrency=in_flight)
        with dspy.context(lm=lm):
            cpu, started = cpu_seconds(), time.perf_counter()
            summary = evaluate(program, examples[:n], "em", f"{out}/run", threads=threads, processes=processes,
                               progress=False)
            elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    calls = summary["usage"]["lm_calls"]
    per_question = calls / max(1, summary["n"])
    if short is not None and calls > short["lm_calls"]:
        marginal = (cpu - short["cpu_seconds"]) / (calls - short["lm_calls"])
        extra = {"cpu_ms_per_call_marginal": 1000 * marginal,
                 "setup_cpu_ms": 1000 * (short["cpu_seconds"] - short["lm_calls"] * marginal),
                 "short_examples": short["examples"], "short_cpu_seconds": short["cpu_seconds"]}
    else:
        extra = {}
    threads, processes = summary["threads"], summary["processes"]
    rate = summary["n"] / elapsed
    ideal = in_flight / (latency * per_question) if per_question else float("nan")
    return {"method": method_id, "in_flight": in_flight, "threads": threads, "processes": processes,
            "examples": summary["n"], "failures": summary["failures"], "lm_calls": calls,
            "lm_calls_per_example": per_question, "seconds": elapsed, "examples_per_s": rate, "ideal_per_s": ideal,
            "ratio": rate / ideal, "cpu_seconds": cpu, "cpu_ms_per_call": 1000 * cpu / max(1, calls),
            "load_average": os.getloadavg()[0], **extra}


def idle_penalty(gap: float, units: int = 40) -> dict:
    """CPU ms of a fixed pure-Python workload (JSON, a regex, a dict sorted: about a warm LM call's ~1 ms, no
    ragzoo or DSPy code) run back to back, then with `gap` seconds idle between units, as a question at 1 in flight
    waits for its LM. Their ratio is what idling costs any Python code on this machine (caches and the CPU's state
    after the wait), and so how much more a question costs at 1 in flight than back to back: 1.5-1.8x on the
    2-core VM of the issue 24 notes."""
    import json
    import re

    record = {"messages": [{"role": "user", "content": "x" * 2000 + str(i)} for i in range(6)]}
    marker = re.compile(r"\[\[ ## (\w+) ## \]\]")

    def unit() -> None:
        for _ in range(12):
            json.loads(json.dumps(record))
            marker.findall("[[ ## answer ## ]] text " * 50)
            sorted({str(i): i for i in range(300)}.items())

    for _ in range(10):
        unit()
    figures = {}
    for name, pause in (("back_to_back_ms", 0.0), ("after_idle_ms", gap)):
        spent = 0.0
        for _ in range(units):
            if pause:
                time.sleep(pause)
            started = time.process_time()
            unit()
            spent += time.process_time() - started
        figures[name] = 1000 * spent / units
    figures["factor"] = figures["after_idle_ms"] / figures["back_to_back_ms"]
    return figures


def _figure(result: dict, key: str, spec: str) -> str:
    return format(result[key], spec) if key in result else ""


def parse_settings(text: str) -> list[tuple[int, int]]:
    settings = []
    for item in filter(None, text.split(",")):
        threads, _, processes = item.partition("x")
        settings.append((int(threads), None if processes == "auto" else int(processes or 1)))
    return settings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2, help="stub LM latency per call, seconds")
    parser.add_argument("--settings", default="1x1,32x1,64x1,128x1,256x1,32x2,64x2,128x2",
                        help="THREADSxPROCESSES, comma-separated")
    parser.add_argument("--methods", default="rag")
    parser.add_argument("--rounds", type=int, default=5, help="questions per request in flight in each setting")
    parser.add_argument("--min-examples", type=int, default=8)
    parser.add_argument("--retriever", default=None,
                        help="retriever spec (default: ragzoo's default retriever, bm25 on the numpy backend); "
                             "e.g. bm25:hotpotqa/corpus_wiki17_abstracts.jsonl?backend=numba")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import dspy

    from ragzoo import data, programs
    from ragzoo.lm import make_lm
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER
    from ragzoo.runs import evaluate

    from benchmarks.common import markdown_table, write_json

    settings = parse_settings(args.settings)
    n_max = max(max(args.min_examples, args.rounds * t * (p or 1)) for t, p in settings)
    in_flight_max = max(t * (p or 1) for t, p in settings)
    examples = data.load("hotpotqa", "dev", n=n_max + in_flight_max + 2, seed=None)
    retriever_spec = args.retriever or DEFAULT_RETRIEVER
    retriever = make_retriever(retriever_spec)
    results = []
    idle = [idle_penalty(args.latency)]
    with stub_server(args.latency) as base:
        for method_id in filter(None, args.methods.split(",")):
            warm = make_lm("openai/stub", api_base=base, cache=False, num_retries=0)
            with dspy.context(lm=warm):  # imports, the retriever's first queries: not in any setting's figures
                evaluate(programs.get(method_id, retriever=retriever), examples[:2], "em", None, progress=False)
            for threads, processes in settings:
                n = max(args.min_examples, args.rounds * threads * (processes or 1))
                short = None
                if n > threads * (processes or 1):  # other questions than the full run's: no retriever cache shared
                    short = run_setting(method_id, threads, processes, threads * (processes or 1), args.latency,
                                        base, retriever, examples[2 + n_max:])
                result = run_setting(method_id, threads, processes, n, args.latency, base, retriever, examples[2:],
                                     short)
                results.append(result)
                print(f"  {method_id} {threads}x{processes or 'auto'} ({result['threads']}x{result['processes']}): "
                      f"{result['examples_per_s']:.1f} q/s, ratio "
                      f"{result['ratio']:.2f}, {result['cpu_ms_per_call']:.2f} ms CPU per call "
                      f"({result.get('cpu_ms_per_call_marginal', float('nan')):.2f} without the run's set-up of "
                      f"{result.get('setup_cpu_ms', float('nan')):.1f} ms)", file=sys.stderr)

    def verdict(r) -> str:
        target = TARGETS.get(r["in_flight"])
        ok = r["cpu_ms_per_call"] <= CPU_TARGET_MS and (target is None or r["ratio"] >= target)
        return ("yes" if ok else "NO") + (f" (>= {target})" if target else "")

    rows = [[r["method"], r["in_flight"], r["threads"], r["processes"], r["examples"], f"{r['lm_calls_per_example']:g}",
             r["failures"], f"{r['seconds']:.2f}", f"{r['examples_per_s']:.1f}", f"{r['ideal_per_s']:.1f}",
             f"{r['ratio']:.3f}", f"{r['cpu_ms_per_call']:.2f}", _figure(r, "cpu_ms_per_call_marginal", ".2f"),
             _figure(r, "setup_cpu_ms", ".1f"), f"{r['load_average']:.1f}", verdict(r)]
            for r in results]
    print(f"\nEvaluation throughput: stub LM at {1000 * args.latency:.0f} ms per call (own process), real dspy.LM "
          f"over loopback, {retriever_spec}, ragzoo.runs.evaluate with a run directory; {os.cpu_count()} CPUs\n")
    print(markdown_table(["method", "in flight", "threads", "processes", "questions", "LM calls/q", "failures",
                          "seconds", "q/s", "ideal q/s", "ratio", "CPU ms/call", "without set-up",
                          "set-up ms a run", "load avg",
                          f"target (CPU <= {CPU_TARGET_MS:g} ms)"], rows))
    idle.append(idle_penalty(args.latency))
    print(f"\nIdling's cost on this machine (`idle_penalty`, a fixed pure-Python workload, before and after the "
          f"settings): " + "; ".join(f"{i['back_to_back_ms']:.2f} ms back to back, {i['after_idle_ms']:.2f} ms after "
                                     f"{1000 * args.latency:.0f} ms idle ({i['factor']:.2f}x)" for i in idle))
    write_json(args.out, {"latency": args.latency, "retriever": retriever_spec, "targets": TARGETS,
                          "cpu_target_ms": CPU_TARGET_MS, "idle_penalty": idle, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
