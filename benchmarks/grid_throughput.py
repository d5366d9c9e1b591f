"""Grid throughput against a slow LM: `ragzoo sweep` of CELLS cells x QUESTIONS questions (the direct method on
as many HotPotQA splits: one LM call per question) with `--parallel CELLS`, against the stub LM server
(`python -m ragzoo.stubserver --latency`, default 200 ms, in a process of its own), one `--max-concurrency N` for
the whole grid, the cells' evaluations in P processes each (`--processes P`, threads per process = N / P, so a
cell alone could fill the limit once the others are done).

The stub is sampled every 10 ms (`GET /v1/stats`): requests in flight over time. Printed per setting:
- wall: the whole `ragzoo sweep` command (interpreter start, datasets, forks, the results table);
- LM phase: from the first request at the stub to the last answer; q/s in it; ideal = N / latency;
- in flight: mean over the samples from the first request until the last one is sent (questions left), and
  the maximum the stub saw, which must equal N (never more);
- CPU ms per LM call: the sweep's processes (user + system, `os.times` of the children) / LM calls, start
  included.

    python -m benchmarks.grid_throughput [--latency 0.2] [--cells 4] [--questions 64] [--settings 32x1,32x2,64x1,64x2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.throughput import stub_server

SPLITS = ("dev_first500", "dev_ircot500", "dev_distractor", "dev")


def grid_toml(cells: int, questions: int, base: str) -> str:
    if cells > len(SPLITS):
        raise SystemExit(f"--cells at most {len(SPLITS)} (one per HotPotQA split)")
    text = (f'[grid]\nname = "grid-throughput"\nn = {questions}\n'
            f'lms = [{{ spec = "openai/stub", api_base = "{base}", cache = false }}]\n')
    for split in SPLITS[:cells]:
        text += f'\n[[datasets]]\nname = "hotpotqa"\nsplit = "{split}"\nmetrics = ["em"]\nlabel = "{split}"\n'
    return text + '\n[[methods]]\nid = "direct"\nlabel = "Direct"\n'


class Sampler:
    """`GET /v1/stats` of the stub every `every` seconds on one keep-alive connection: (time, requests, in flight)."""

    def __init__(self, base: str, every: float = 0.01):
        host, _, port = base.split("//", 1)[1].split("/", 1)[0].partition(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=5)
        self.every, self.samples, self.stats = every, [], {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self, path: str = "/v1/stats") -> dict:
        self.connection.request("GET", path)
        return json.loads(self.connection.getresponse().read())

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            stats = self.read()
            self.samples.append((time.perf_counter(), stats["requests"], stats["in_flight"]))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.stats = self.read()


def run_setting(base: str, limit: int, processes: int, cells: int, questions: int, latency: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ragzoo-grid-bench-") as folder:
        grid = Path(folder) / "grid.toml"
        grid.write_text(grid_toml(cells, questions, base), encoding="utf-8")
        argv = [sys.executable, "-m", "ragzoo.cli", "sweep", str(grid), "--out", str(Path(folder) / "out"), "--quiet",
                "--parallel", str(cells), "--processes", str(processes), "--threads", str(max(1, limit // processes)),
                "--max-concurrency", str(limit)]
        env = {**os.environ, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "stub")}
        before = os.times()
        sampler = Sampler(base)
        start_requests = sampler.read("/v1/stats/peak-reset")["requests"]  # this setting's peak, not an earlier one's
        started = time.perf_counter()
        with sampler:
            done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - started
        after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    calls = sampler.stats["requests"] - start_requests
    total = cells * questions
    samples = [(at, requests - start_requests, flight) for at, requests, flight in sampler.samples]
    sending = [sample for sample in samples if sample[1] > 0 or sample[2] > 0]
    first = sending[0][0] if sending else started
    last = next((at for at, requests, flight in samples if requests >= total and flight == 0),
                samples[-1][0] if samples else started)
    sent_all = next((at for at, requests, _ in samples if requests >= total), last)
    phase = [flight for at, _, flight in samples if first <= at <= sent_all]  # while questions were left to send
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    lm_phase = max(last - first, 1e-9)
    return {"limit": limit, "processes": processes, "threads": max(1, limit // processes), "calls": calls,
            "wall": wall, "lm_phase": lm_phase, "qps": total / lm_phase, "ideal": limit / latency,
            "mean_in_flight": sum(phase) / len(phase) if phase else 0.0,
            "max_in_flight": sampler.stats["max_in_flight"], "cpu_ms_per_call": 1000 * cpu / max(1, calls)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--settings", default="32x1,32x2,64x1,64x2", help="LIMITxPROCESSES, comma-separated")
    args = parser.parse_args(argv)
    settings = [tuple(int(part) for part in item.split("x")) for item in args.settings.split(",") if item]
    rows = []
    with stub_server(args.latency) as base:
        for limit, processes in settings:
            rows.append(run_setting(base, limit, processes, args.cells, args.questions, args.latency))
            row = rows[-1]
            print(f"  N={limit} P={processes}: {row['qps']:.1f} q/s in the LM phase, max in flight "
                  f"{row['max_in_flight']}", file=sys.stderr, flush=True)
    print(f"\n{args.cells} cells x {args.questions} questions (direct: 1 LM call each), --parallel {args.cells}, stub "
          f"latency {args.latency * 1000:.0f} ms, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| --max-concurrency | --processes | threads/process | wall s | LM phase s | q/s | ideal q/s | ratio | "
          "mean in flight | max in flight | CPU ms/call |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['limit']} | {row['processes']} | {row['threads']} | {row['wall']:.1f} | {row['lm_phase']:.2f} | "
              f"{row['qps']:.1f} | {row['ideal']:.0f} | {row['qps'] / row['ideal']:.2f} | "
              f"{row['mean_in_flight']:.1f} | {row['max_in_flight']} | {row['cpu_ms_per_call']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
