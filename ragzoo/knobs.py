"""Knob values: parse `--knob k=v` strings and coerce them to the type a program's constructor declares."""

from __future__ import annotations

import typing
from typing import Any, Literal

from ragzoo.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_knob_args(pairs: list[str] | None) -> dict[str, str]:
    """`["k=5", "filter=off"]` -> `{"k": "5", "filter": "off"}`."""
    knobs: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"knob {pair!r} is not of the form name=value")
        knobs[name.strip()] = value.strip()
    return knobs


def coerce(name: str, value: Any, annotation: Any, default: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or (origin is not None and type(None) in args):
        non_none = [a for a in args if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        if len(non_none) == 1:
            return coerce(name, value, non_none[0], default)
    if origin is Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value):
                return option
        raise ConfigError(f"knob {name}={value!r}: expected one of {', '.join(map(repr, args))}")
    if annotation is bool or (annotation is typing.Any and isinstance(default, bool)):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(f"knob {name}={value!r}: expected a boolean (true/false)")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"knob {name}={value!r}: expected an integer")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"knob {name}={value!r}: expected an integer") from None
        if isinstance(value, float) and number != value:
            raise ConfigError(f"knob {name}={value!r}: expected an integer")
        return number
    if annotation is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"knob {name}={value!r}: expected a number") from None
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"knob {name}={value!r}: expected a string")
        return value
    if origin in (tuple, list):
        items = value.split(",") if isinstance(value, str) else list(value)
        items = [item.strip() if isinstance(item, str) else item for item in items if item != ""]
        inner = args[0] if args else str
        coerced = [coerce(name, item, inner, None) for item in items]
        return tuple(coerced) if origin is tuple else coerced
    return value
