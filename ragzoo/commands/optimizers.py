"""`ragzoo optimizers`: list the optimizer presets."""

from __future__ import annotations

import argparse


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
    width = max(len(name) for name in PRESETS) + 2
    for name, preset in PRESETS.items():
        variants = f" [{', '.join(f'{name}:{v}' for v in preset.variants)}]" if preset.variants else ""
        print(f"{name:<{width}}{preset.teleprompter or '-':<34}{preset.summary}{variants}")
    return 0
