"""Format slips (issue 14): questions lost and LM calls per question for every method when the model slips its
reply format, before (DSPy's own ChatAdapter, with its JSONAdapter fallback) and after (ragzoo's lenient
chat adapter with bounded re-asks).

Every call goes over HTTP through `dspy.LM` to the loopback stub server (`ragzoo.stubserver`), whose seeded
slip mode reproduces the shapes of the issue; the embedded bm25 retriever over the wiki17 sample; the first N
HotPotQA dev questions. A question is lost when its run record has an error. No accuracy is reported (the
stub answers placeholders).

    python -m benchmarks.slips [--n 50] [--rates 0.1,0.3] [--shape-n 10] [--threads 4]
                               [--out benchmarks/results/slips.json]
"""

from __future__ import annotations

import argparse
import time

def run_condition(method: str, questions: list, retriever, server, *, slips, adapter: str | None,
                  threads: int, seed: int = 0) -> dict:
    import dspy

    from ragzoo import programs
    from ragzoo.lm import make_lm
    from ragzoo.runs import evaluate

    server.set_slips(slips, seed=seed) if not isinstance(slips, tuple) else server.set_slips(
        slips[0], seed=seed, shapes=slips[1])
    program = programs.get(method, retriever=retriever) if programs.info(method).uses_retrieval \
        else programs.get(method)
    lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, num_retries=0,
                 max_concurrency=threads)
    plain = dspy.ChatAdapter() if adapter is None else adapter
    started = time.perf_counter()
    with dspy.context(lm=lm):
        summary = evaluate(program, questions, "em", None, threads=threads, adapter=plain, progress=False,
                           abort_failure_rate=None)
    records = summary["records"]
    return {
        "lost": sum(1 for r in records if r["error"]),
        "calls_per_question": summary["usage"]["lm_calls_per_question"],
        "reasks": summary["reasks"], "lenient_reads": summary["lenient_reads"],
        "degradations": summary["degradations"], "seconds": round(time.perf_counter() - started, 2),
        "errors": sorted({(r["error"]["kind"]) for r in records if r["error"]}),
    }


def main(argv=None) -> int:
    from benchmarks.common import markdown_table, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--rates", default="0.1,0.3")
    parser.add_argument("--shape-n", type=int, default=10, help="questions per method in the per-shape table (0: skip)")
    parser.add_argument("--methods", default="all", help="comma-separated method ids (default: every method)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--split", default="dev_distractor")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    from ragzoo import data
    from ragzoo.adapters import make_adapter
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER
    from ragzoo.stubserver import SLIP_SHAPES, StubLMServer

    from ragzoo import programs

    methods = sorted(programs.methods()) if args.methods == "all" else \
        [m.strip() for m in args.methods.split(",") if m.strip()]
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    questions = data.load(args.dataset, args.split, n=args.n, seed=None)
    retriever = make_retriever(DEFAULT_RETRIEVER)
    results: dict = {"n": len(questions), "rates": rates, "methods": {}, "shapes": {}}
    conditions = [("clean", None, "after")] + [(f"{rate:.0%}", rate, side) for rate in rates
                                                for side in ("before", "after")]
    with StubLMServer() as server:
        for method in methods:
            row = results["methods"][method] = {}
            for label, rate, side in conditions:
                adapter = None if side == "before" else make_adapter("chat")
                row[f"{label} {side}"] = run_condition(method, questions, retriever, server, slips=rate,
                                                       adapter=adapter, threads=args.threads, seed=args.seed)
            print(f"{method}: " + "  ".join(f"{key}: lost {value['lost']}, {value['calls_per_question']:.2f} calls/q"
                                            for key, value in row.items()), flush=True)
        if args.shape_n:
            shape_questions = questions[: args.shape_n]
            for shape in SLIP_SHAPES:
                per = results["shapes"][shape] = {"before": {"lost": 0, "calls": 0.0},
                                                  "after": {"lost": 0, "calls": 0.0}}
                for method in methods:
                    for side in ("before", "after"):
                        adapter = None if side == "before" else make_adapter("chat")
                        outcome = run_condition(method, shape_questions, retriever, server,
                                                slips=(max(rates), (shape,)), adapter=adapter,
                                                threads=args.threads, seed=args.seed)
                        per[side]["lost"] += outcome["lost"]
                        per[side]["calls"] += outcome["calls_per_question"] * len(shape_questions)
                print(f"shape {shape}: lost before {per['before']['lost']}, after {per['after']['lost']}", flush=True)

    n = len(questions)
    headers = ["method", "clean calls/q"]
    for rate in rates:
        headers += [f"{rate:.0%} lost before", f"{rate:.0%} lost after", f"{rate:.0%} calls/q after (x clean)"]
    rows = []
    for method, row in results["methods"].items():
        clean = row["clean after"]["calls_per_question"] or 1.0
        cells = [method, row["clean after"]["calls_per_question"]]
        for rate in rates:
            before, after = row[f"{rate:.0%} before"], row[f"{rate:.0%} after"]
            cells += [f"{before['lost']}/{n}", f"{after['lost']}/{n}",
                      f"{after['calls_per_question']:.2f} ({after['calls_per_question'] / clean:.2f}x)"]
        rows.append(cells)
    print(f"\n{n} {args.dataset}/{args.split} questions per method; stub LM over HTTP through dspy.LM; slips seeded "
          f"({args.seed}); before = DSPy ChatAdapter (+ its JSON fallback), after = ragzoo lenient chat adapter, "
          f"2 re-asks\n")
    print(markdown_table(headers, rows))
    if results["shapes"]:
        total = len(methods) * args.shape_n
        print(f"\nper slip shape at {max(rates):.0%} slips, {args.shape_n} questions x {len(methods)} methods "
              f"= {total} questions\n")
        print(markdown_table(["shape", "lost before", "lost after", "calls/q before", "calls/q after"],
                             [[shape, f"{v['before']['lost']}/{total}", f"{v['after']['lost']}/{total}",
                               v["before"]["calls"] / total, v["after"]["calls"] / total]
                              for shape, v in results["shapes"].items()]))
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
