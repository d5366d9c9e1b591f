"""Knob values: read `--knob k=v` strings, and check a value against the type a program's constructor declares.

One room for knobs, in three steps that never overlap:

- `parse_knob_args`: `["k=5"]` -> `{"k": "5"}` (CLI and config files).
- `parse`: give a value the FORM its annotation asks for: "5" -> 5, "true" -> True, "a,b" -> ("a", "b"),
  "none" -> None, a JSON list -> a tuple. Only strings (and sequences, for tuple knobs) are converted; a
  value that already has a type is passed through unchanged, so parsing an already-resolved value is a
  no-op. It fails only when a string cannot be read as the type at all ("five" for an int).
- `check`: the single validator. Is the value of the declared type (bool is not an int), one of the
  `Literal` choices, inside the `Range` attached with `typing.Annotated`, and finite if a float? Program
  constructors call it on every knob (see `ragzoo.programs.base.RagProgram`), so a program is validated
  once however it is built.

`coerce` = `check(parse(...))`, for callers that want both without building a program (the registry's
`resolve_knobs`). `describe` writes the same rules as text for `ragzoo methods NAME`.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from ragzoo.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric knob or option, attached with `typing.Annotated[int, Range(1, 100)]` (both inclusive;
    `above=True` makes the lower bound exclusive: a timeout of 0 seconds is no timeout)."""

    min: float | None = None
    max: float | None = None
    above: bool = False

    def text(self, name: str) -> str:
        low = f"{name} > {self.min}" if self.above else f"{name} >= {self.min}"
        if self.min is not None and self.max is not None:
            return f"{self.min} {'<' if self.above else '<='} {name} <= {self.max}"
        if self.min is not None:
            return low
        return f"{name} <= {self.max}" if self.max is not None else ""

    def holds(self, value: float) -> bool:
        low = self.min is None or (value > self.min if self.above else value >= self.min)
        return low and (self.max is None or value <= self.max)


def parse_knob_args(pairs: list[str] | None) -> dict[str, str]:
    """`["k=5", "filter=off"]` -> `{"k": "5", "filter": "off"}`."""
    knobs: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"knob {pair!r} is not of the form name=value")
        if name.strip() in knobs:  # the last one winning would drop the first without a word
            name = name.strip()
            raise ConfigError(f"knob {name!r} is given twice ({name}={knobs[name]} and {name}={value.strip()}); give "
                              f"each knob once (a search lists its values in one: {name}=V1,V2)")
        knobs[name.strip()] = value.strip()
    return knobs


# ------------------------------------------------------------------------------------------ annotations

def _unpack(annotation: Any) -> tuple[Any, list[Range]]:
    """(the bare type, its Range constraints) of a possibly `Annotated` annotation."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        return base, [m for m in meta if isinstance(m, Range)]
    return annotation, []


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _sequence_item(annotation: Any) -> Any | None:
    """The item type of `tuple[X, ...]` / `list[X]`, or None if `annotation` is no such sequence."""
    origin = typing.get_origin(annotation)
    if origin not in (tuple, list):
        return None
    args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
    return args[0] if args else Any


def _error(owner: str | None, name: str, value: Any, expected: str) -> ConfigError:
    prefix = f"{owner} knob" if owner else "knob"
    return ConfigError(f"{prefix} {name}={value!r}: expected {expected}")


# ---------------------------------------------------------------------------------------------- parsing

def parse(name: str, value: Any, annotation: Any, owner: str | None = None) -> Any:
    """`value` in the form `annotation` asks for (see the module docstring); no validation beyond that."""
    base, _ = _unpack(annotation)
    if _is_union(base):
        options = typing.get_args(base)
        if type(None) in options and (value is None or (isinstance(value, str) and value.lower() in ("none", ""))):
            return None
        rest = [a for a in options if a is not type(None)]
        return parse(name, value, rest[0], owner) if len(rest) == 1 else value
    item = _sequence_item(base)
    if item is not None:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            items = [parse(name, v, item, owner) for v in value]
            return tuple(items) if typing.get_origin(base) is tuple else items
        return value
    if typing.get_origin(base) is Literal:
        if isinstance(value, str):  # Literal[1, 2] from "1": the option whose text matches
            return next((option for option in typing.get_args(base) if str(option) == value), value)
        return value
    if base is bool and isinstance(value, str):
        if value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise _error(owner, name, value, "a boolean (true/false)")
    if base is int:
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise _error(owner, name, value, "an integer") from None
        if isinstance(value, float) and value.is_integer():  # 3.0 from a TOML/YAML config
            return int(value)
    if base is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise _error(owner, name, value, "a number") from None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# ------------------------------------------------------------------------------------------- validation

def fits(value: Any, annotation: Any) -> bool:
    """Does `value` have the type `annotation` names (ranges aside)?"""
    base, ranges = _unpack(annotation)
    if base is Any or base is inspect.Parameter.empty:
        return True
    if _is_union(base):
        return any(fits(value, option) for option in typing.get_args(base))
    if base is type(None) or base is None:
        return value is None
    if typing.get_origin(base) is Literal:
        # `True == 1`, so compare types too: Literal[1] must not accept True.
        return any(value == option and type(value) is type(option) for option in typing.get_args(base))
    item = _sequence_item(base)
    if item is not None:
        return isinstance(value, (tuple, list)) and all(fits(v, item) for v in value)
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif isinstance(base, type):
        ok = isinstance(value, base)
    else:  # an annotation we do not model (a Protocol, a callable type, ...): trust the caller
        return True
    return ok and all(r.holds(value) for r in ranges)


def check(name: str, value: Any, annotation: Any, owner: str | None = None) -> Any:
    """`value` if it fits `annotation` (type, Literal choices, Range, finite floats), else a one-line
    ConfigError naming `owner` (the class or method), the knob, the value and what is allowed."""
    if fits(value, annotation):
        return value
    base, _ = _unpack(annotation)
    item = _sequence_item(base)
    if item is not None and isinstance(value, (tuple, list)):
        # Name the offending item: "unknown agent 'critic'" reads better than the whole tuple.
        bad = next(v for v in value if not fits(v, item))
        noun = name[:-1] if name.endswith("s") else f"{name} item"
        prefix = f"{owner} knob" if owner else "knob"
        raise ConfigError(f"{prefix} {name}: unknown {noun} {bad!r}; expected {describe(item, name)}")
    raise _error(owner, name, value, describe(annotation, name))


def coerce(name: str, value: Any, annotation: Any, owner: str | None = None) -> Any:
    """Parse then check one knob value."""
    return check(name, parse(name, value, annotation, owner), annotation, owner)


# ------------------------------------------------------------------------------------------ description

def describe(annotation: Any, name: str = "value") -> str:
    """What `annotation` allows, in words: "an integer with 1 <= k <= 100", "one of 'a', 'b'", ..."""
    base, ranges = _unpack(annotation)
    bounds = " and ".join(filter(None, (r.text(name) for r in ranges)))
    if _is_union(base):
        options = typing.get_args(base)
        words = [describe(option, name) for option in options if option is not type(None)]
        text = " or ".join(words)
        return f"{text} or none" if type(None) in options else text
    if typing.get_origin(base) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(base)))
    item = _sequence_item(base)
    if item is not None:
        return f"a comma-separated list, each {describe(item, name)}"
    words = {bool: "a boolean (true/false)", int: "an integer", float: "a finite number", str: "a string"}
    text = words.get(base, getattr(base, "__name__", str(base)))
    return f"{text} with {bounds}" if bounds else text


def as_json(values: dict[str, Any]) -> dict[str, Any]:
    """Knob values JSON-ready: tuples become lists (every other knob value is JSON-native already)."""

    def one(value: Any) -> Any:
        return [one(v) for v in value] if isinstance(value, (tuple, list)) else value

    return {name: one(value) for name, value in values.items()}
