"""`ragzoo methods`: every method id with its paper, knobs (paper defaults) and LM calls per question."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", nargs="?", help="show only this method id")
    parser.add_argument("--json", action="store_true", help="print JSON (a list of objects) instead of a table")


def _knob_text(knobs: dict) -> str:
    return ", ".join(f"{name}={_value_text(value)}" for name, value in knobs.items()) or "-"


def _value_text(value) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def _json_value(value):
    return list(value) if isinstance(value, tuple) else value


def method_rows(method_id: str | None = None) -> list[dict]:
    """One dict per method: id, paper, summary, knobs (defaults), calls, uses_retrieval."""
    from ragzoo import programs

    infos = [programs.info(method_id)] if method_id else list(programs.methods().values())
    return [
        {
            "id": info.method_id,
            "paper": info.paper,
            "summary": info.summary,
            "knobs": {name: _json_value(value) for name, value in info.knobs.items()},
            "calls": info.calls,
            "uses_retrieval": info.uses_retrieval,
        }
        for info in infos
    ]


def _table(rows: list[dict]) -> str:
    header = ("method", "LM calls/question", "knobs (defaults)", "paper")
    lines = [(row["id"], row["calls"], _knob_text(row["knobs"]), row["paper"]) for row in rows]
    widths = [max(len(str(cells[i])) for cells in [header, *lines]) for i in range(len(header) - 1)]

    def fmt(cells) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)) + "  " + str(cells[-1])

    return "\n".join([fmt(header), fmt(tuple("-" * w for w in widths) + ("-" * 5,)), *map(fmt, lines)])


def run(args: argparse.Namespace) -> int:
    import json

    rows = method_rows(args.method)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        print(_table(rows))
    return 0
