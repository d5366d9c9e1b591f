"""`ragzoo optimizers`: list the optimizer presets, one per row under a header, within 100 columns."""

from __future__ import annotations

import argparse
import textwrap

WIDTH = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json

    from ragzoo.optimizers.presets import PRESETS

    if args.json:
        print(json.dumps({name: {"teleprompter": p.teleprompter or None, "summary": p.summary,
                                 "settings": p.settings, "variants": list(p.variants),
                                 "uses_dev_split": p.uses_valset} for name, p in PRESETS.items()}, indent=2))
        return 0
    header = ("optimizer", "DSPy teleprompter", "what it does")
    rows = []
    for name, preset in PRESETS.items():
        variants = [f"{name}:{v}" for v in preset.variants if f"{name}:{v}" not in preset.summary]
        suffix = f" (variants: {', '.join(variants)})" if variants else ""
        rows.append((name, preset.teleprompter or "-", preset.summary + suffix))
    widths = [max(len(cells[i]) for cells in [header, *rows]) for i in range(2)]
    indent = " " * (sum(widths) + 4)
    for name, teleprompter, text in [header, *rows]:
        first = f"{name:<{widths[0]}}  {teleprompter:<{widths[1]}}  "
        # The summary wraps under its own column so the table stays readable in 100 columns.
        print("\n".join(textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=indent,
                                      break_on_hyphens=False)))
    return 0
