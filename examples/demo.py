"""`make demo`: the main job, offline. Build the embedded index, compile a method with the dry-run LM, save
it, load it back, evaluate 20 HotPotQA dev questions, print the report; then price a small grid of three
methods and run it, with its table, and end by writing the grid's HTML report (one page that opens from
disk: table, cost-vs-accuracy plot, per-question drill-down) and printing its path. Every step is a `ragzoo`
command, so the output shows what a user would type.

With a real LM, replace `--lm dry-run` by e.g. `--lm openai/gpt-4o-mini` (key from the environment).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ragzoo.cli import main as ragzoo

OUT = Path(os.environ.get("RAGZOO_DEMO_OUT", "demo_out"))
METHOD = os.environ.get("RAGZOO_DEMO_METHOD", "blendfilter")


def step(title: str, *argv: str) -> None:
    print(f"\n=== {title}\n$ ragzoo {shlex.join(argv)}", flush=True)
    code = ragzoo(list(argv))
    if code:
        sys.exit(f"demo step failed with exit code {code}: ragzoo {shlex.join(argv)}")


def main() -> int:
    from ragzoo.paths import locate_data

    root, why = locate_data()
    print(f"data: {root} ({why})", flush=True)
    corpus = "hotpotqa/corpus_wiki17_abstracts.jsonl"  # relative to the data folder, as a user would type it
    question = "Which magazine was started first, Arthur's Magazine or First for Women?"
    program_dir, run_dir = OUT / METHOD, OUT / f"run-{METHOD}"
    step("1. build the embedded bm25 index over the 2017 Wikipedia abstracts sample",
         "index", "build", "--corpus", corpus)
    step("2. retrieve", "search", question, "-k", "5")
    step("3. what compiling would cost with gpt-4o-mini (no LM called)",
         "compile", "--method", METHOD, "--dataset", "hotpotqa", "--train-n", "10", "--dev-n", "5",
         "--optimizer", "bootstrap", "--lm", "openai/gpt-4o-mini", "--dry-run")
    step("4. compile with the dry-run LM and save the program",
         "compile", "--method", METHOD, "--dataset", "hotpotqa", "--train-n", "10", "--dev-n", "5",
         "--optimizer", "bootstrap", "--lm", "dry-run", "--out", str(program_dir), "--force")
    step("5. load the saved program and answer one question",
         "ask", "--program", str(program_dir), "--lm", "dry-run", question)
    step("6. evaluate the saved program on 20 HotPotQA dev questions",
         "evaluate", "--program", str(program_dir), "--dataset", "hotpotqa", "--split", "dev_first500",
         "-n", "20", "--lm", "dry-run", "--threads", "4", "--out", str(run_dir), "--force")
    step("7. report", "report", str(run_dir))
    grid_file = Path(__file__).resolve().parent / "small-grid.toml"
    grid_dir = OUT / "grid"
    step("8. price a small grid (3 methods x 10 HotPotQA questions) before running it (no LM called)",
         "sweep", str(grid_file), "--dry-run", "--quiet")
    step("9. run the grid with the dry-run LM (rerun the same command to resume; --lm for a real model)",
         "sweep", str(grid_file), "--lm", "dry-run", "--out", str(grid_dir), "--quiet")
    report_html = OUT / "grid-report.html"
    step("10. write the grid's HTML report (one self-contained page; open it in a browser)",
         "report", str(grid_dir), "--html", str(report_html))
    print(f"\nArtifacts: {program_dir}/ (program.json, manifest.json); run: {run_dir}/ (predictions.jsonl, "
          f"summary.json); grid: {grid_dir}/ (results.md, results.csv, results.json, one run per cell). Dry-run "
          f"answers are placeholders: reports show calls, tokens and cost, not accuracy.")
    print(f"HTML report of the grid: {report_html.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
