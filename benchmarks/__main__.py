"""Run every benchmark in sequence, print each table, and keep the results in `benchmarks/results/`
(`<name>.json` where the benchmark writes JSON, `<name>.txt` = its printed output; `summary.json` = which
ran, how long, and any failure).

    python -m benchmarks [--quick] [--only startup,calls,...] [--results DIR]

Default: startup, calls (n=50), retrieval (sparse + server; no --dense/--big), overhead, throughput,
memory, slips (every method, 50 questions, 10% / 30% format slips over HTTP, before and after), rate_limits
(16 threads against a server of capacity 4: time against the capacity-bound time, questions lost).
--quick: fewer questions and repetitions everywhere (a smoke run of a few minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

ORDER = ("startup", "calls", "retrieval", "overhead", "throughput", "memory", "slips", "serving", "rate_limits")
OPT_IN = ("scale", "embedding")  # heavy (1M+ passages, minutes): only with --only scale


def arguments(name: str, quick: bool, results: Path) -> list[str]:
    out = ["--out", str(results / f"{name}.json")]
    return {
        "startup": ["--repeat", "3" if quick else "10"],
        "calls": ["--n", "10" if quick else "50", *out],
        "retrieval": ["--questions", "300"] if quick else [],
        "overhead": (["--n", "8", "--reps", "3"] if quick else []) + out,
        "throughput": (["--settings", "1x1,32x1", "--rounds", "3", "--methods", "rag"] if quick else []) + out,
        "memory": (["--n", "50", "--methods", "rag"] if quick else []) + out,
        "slips": (["--n", "10", "--shape-n", "0", "--methods", "rag,blendfilter,filco"] if quick else []) + out,
        "serving": (["--requests", "800", "--questions", "64"] if quick else []) + out,
        "rate_limits": (["--questions", "48", "--repeat", "1"] if quick else []) + out,
        "scale": (["--docs", "100000"] if quick else []) + out,
        "embedding": (["--passages", "300", "--questions", "100", "--repeat", "1"] if quick else []) + out,
    }[name]


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs everywhere")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(ORDER)}")
    parser.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    wanted = [name for name in ORDER + OPT_IN
              if (not args.only and name in ORDER) or name in args.only.split(",")]
    summary = {"quick": args.quick, "python": sys.version.split()[0], "benchmarks": {}}
    failed = 0
    for name in wanted:
        print(f"\n# benchmarks.{name}", flush=True)
        captured = io.StringIO()
        started = time.perf_counter()
        status = "ok"
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            with contextlib.redirect_stdout(_Tee(sys.stdout, captured)):
                code = module.main(arguments(name, args.quick, results))
            status = "ok" if not code else f"exit {code}"
        except SystemExit as exit_:  # a benchmark's argparse refusing its arguments ends only that benchmark
            status = f"exit {exit_.code}"
        except Exception as error:  # one broken benchmark must not hide the others' numbers
            status = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        failed += status != "ok"
        (results / f"{name}.txt").write_text(captured.getvalue())
        summary["benchmarks"][name] = {"status": status, "seconds": round(time.perf_counter() - started, 1)}
        print(f"[{name}: {status}, {summary['benchmarks'][name]['seconds']} s]", flush=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nresults in {results}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
