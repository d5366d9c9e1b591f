"""`ragzoo methods`: one row per method (id, LM calls per question, paper); `ragzoo methods NAME`: that
method's paper, summary, LM calls, what it does differently from the paper that cites it, and every knob with
its type, default, allowed values and meaning.

Nothing here is a second copy: knob types, defaults and ranges come from the constructor's type hints, and
meanings from the "Knobs:" section of the class docstring (see `ragzoo.programs.MethodInfo.knob_specs`).
"""

from __future__ import annotations

import argparse
import textwrap

WIDTH = 100  # every line of the text output fits a 100-column terminal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", nargs="?", help="show this method's paper, summary, LM calls and knobs")
    parser.add_argument("--json", action="store_true", help="print JSON (a list of objects) instead of text")


def _value_text(value) -> str:
    """A knob value as it is written on the command line (`--knob name=VALUE`)."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "(none)"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


def _json_value(value):
    return list(value) if isinstance(value, tuple) else value


def method_rows(method_id: str | None = None) -> list[dict]:
    """One dict per method: id, paper, summary, knobs (defaults), calls, uses_retrieval, differences."""
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
            "differences": list(_differences(info)),
        }
        for info in infos
    ]


def _differences(info) -> tuple[str, ...]:
    """What the method does differently from the paper that cites it, named on its class (`PAPER_DIFFERENCES`)."""
    return tuple(getattr(info.cls, "PAPER_DIFFERENCES", ()))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _table() -> str:
    from ragzoo import programs

    header = ("method", "LM calls/question", "paper")
    rows = [(info.method_id, info.calls, info.paper_short) for info in programs.methods().values()]
    widths = [max(len(cells[i]) for cells in [header, *rows]) for i in range(2)]
    rest = WIDTH - sum(widths) - 4  # the paper column gets what is left; a long name is clipped, not wrapped

    def fmt(cells) -> str:
        return f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}  {_clip(cells[2], rest)}".rstrip()

    lines = [fmt(header), *map(fmt, rows), "",
             "`ragzoo methods NAME` shows a method's knobs: type, default, allowed values and meaning."]
    return "\n".join(lines)


def _wrap(text: str, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_on_hyphens=False) or [(first or indent).rstrip()]


def _details(method_id: str) -> str:
    from ragzoo import programs

    info = programs.info(method_id)
    cls = info.cls
    lines = _wrap(info.paper, "    ", f"{info.method_id}  ")
    lines += _wrap(info.summary, "  ", "  ")
    lines += _wrap(info.calls, "    ", "  LM calls per question: ")
    lines += _wrap("needed (--retriever SPEC)" if info.uses_retrieval else "not used", "    ", "  retriever: ")
    if info.fixed_knobs:
        fixed = ", ".join(f"{name}={_value_text(value)}" for name, value in info.fixed_knobs.items())
        lines += _wrap(fixed, "    ", "  fixed by this id: ")
    for difference in _differences(info):
        lines += _wrap(difference, "    ", "  differs from the paper: ")
    lines += _wrap(f"{cls.__module__}.{cls.__qualname__} (its module docstring lists the choices made where "
                   f"the paper is open)", "    ", "  source: ")
    specs = info.knob_specs()
    lines.append("")
    if not specs:
        lines.append("knobs: none")
        return "\n".join(lines)
    lines.append("knobs (--knob NAME=VALUE):")
    name_width = max(len(spec.name) for spec in specs)
    indent = " " * (name_width + 4)
    for spec in specs:
        lines += _wrap(f"default {_value_text(spec.default)}; {spec.allowed}", indent,
                       f"  {spec.name:<{name_width}}  ")
        if spec.meaning:
            lines += _wrap(spec.meaning, indent)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import json

    if args.json:
        print(json.dumps(method_rows(args.method), indent=2, ensure_ascii=False))
    elif args.method:
        print(_details(args.method))
    else:
        print(_table())
    return 0
