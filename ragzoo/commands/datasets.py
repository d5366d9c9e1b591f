"""`ragzoo datasets`: list every dataset, split and size ragzoo can load, and each dataset's defaults (the
split evaluate and compile use, and the metric, when none is named)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", nargs="?", default=None,
                        help="show only this dataset's splits")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from ragzoo.data import available, dataset_defaults, splits
    from ragzoo.paths import locate_data

    if args.dataset is not None:
        splits(args.dataset)  # a DataError listing the valid datasets for a wrong name
    rows = [row for row in available() if args.dataset in (None, row["dataset"])]
    for row in rows:
        defaults = dataset_defaults(row["dataset"])
        row["default_for"] = [command for command, split in (("evaluate", defaults.eval_split),
                                                             ("compile", defaults.train_split))
                              if split == row["split"]]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    header = ("dataset", "split", "size", "source", "description")
    table = [(row["dataset"], row["split"] + (" *" if row["ordered"] else ""),
              "-" if row["size"] is None else str(row["size"]),
              row["source"] if row["source"] != "hub" else f"hub: {row['hub']}", row["description"])
             for row in rows]
    widths = [max(len(header[i]), *(len(line[i]) for line in table)) for i in range(len(header) - 1)]
    for line in (header, *table):
        cells = [cell.ljust(width) if i != 2 else cell.rjust(width) for i, (cell, width) in
                 enumerate(zip(line, widths))]
        print("  ".join(cells + [line[-1]]).rstrip())
    print("\ndefaults when --split / --metric are not given (evaluate split | compile split | metric):")
    names = list(dict.fromkeys(row["dataset"] for row in rows))
    width = max(len(name) for name in names)
    for name in names:
        defaults = dataset_defaults(name)
        train = defaults.train_split + (f" without {defaults.eval_split}" if defaults.exclude_eval else "")
        if not defaults.disjoint:
            train += " (overlaps the evaluation split)"
        print(f"  {name:<{width}}  {defaults.eval_split} | {train} | {defaults.metric}")
    root, why = locate_data()
    print(f"\ndata root: {root} ({why}; set RAGZOO_DATA to change it)")
    print("* ordered paper split: --n takes its first n questions; other splits draw a seeded random sample")
    print("your own file: --data path.jsonl|.csv [--field-map question=q,answers=gold,id=qid]")
    return 0
