"""`ragzoo sweep GRID.toml`: run a grid of methods (with knobs) x datasets/splits x optimizers x LMs. Each cell is
an ordinary compile (when the grid compiles) + evaluate run directory under `OUT/cells/`, so `ask` and
`report` work on any cell. `--dry-run` prices every cell and the total (compile and evaluation apart) with no
LM; `--max-cost` is a budget for the whole grid; rerunning the same command resumes (finished cells are not
touched, half-finished ones resume from their predictions); `--parallel N` runs N cells at a time;
`--storage URL` lets several workers share the grid through an Optuna storage. The grid ends with
`results.md`, `results.csv` and `results.json` in OUT ("ours [95% CI] | paper | delta")."""

from __future__ import annotations

import argparse
import sys


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--max-cost", type=float, help="USD budget for the whole grid (default: no limit)")
    parser.add_argument("--max-concurrency", type=int, help="LM requests in flight per endpoint, one limit shared "
                                                            "by all cells running at once (default: the grid's, "
                                                            "else evaluate's default)")
    parser.add_argument("--dry-run", action="store_true", help="price every cell and the total; run nothing")
    parser.add_argument("--price-as", metavar="MODEL", help="price the dry run as this model (default: each cell's "
                                                            "LM; openai/gpt-4o-mini for dry-run LMs)")
    parser.add_argument("--price-sample", type=int, default=5, help="questions run per cell to price it")
    parser.add_argument("--paper-n", action="store_true", help="price at the paper's n of each column")
    parser.add_argument("--storage", metavar="URL", help="Optuna storage shared by workers (sqlite:///grid.db, "
                                                         "postgresql://..., journal:PATH): each cell claimed once")
    parser.add_argument("--plot", metavar="PNG", help="also draw metric vs LM calls per dataset with CIs")
    parser.add_argument("--quiet", action="store_true", help="no progress view")


# What an interrupted run keeps (the CLI prints it on Ctrl-C).
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
        if args.n < 1:
            raise ConfigError("-n must be at least 1")
        grid.n = args.n
    if args.threads is not None:
        grid.threads = args.threads
    if args.max_concurrency is not None:
        if args.max_concurrency < 1:
            raise ConfigError("--max-concurrency must be at least 1")
        grid.max_concurrency = args.max_concurrency
    return grid


class ProgressView:
    """One line for the whole grid: cells done / running / left, examples, spend."""

    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, states: dict, running: set, total: int, spent: float) -> None:
        if not self.enabled:
            return
        done = sum(1 for s in states.values() if s.get("status") == "done")
        examples = sum(s.get("done", 0) for s in states.values())
        line = (f"grid: {done}/{total} cells done, {len(running)} running, {total - done - len(running)} left; "
                f"{examples} examples; ${spent:.4f} spent")
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.tty:
            self.stream.write("\n")


def run_grid(grid, args: argparse.Namespace) -> int:
    from pathlib import Path

    from ragzoo.grid import table as results
    from ragzoo.grid.price import format_prices, price_grid
    from ragzoo.grid.runner import runnable, sweep

    not_runnable = sorted({f"{cell.method.label} ({cell.method.id})": runnable(cell) for cell in grid.cells()
                           if runnable(cell)}.items())
    for label, reason in not_runnable:
        print(f"{label}: {reason}", file=sys.stderr)
    if args.dry_run:
        if not grid.lms:
            from ragzoo.grid.spec import LMEntry

            grid.lms = [LMEntry(f"dry-run:{args.price_as or 'openai/gpt-4o-mini'}")]
        prices = price_grid(grid, sample=args.price_sample, price_as=args.price_as, paper_n=args.paper_n)
        print(format_prices(prices, args.price_as or "each cell's LM"))
        return 0
    out = Path(args.out or Path("runs") / "grids" / grid.name)
    view = ProgressView(enabled=not args.quiet)
    try:
        result = sweep(grid, out, parallel=args.parallel, max_cost=args.max_cost, storage=args.storage,
                       progress=view)
    finally:
        view.close()
    built = results.build(grid, out)
    paths = results.write(built, out)
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
    if result.stopped:
        print(f"stopped: {result.stopped}; rerun the same command to continue", file=sys.stderr)
        return 3
    return 1 if result.failed else 0


def run(args: argparse.Namespace) -> int:
    from ragzoo.grid.spec import load_grid

    grid = apply_overrides(load_grid(args.grid), args)
    return run_grid(grid, args)
