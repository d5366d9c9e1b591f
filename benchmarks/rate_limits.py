"""Rate limits (issue 21): T threads against a server that serves C requests at a time and answers the rest
429 (`Retry-After`), with ragzoo's default endpoint limit (8) above the capacity. Reports the wall time
against the capacity-bound time (questions x calls per question x latency / capacity), the questions lost,
the 429s the server sent and the endpoint limit ragzoo settled on.

Every call goes over HTTP through `dspy.LM` (`ragzoo.lm.make_lm`) to the loopback stub server
(`ragzoo.stubserver`); one `dspy.Predict` call per question, so calls per question is 1.

    python -m benchmarks.rate_limits [--questions 96] [--threads 16] [--capacity 4] [--latency 0.2]
                                     [--retry-after 0.05] [--repeat 3] [--out benchmarks/results/rate_limits.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor


def run_once(questions: int, threads: int, capacity: int, latency: float, retry_after: float,
             max_concurrency: int | None) -> dict:
    import dspy

    from ragzoo.endpoints import endpoint_of, limiter
    from ragzoo.lm import make_lm
    from ragzoo.stubserver import StubLMServer

    with StubLMServer(latency=latency, capacity=capacity, capacity_retry_after=retry_after) as server:
        options = {} if max_concurrency is None else {"max_concurrency": max_concurrency}
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, **options)
        predict = dspy.Predict("question -> answer")

        def ask(i: int) -> bool:
            try:
                with dspy.context(lm=lm):
                    return bool(predict(question=f"question {i}").answer)
            except Exception:  # noqa: BLE001 - a lost question is what we count
                return False

        ask(-1)  # the first call of a process sets up the client: not part of the measure
        server.rejected = 0
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            answered = list(pool.map(ask, range(questions)))
        seconds = time.perf_counter() - started
        gate = limiter(endpoint_of(lm))
        bound = questions * 1 * latency / capacity
        return {"seconds": round(seconds, 3), "capacity_bound_seconds": round(bound, 3),
                "ratio": round(seconds / bound, 3), "lost": answered.count(False), "429s": server.rejected,
                "server_max_in_flight": server.max_in_flight, "limit_settled": gate.allowed()}


def main(argv=None) -> int:
    from benchmarks.common import markdown_table, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=96)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--retry-after", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    conditions = [("default limit (8)", None), (f"limit = capacity ({args.capacity})", args.capacity)]
    results: dict = {"questions": args.questions, "threads": args.threads, "capacity": args.capacity,
                     "latency": args.latency, "retry_after": args.retry_after, "conditions": {}}
    rows = []
    for name, limit in conditions:
        runs = [run_once(args.questions, args.threads, args.capacity, args.latency, args.retry_after, limit)
                for _ in range(args.repeat)]
        ratios = [run["ratio"] for run in runs]
        results["conditions"][name] = {"runs": runs, "median_ratio": statistics.median(ratios)}
        rows.append([name, f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
                     f"{runs[0]['capacity_bound_seconds']:.1f}", sum(run["lost"] for run in runs),
                     round(statistics.mean(run["429s"] for run in runs), 1),
                     max(run["server_max_in_flight"] for run in runs),
                     "/".join(str(run["limit_settled"]) for run in runs)])
    print(f"{args.threads} threads, {args.questions} questions, capacity {args.capacity}, latency {args.latency} s, "
          f"Retry-After {args.retry_after} s, {args.repeat} runs each")
    print(markdown_table(["endpoint limit", "time / capacity-bound (median, range)", "bound s", "lost",
                          "429s/run", "server max in flight", "limit settled"], rows))
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
