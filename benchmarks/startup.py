"""Start-up wall time: `ragzoo --help` and `python -c "import ragzoo"` (target < 0.5 s for --help).

    python -m benchmarks.startup [--repeat 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall_times(command: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    from benchmarks.common import markdown_table

    entry_point = shutil.which("ragzoo") or ""
    commands = {
        "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
        "python -c 'import ragzoo'": [sys.executable, "-c", "import ragzoo"],
        "ragzoo --help": [entry_point, "--help"] if entry_point else [sys.executable, "-m", "ragzoo.cli", "--help"],
        "python -c 'import dspy' (for scale)": [sys.executable, "-c", "import dspy"],
    }
    rows = []
    for label, command in commands.items():
        times = wall_times(command, args.repeat)
        rows.append([label, statistics.median(times), min(times), max(times)])
    print(markdown_table(["command", "median s", "min s", "max s"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
