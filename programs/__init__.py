"""Method registry: method id -> program class, paper, knobs with defaults, LM calls per question.

Every module in this package is imported on first use of the registry, and each program class registers
itself with `@register(...)`, so adding a method is adding one file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from dataclasses import dataclass, field
from typing import Any

from ragzoo.errors import ConfigError

_REGISTRY: dict[str, "MethodInfo"] = {}
_LOADED = False


@dataclass(frozen=True)
class MethodInfo:
    method_id: str
    cls: type
    paper: str
    calls: str
    summary: str = ""
    uses_retrieval: bool = True
    fixed_knobs: dict[str, Any] = field(default_factory=dict)

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

    def knob_types(self) -> dict[str, Any]:
        hints = typing.get_type_hints(self.cls.__init__)
        return {name: hints.get(name, type(default)) for name, default in self.knobs.items()}


def register(method_id: str, *, paper: str, calls: str, summary: str = "", uses_retrieval: bool = True,
             **fixed_knobs):
    """Class decorator. `fixed_knobs` lets one class serve several ids (e.g. the Post-Fusion family)."""

    def decorate(cls):
        if method_id in _REGISTRY and _REGISTRY[method_id].cls is not cls:
            raise RuntimeError(f"method id {method_id!r} registered twice")
        _REGISTRY[method_id] = MethodInfo(method_id, cls, paper, calls, summary or (cls.__doc__ or "").strip()
                                          .split("\n")[0], uses_retrieval, dict(fixed_knobs))
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


def coerce_knob(method_id: str, name: str, value: Any) -> Any:
    """Turn a knob value (often a CLI string) into the type the constructor declares."""
    from ragzoo.knobs import coerce

    method = info(method_id)
    types = method.knob_types()
    if name not in types:
        valid = ", ".join(f"{k}={v!r}" for k, v in method.knobs.items()) or "none"
        raise ConfigError(f"method {method_id!r} has no knob {name!r}; its knobs: {valid}")
    return coerce(name, value, types[name], method.knobs[name])


def get(method_id: str, retriever=None, **knobs):
    """Build the program of `method_id` with the paper's defaults, overridden by `knobs`."""
    method = info(method_id)
    resolved = {name: coerce_knob(method_id, name, value) for name, value in knobs.items()}
    resolved.update(method.fixed_knobs)
    if method.uses_retrieval:
        if retriever is None:
            raise ConfigError(f"method {method_id!r} needs a retriever (e.g. --retriever bm25:<corpus.jsonl>)")
        return method.cls(retriever=retriever, **resolved)
    return method.cls(**resolved)


def resolved_knobs(method_id: str, **knobs) -> dict[str, Any]:
    """Every knob of the method with its effective value: defaults overridden by `knobs`."""
    method = info(method_id)
    values = dict(method.knobs)
    values.update({name: coerce_knob(method_id, name, value) for name, value in knobs.items()})
    return values
