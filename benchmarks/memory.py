"""Peak memory (RSS) of an evaluate of 200 HotPotQA dev questions with the bm25 retriever and the dry-run LM,
each in a fresh subprocess (the child reports its own peak, VmHWM), beside the baselines of `import dspy`
and of loading ragzoo + the bm25 index, for scale.

    python -m benchmarks.memory [--n 200] [--methods rag,blendfilter]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# Each child prints one JSON line: its own peak RSS (MB) and what it did.
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork+exec, so a child of a big parent (e.g. `python -m
# benchmarks` after the retrieval benchmark) would report the parent's peak. VmHWM belongs to the new image.
_PEAK = ("import json, resource\n"
         "try:\n    peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) / 1024\n"
         "except (OSError, StopIteration):\n    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
         "print(json.dumps({'peak_mb': peak, **extra}))")
CHILDREN = {
    "import dspy": "import dspy\nextra = {}\n" + _PEAK,
    "import ragzoo + load bm25 index": (
        "from ragzoo.retrieval import make_retriever\nfrom ragzoo.retrieval.specs import DEFAULT_RETRIEVER\n"
        "from ragzoo import programs\nimport dspy, ragzoo.lm\nmake_retriever(DEFAULT_RETRIEVER)('warm up', 5)\n"
        "extra = {}\n" + _PEAK),
    "+ dry-run LM (imports LiteLLM for prices)": (
        "from ragzoo.retrieval import make_retriever\nfrom ragzoo.retrieval.specs import DEFAULT_RETRIEVER\n"
        "from ragzoo.lm import make_dry_run_lm\nmake_retriever(DEFAULT_RETRIEVER)('warm up', 5)\nmake_dry_run_lm()\n"
        "extra = {}\n" + _PEAK),
    "evaluate": (
        "import sys, tempfile, time, dspy\nfrom ragzoo import data, programs\nfrom ragzoo.lm import make_dry_run_lm\n"
        "from ragzoo.retrieval import make_retriever\nfrom ragzoo.retrieval.specs import DEFAULT_RETRIEVER\n"
        "from ragzoo.runs import evaluate\n"
        "method, n = sys.argv[1], int(sys.argv[2])\n"
        "examples = data.load('hotpotqa', 'dev', n=n, seed=None)\n"
        "program = programs.get(method, retriever=make_retriever(DEFAULT_RETRIEVER))\n"
        "with tempfile.TemporaryDirectory() as out, dspy.context(lm=make_dry_run_lm()):\n"
        "    started = time.perf_counter()\n"
        "    summary = evaluate(program, examples, 'em', out + '/run', threads=1, progress=False)\n"
        "extra = {'examples': summary['n'], 'failures': summary['failures'], 'seconds': time.perf_counter() - started,\n"
        "         'lm_calls': summary['usage']['lm_calls']}\n" + _PEAK),
}


def child(code: str, *args: str) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory child failed: {done.stderr.strip().splitlines()[-1:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--methods", default="rag,blendfilter")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from benchmarks.common import markdown_table, write_json

    results = [{"what": label, **child(CHILDREN[label])} for label in list(CHILDREN)[:3]]
    for method_id in filter(None, args.methods.split(",")):
        results.append({"what": f"evaluate {method_id}, {args.n} questions", "method": method_id,
                        **child(CHILDREN["evaluate"], method_id, str(args.n))})
    rows = [[r["what"], f"{r['peak_mb']:.0f}", r.get("lm_calls", ""), r.get("failures", ""),
             f"{r['seconds']:.1f}" if "seconds" in r else "", f"{r['wall_s']:.1f}"] for r in results]
    print("\nPeak RSS per fresh process (dry-run LM, bm25 over the 17,703-abstract wiki17 sample, HotPotQA dev)\n")
    print(markdown_table(["process", "peak RSS MB", "LM calls", "failures", "evaluate s", "process wall s"], rows))
    write_json(args.out, {"n": args.n, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
