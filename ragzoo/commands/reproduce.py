"""`ragzoo reproduce --list` / `ragzoo reproduce NAME --lm SPEC [--n N] --out DIR`: run a bundled grid, one per
main results table of each paper, with the paper's numbers beside ours. Each bundled grid (ragzoo/grid/grids/)
records the paper's table (and page where known), LM, k, shots and split, and where ragzoo's setting differs;
rows whose method ragzoo does not have yet are listed as "not yet runnable" and skipped."""

from __future__ import annotations

import argparse

from ragzoo.commands.sweep import add_grid_arguments, apply_overrides, run_grid


# What an interrupted run keeps (the CLI prints it on Ctrl-C and on SIGTERM).
INTERRUPTED = ("finished cells, and the finished questions of running cells, are kept: rerun the same "
               "command to resume")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="bundled grid (see --list)")
    parser.add_argument("--list", action="store_true", help="list the bundled grids")
    add_grid_arguments(parser)


def list_grids() -> list[dict]:
    from ragzoo.grid.runner import runnable
    from ragzoo.grid.spec import bundled_grids, load_grid

    listing = []
    for name, path in bundled_grids().items():
        grid = load_grid(path)
        if not grid.lms:
            from ragzoo.grid.spec import LMEntry

            grid.lms = [LMEntry("dry-run")]
        blocked = sorted({m.label for m in grid.methods
                          if any(runnable(c) for c in grid.cells() if c.method.label == m.label)})
        listing.append({"name": name, "title": grid.title, "paper": grid.paper, "methods": len(grid.methods),
                        "datasets": [f"{d.label}" for d in grid.datasets], "not_runnable": blocked})
    return listing


def run(args: argparse.Namespace) -> int:
    from ragzoo.errors import ConfigError
    from ragzoo.grid.spec import bundled_grids, load_grid

    if args.list or not args.name:
        for entry in list_grids():
            paper = entry["paper"]
            print(f"{entry['name']:<24} {entry['title']}")
            print(f"{'':<24} {paper.get('citation', '')}, {paper.get('table', '')}; setting: {paper.get('setting', '')}")
            print(f"{'':<24} {entry['methods']} methods x {', '.join(entry['datasets'])}")
            if entry["not_runnable"]:
                print(f"{'':<24} not yet runnable: {', '.join(entry['not_runnable'])}")
        return 0
    grids = bundled_grids()
    if args.name not in grids:
        raise ConfigError(f"no bundled grid {args.name!r}; choose one of {', '.join(grids)} (ragzoo reproduce --list)")
    if not args.lm and not args.dry_run:
        raise ConfigError("pass --lm SPEC (the paper's LM may not be available: the grid says which it used), "
                          "or --dry-run to price it")
    grid = use_paper_corpus(apply_overrides(load_grid(grids[args.name]), args))
    return run_grid(grid, args)


def use_paper_corpus(grid):
    """A grid whose [paper] names its corpus (`corpus = "wiki18-100w"`) retrieves from it where it used the
    shipped sample standing in for it, when that corpus is fetched; otherwise it keeps the sample. Either way
    one line on stderr says which and why, and `grid.paper["corpus_used"]` (written to the grid's grid.json)
    records it; each cell's --retriever names the corpus it searched."""
    import sys

    from ragzoo.grid.spec import search_corpus
    from ragzoo.retrieval import fetch

    name = grid.paper.get("corpus")
    if not name:
        return grid
    src = fetch.source(name)
    path = fetch.fetched(name)
    specs = [spec for spec in [grid.retriever, *(d.retriever for d in grid.datasets)]
             if spec and fetch.over_sample(spec, name)]
    if not specs:
        return grid
    missing = fetch.missing_modules(name) if path else []
    if path and not missing:
        search_corpus(grid, name)
        count = fetch.passages_in(path)  # what was fetched, not what the corpus should hold
        held = f"{count:,} passages" if count is not None else f"the paper's {src.passages} passages"
        vouched = "" if fetch.verification(path) else "; UNVERIFIED (fetched with --allow-unverified)"
        why = (f"the paper's corpus {name} ({held}{vouched}) is fetched at {path}; it replaces the sample "
               f"{src.sample} (bm25 {src.options})")
        # the grid's own words describe the sample it would search: said to be replaced, not left standing
        others = [f"{difference}; in this run the fetched {name} replaces that sample wherever it was searched"
                  if difference.startswith("retriever:") else difference for difference in grid.paper.get(
                      "differences", [])]
        grid.paper = {**grid.paper, "differences": [f"corpus: {why}", *others]}
    elif path:
        why = (f"the paper's corpus {name} is fetched, but searching it at its size needs "
               f"{', '.join(missing)} (pip install 'ragzoo[fast]'), so the sample {src.sample} stands in for it")
        path = None
    else:
        why = (f"the paper's corpus {name} is not fetched, so the sample {src.sample} stands in for it "
               f"(`ragzoo corpus fetch {name}` to retrieve from all {src.passages} passages)")
    grid.paper = {**grid.paper, "corpus_used": {"corpus": name if path else src.sample, "paper_corpus": name,
                                                "fetched": bool(path), "why": why}}
    print(f"{grid.name}: {why}", file=sys.stderr)
    return grid
