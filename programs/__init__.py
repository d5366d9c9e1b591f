"""Method registry: method id -> program class, paper, knobs with defaults, LM calls per question.

Every module in this package is imported on first use of the registry, and each program class registers
itself with `@register(...)`, so adding a method is adding one file.

The API the rest of ragzoo builds on:
- `get(method_id, retriever=None, **knobs)`: build a program (CLI strings are parsed), tagged with its origin;
- `resolve_knobs(method_id, knobs)`: every knob's effective, parsed, validated value (no program built);
- `origin(program)` / `tag(program, method_id, knobs)`: which method and knobs a program was built from;
- `methods()`, `info(method_id)`: the registry itself; `MethodInfo.knob_specs()` describes each knob
  (type, default, allowed values, meaning from the class docstring's "Knobs:" section).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from ragzoo import knobs as knobs_lib
from ragzoo.errors import ConfigError

_REGISTRY: dict[str, "MethodInfo"] = {}
_LOADED = False


@dataclass(frozen=True)
class Knob:
    """One constructor knob as `ragzoo methods NAME` shows it."""

    name: str
    annotation: Any  # with its `Annotated` range, if any
    default: Any
    meaning: str

    @property
    def allowed(self) -> str:
        return knobs_lib.describe(self.annotation, self.name)


@dataclass(frozen=True)
class MethodInfo:
    method_id: str
    cls: type
    paper: str
    calls: str
    summary: str = ""
    uses_retrieval: bool = True
    fixed_knobs: dict[str, Any] = field(default_factory=dict)
    short: str = ""  # the paper's short name for tables; `paper` when not given

    @property
    def paper_short(self) -> str:
        return self.short or self.paper

    @property
    def knobs(self) -> dict[str, Any]:
        """Constructor arguments (besides `retriever`) with their defaults, after fixed_knobs."""
        params = inspect.signature(self.cls.__init__).parameters
        knobs = {
            name: param.default
            for name, param in params.items()
            if name not in ("self", "retriever")
            and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)
        }
        for name in self.fixed_knobs:
            knobs.pop(name, None)
        return knobs

    def knob_hints(self) -> dict[str, Any]:
        """Knob name -> its full annotation (`Annotated` ranges kept)."""
        from ragzoo.programs.base import knob_hints

        hints = knob_hints(self.cls)
        return {name: hints.get(name, type(default)) for name, default in self.knobs.items()}

    def knob_types(self) -> dict[str, Any]:
        """Knob name -> its bare type (`Annotated` ranges stripped)."""
        return {name: _strip(annotation) for name, annotation in self.knob_hints().items()}

    def knob_specs(self) -> list[Knob]:
        meanings = knob_meanings(self.cls)
        return [Knob(name, annotation, self.knobs[name], meanings.get(name, ""))
                for name, annotation in self.knob_hints().items()]


def _strip(annotation: Any) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


_KNOB_LINE = re.compile(r"^(\s+)(\w+): (.*)$")


def knob_meanings(cls: type) -> dict[str, str]:
    """Knob name -> meaning, read from the "Knobs:" section of the class docstring:

        Knobs:
            name: what it does, on one or more
                indented lines.
    """
    lines = (inspect.getdoc(cls) or "").splitlines()
    if "Knobs:" not in (line.strip() for line in lines):
        return {}
    start = [line.strip() for line in lines].index("Knobs:") + 1
    meanings: dict[str, str] = {}
    indent = None
    current = None
    for line in lines[start:]:
        if not line.strip():
            if current is None:
                continue
            break
        match = _KNOB_LINE.match(line)
        if match and (indent is None or len(match.group(1)) == indent):
            indent = len(match.group(1))
            current = match.group(2)
            meanings[current] = match.group(3).strip()
        elif current is not None and len(line) - len(line.lstrip()) > (indent or 0):
            meanings[current] += " " + line.strip()
        else:
            break
    return meanings


def register(method_id: str, *, paper: str, calls: str, summary: str = "", uses_retrieval: bool = True,
             short: str = "", **fixed_knobs):
    """Class decorator. `fixed_knobs` lets one class serve several ids (e.g. the Post-Fusion family);
    `short` is the paper's short name for the `ragzoo methods` table."""

    def decorate(cls):
        if method_id in _REGISTRY and _REGISTRY[method_id].cls is not cls:
            raise RuntimeError(f"method id {method_id!r} registered twice")
        _REGISTRY[method_id] = MethodInfo(method_id, cls, paper, calls, summary or (cls.__doc__ or "").strip()
                                          .split("\n")[0], uses_retrieval, dict(fixed_knobs), short)
        return cls

    return decorate


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    _LOADED = True


def methods() -> dict[str, MethodInfo]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def info(method_id: str) -> MethodInfo:
    registry = methods()
    if method_id not in registry:
        raise ConfigError(f"unknown method {method_id!r}; valid methods: {', '.join(registry)}")
    return registry[method_id]


def _knob_annotation(method: MethodInfo, name: str) -> Any:
    hints = method.knob_hints()
    if name not in hints:
        valid = ", ".join(f"{k}={v!r}" for k, v in method.knobs.items()) or "none"
        raise ConfigError(f"method {method.method_id!r} has no knob {name!r}; its knobs: {valid}")
    return hints[name]


def coerce_knob(method_id: str, name: str, value: Any) -> Any:
    """One knob value (often a CLI string) parsed to its declared type and validated."""
    method = info(method_id)
    return knobs_lib.coerce(name, value, _knob_annotation(method, name), owner=method_id)


def resolve_knobs(method_id: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """Every knob of the method with its effective value: the defaults, overridden by `knobs` (CLI strings
    or typed values), each parsed and validated. Rules that tie several knobs together are the
    constructor's and are checked when the program is built."""
    method = info(method_id)
    values = dict(method.knobs)
    values.update({name: coerce_knob(method_id, name, value) for name, value in knobs.items()})
    return values


def get(method_id: str, retriever=None, **knobs):
    """Build the program of `method_id` with the paper's defaults, overridden by `knobs`, and tag it with
    its origin (see `origin`). Knobs may be CLI strings or already-resolved values (`resolve_knobs`);
    strings are parsed here and every value is validated once, by the constructor."""
    method = info(method_id)
    parsed = {name: knobs_lib.parse(name, value, _knob_annotation(method, name), owner=method_id)
              for name, value in knobs.items()}
    arguments = {**parsed, **method.fixed_knobs}
    if method.uses_retrieval:
        if retriever is None:
            raise ConfigError(f"method {method_id!r} needs a retriever (e.g. --retriever bm25:<corpus.jsonl>)")
        if isinstance(retriever, str):  # a spec, as --retriever takes it (each question had failed "not callable")
            from ragzoo.retrieval import make_retriever

            retriever = make_retriever(retriever)
        elif not callable(retriever):
            raise ConfigError(f"method {method_id!r}: the retriever must be a retriever or a spec string such as "
                              f"'bm25:<corpus.jsonl>', got {type(retriever).__name__}")
        program = method.cls(retriever=retriever, **arguments)
    else:
        program = method.cls(**arguments)
    tag(program, method_id, {**method.knobs, **parsed})
    return program


# ---------------------------------------------------------------------------------------------------------
# Origin: which method and knobs a program was built from, so that saving it knows what it is.

_TAG = "_ragzoo_origin"


def tag(program, method_id: str, knobs: dict[str, Any]) -> None:
    """Remember that `program` is `method_id` built with `knobs` (stored JSON-ready)."""
    # object.__setattr__: a plain attribute of a dspy.Module would be walked as if it were a parameter.
    object.__setattr__(program, _TAG, {"method": method_id, "knobs": knobs_lib.as_json(knobs)})


def origin(program) -> dict[str, Any] | None:
    """`{"method": ..., "knobs": {...}}` of a program built by `get` (or tagged by `tag`), looking through
    an ensemble (`.programs`: its first member's origin) and a KNN-style wrapper (`.program`); else None."""
    found = getattr(program, _TAG, None)
    if found is None and getattr(program, "programs", None):
        found = getattr(program.programs[0], _TAG, None)
    if found is None and hasattr(getattr(program, "program", None), "named_predictors"):
        found = getattr(program.program, _TAG, None)
    return found
