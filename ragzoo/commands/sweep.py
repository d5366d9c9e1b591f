"""`ragzoo sweep GRID.toml`: run a grid of methods (with knobs) x datasets/splits x optimizers x LMs. Each cell is
an ordinary compile (when the grid compiles) + evaluate run directory under `OUT/cells/`, so `ask` and
`report` work on any cell. `--dry-run` prices every cell and the total (compile and evaluation apart) with no
LM; `--max-cost` is a budget for the whole grid; rerunning the same command resumes (finished cells are not
touched, half-finished ones resume from their predictions); `--parallel N` runs N cells at a time, `--processes P`
each cell's evaluation in P processes, and `--max-concurrency` is one limit for all of them on this machine;
`--storage URL` lets several workers share the grid through an Optuna storage. The grid ends with
`results.md`, `results.csv` and `results.json` in OUT ("ours [95% CI] | paper | delta")."""

from __future__ import annotations

import argparse
import shutil
import sys


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.commands.common import add_budget_args

    parser.add_argument("--lm", action="append", metavar="SPEC",
                        help="LM spec, repeatable (replaces the grid's lms): openai/gpt-4o-mini, dry-run, ...")
    parser.add_argument("--api-base", help="URL of an OpenAI-compatible server for the --lm given")
    parser.add_argument("--no-cache", action="store_true", help="bypass DSPy's LM cache in every cell")
    parser.add_argument("--optimizer", help="comma-separated optimizer presets (replaces the grid's; none = "
                                            "evaluate the uncompiled programs)")
    parser.add_argument("--methods", help="comma-separated method labels or ids: run only these rows")
    parser.add_argument("--datasets", help="comma-separated dataset labels or names: run only these columns")
    parser.add_argument("-n", "--n", type=int, help="questions per cell (default: the grid's n, else the split)")
    parser.add_argument("--out", help="grid directory (default: runs/grids/<grid name>)")
    parser.add_argument("--parallel", type=int, default=1, help="cells run at a time")
    parser.add_argument("--threads", type=int, help="examples in parallel inside a cell (default: the grid's)")
    parser.add_argument("--deadline", type=float, metavar="S",
                        help="seconds per question in each cell's evaluation, past which it is recorded as a timeout "
                             "(default: the grid's deadline, else evaluate's 600)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds per LM request in each cell (default: the grid's timeout, else 120)")
    add_budget_args(parser, scope=" in the whole grid, counted from what its cells on disk used")
    parser.add_argument("--max-concurrency", type=int, help="LM requests in flight per endpoint, one limit shared "
                                                            "by all cells running at once and all their processes "
                                                            "on this machine; with --storage workers on several "
                                                            "machines, each machine has this limit (default: the "
                                                            "grid's, else evaluate's default)")
    parser.add_argument("--processes", type=int, help="worker processes of each cell's evaluation (evaluate "
                                                      "--processes; default: the grid's, else 1): past ~32 requests "
                                                      "in flight one interpreter is the limit")
    parser.add_argument("--retry-failed", action="store_true",
                        help="ask again the questions that failed in cells run before (an LM outage, timeouts): "
                             "each such cell resumes with evaluate --retry-failed")
    parser.add_argument("--dry-run", action="store_true", help="price every cell and the total; run nothing")
    parser.add_argument("--price-as", metavar="MODEL", help="price the dry run as this model (default: each cell's "
                                                            "LM; openai/gpt-4o-mini for dry-run LMs)")
    parser.add_argument("--price-sample", type=int, default=5, help="questions run per cell to price it")
    parser.add_argument("--paper-n", action="store_true", help="price at the paper's n of each column")
    parser.add_argument("--storage", metavar="URL", help="Optuna storage shared by workers (sqlite:///grid.db, "
                                                         "postgresql://..., journal:PATH): each cell claimed once")
    parser.add_argument("--plot", metavar="PNG", help="also draw metric vs LM calls per dataset with CIs")
    parser.add_argument("--quiet", action="store_true", help="no progress view")
    from ragzoo.commands.common import add_tracking_args

    add_tracking_args(parser)


# What an interrupted run keeps (the CLI prints it on Ctrl-C and on SIGTERM).
INTERRUPTED = ("finished cells, and the finished questions of running cells, are kept: rerun the same "
               "command to resume")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grid", help="grid file (TOML), or the name of a bundled grid")
    add_grid_arguments(parser)


def apply_overrides(grid, args: argparse.Namespace):
    from ragzoo.grid.spec import LMEntry

    from ragzoo.config import check_numbers
    from ragzoo.errors import ConfigError

    check_numbers(vars(args))  # every numeric flag finite and in range, as evaluate's and compile's are

    if args.lm:
        grid.lms = [LMEntry(spec, args.api_base, None, not args.no_cache) for spec in args.lm]
    elif args.api_base or args.no_cache:
        grid.lms = [LMEntry(lm.spec, args.api_base or lm.api_base, lm.label, lm.cache and not args.no_cache)
                    for lm in grid.lms]
    if args.optimizer:
        from ragzoo.optimizers import get_preset

        grid.optimizers = [name.strip() for name in args.optimizer.split(",") if name.strip()]
        if not grid.optimizers:  # "--optimizer ,," ran an empty grid and said it succeeded
            raise ConfigError(f"--optimizer {args.optimizer!r} names no optimizer; e.g. --optimizer none,bootstrap")
        for name in grid.optimizers:
            get_preset(name)
    if args.methods:
        wanted = {name.strip() for name in args.methods.split(",") if name.strip()}
        grid.methods = [m for m in grid.methods if m.id in wanted or m.label in wanted]
        if not grid.methods:
            raise ConfigError(f"--methods {args.methods!r} matches no method of the grid")
    if args.datasets:
        wanted = {name.strip() for name in args.datasets.split(",") if name.strip()}
        grid.datasets = [d for d in grid.datasets if d.name in wanted or d.label in wanted]
        if not grid.datasets:
            raise ConfigError(f"--datasets {args.datasets!r} matches no dataset of the grid")
    if args.n is not None:
        grid.n = args.n
    if args.threads is not None:
        grid.threads = args.threads
    if args.deadline is not None:
        grid.deadline = args.deadline
    if args.timeout is not None:
        grid.timeout = args.timeout
    if args.max_concurrency is not None:
        from ragzoo.endpoints import check_max_concurrency

        grid.max_concurrency = check_max_concurrency(args.max_concurrency)
    if args.processes is not None:
        grid.processes = args.processes
    return grid


class ProgressView:
    """The grid's progress: cells done / running / left, questions done / total, calls, spend and an ETA, and
    each running cell's questions, calls and spend. On a terminal one line redrawn in place; elsewhere (a log)
    a plain line when a cell ends and about every 10% of the questions, at most `every` seconds apart."""

    def __init__(self, stream=None, enabled: bool = True, every: float = 30.0):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every
        self._last = (None, 0.0)  # questions done, time at the last plain line
        self._drawn = False

    @staticmethod
    def line(snap: dict, compact: bool = False) -> str:
        total = snap["questions_total"]
        questions = f"{snap['questions']}/{total}" if total is not None else f"{snap['questions']}"
        eta = snap.get("eta")
        when = f"ETA {int(eta) // 3600}:{int(eta) % 3600 // 60:02d}:{int(eta) % 60:02d}" if eta is not None \
            else "ETA ?"
        if compact:  # a terminal line is cut at its width: what matters most first
            text = (f"grid {snap['cells_done']}/{snap['cells']} cells ({len(snap['running'])} running) {questions} q "
                    f"{snap['calls']} calls ${snap['spent']:.4f} {when}")
        else:
            text = (f"grid: {snap['cells_done']}/{snap['cells']} cells done, {len(snap['running'])} running, "
                    f"{snap['left']} left; {questions} questions, {snap['calls']} calls, ${snap['spent']:.4f} spent, "
                    f"{when}")
        for row in snap["running"]:
            of = f"/{row['total']}" if row.get("total") is not None else ""
            text += f" | {row['label']} {row['done']}{of} q, {row['calls']} calls, ${row['cost']:.4f}"
        return text

    def __call__(self, snap: dict) -> None:
        if not self.enabled:
            return
        import time

        if self.tty:
            width = max(40, shutil.get_terminal_size().columns - 1)
            self.stream.write("\r" + self.line(snap, compact=True)[:width].ljust(width))
            self._drawn = True
        else:
            now = time.monotonic()
            done, when = self._last
            step = max(1, (snap["questions_total"] or 0) // 10)
            if snap["event"] == "tick" and done is not None and snap["questions"] - done < step \
                    and now - when < self.every:
                return
            if snap["event"] == "tick" and snap["questions"] == done:
                return
            self._last = (snap["questions"], now)
            self.stream.write(self.line(snap) + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self._drawn = False


def run_grid(grid, args: argparse.Namespace) -> int:
    from pathlib import Path

    from ragzoo.errors import ConfigError
    from ragzoo.grid import table as results
    from ragzoo.grid.price import format_prices, price_grid
    from ragzoo.grid.runner import runnable, sweep

    not_runnable = sorted({f"{cell.method.label} ({cell.method.id})": runnable(cell) for cell in grid.cells()
                           if runnable(cell)}.items())
    for label, reason in not_runnable:
        print(f"{label}: {reason}", file=sys.stderr)
    if args.dry_run:
        if args.price is not None or args.price_per_hour is not None:  # the dry run prices a listed model's tokens
            raise ConfigError("a dry run prices every cell as a model of LiteLLM's price table: name one with "
                              "--price-as MODEL (e.g. openai/gpt-4o-mini); --price/--price-per-hour bound a real run")
        if not grid.lms:
            from ragzoo.grid.spec import LMEntry

            grid.lms = [LMEntry(f"dry-run:{args.price_as or 'openai/gpt-4o-mini'}")]
        try:
            prices = price_grid(grid, sample=args.price_sample, price_as=args.price_as, paper_n=args.paper_n)
        except ConfigError as error:
            if "no price for model" not in str(error) or args.price_as:
                raise
            raise ConfigError(f"{error}; or price the dry run as one with --price-as MODEL") from None
        print(format_prices(prices, args.price_as or "each cell's LM"))
        return 0
    out = Path(args.out or Path("runs") / "grids" / grid.name)
    if args.plot:  # before any cell is paid for: a plot that could not be written is known now
        from ragzoo.commands.report import check_plot_path

        check_plot_path(args.plot)
    from ragzoo import tracking

    track = tracking.from_args(args, "sweep")
    view = ProgressView(enabled=not args.quiet)

    def say(line: str) -> None:
        view.close()
        print(line, file=sys.stderr, flush=True)

    try:
        result = sweep(grid, out, parallel=args.parallel, max_cost=args.max_cost, storage=args.storage,
                       progress=view, max_calls=args.max_calls, price=args.price, price_per_hour=args.price_per_hour,
                       say=say, track=track, retry_failed=args.retry_failed)
    finally:
        view.close()
    if result.interrupted:
        tracking.finish_grid(track, out, result.states, status="KILLED")
        how = "stopped (SIGTERM)" if result.terminated else "interrupted"
        print(f"ragzoo {args.command}: {how}; {kept_line(result)}; resume with: {resume_command(args)}",
              file=sys.stderr)
        return 143 if result.terminated else 130
    built = results.build(grid, out)
    paths = results.write(built, out)
    tracking.finish_grid(track, out, result.states, status="FAILED" if result.failed else "FINISHED")
    print(results.to_markdown(built))
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    if args.plot:
        try:
            results.plot(built, args.plot)
            print(f"plot: {args.plot}")
        except Exception as error:  # noqa: BLE001 - a dry-run grid has nothing to plot; say so, keep the table
            print(f"no plot: {error}", file=sys.stderr)
    for key, reason in sorted(result.failed.items()):
        print(f"cell {key} failed: {reason} (log: {out / 'cells' / key / 'log.txt'})", file=sys.stderr)
    failing = {key: state["failures"] for key, state in result.states.items() if state.get("failures")}
    if failing:  # scored 0 in the table: said, and the exit says it too (as evaluate's does)
        print(f"grid: {sum(failing.values())} question(s) failed in {len(failing)} cell(s) (an LM error or a "
              f"timeout each; they score 0 above): rerun with --retry-failed to ask them again", file=sys.stderr)
    if result.stopped:
        print(f"stopped: {result.stopped}; {_continue_advice(result.stopped)}", file=sys.stderr)
        return 3
    if result.failed:
        return 1
    from ragzoo.commands.evaluate import EXIT_FAILURES

    return EXIT_FAILURES if failing else 0


def _continue_advice(stopped: str) -> str:
    """A grid's budget counts what its cells on disk used: the same command stops again at once (review)."""
    if "--max-calls" in stopped or "--max-cost" in stopped or "budget" in stopped:
        return "raise --max-calls/--max-cost to continue (the budget counts what the grid's cells already used)"
    return "rerun the same command to continue"


def kept_line(result) -> str:
    """What an interrupted grid kept, counted on disk."""
    states = list(result.states.values())
    done = sum(1 for state in states if state.get("status") == "done")
    questions = sum(state.get("done", 0) for state in states)
    totals = [state.get("total") for state in states]
    of = f"/{sum(totals)}" if None not in totals else ""
    return (f"kept {done}/{len(states)} cells done and {questions}{of} questions (the questions in flight were "
            f"dropped; their calls replay from DSPy's cache where it is on)")


def resume_command(args: argparse.Namespace) -> str:
    import shlex

    argv = getattr(args, "argv", None)
    return shlex.join(["ragzoo", *argv]) if argv else "the same command"


def run(args: argparse.Namespace) -> int:
    from ragzoo.grid.spec import load_grid

    grid = apply_overrides(load_grid(args.grid), args)
    return run_grid(grid, args)
