"""Recognising secrets, so that none is taken from a flag, a config file or an LM option, and none is written.

Keys come from the environment only. This module is the one place that says what looks like a credential:
an option name (`api_key`, `token`, `password`, ...) or a value shaped like a provider key (sk-..., hf_...,
Bearer ...). `strict` adds any unbroken run of 40+ key characters, which is right for LM specs, LM options
and URLs, but too eager for file paths and questions.
"""

from __future__ import annotations

import re
from typing import Any

SECRET_NAME = re.compile(r"(api[_-]?key|(^|[_-])key|secret|password|passwd|credential|token|auth|authorization)$",
                         re.IGNORECASE)
_KEY_SHAPES = (r"sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{12,}|hf_[A-Za-z0-9]{12,}|"
               r"xai-[A-Za-z0-9]{12,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+\S+")
_SECRET_VALUE = re.compile(f"({_KEY_SHAPES})")
_SECRET_VALUE_STRICT = re.compile(f"({_KEY_SHAPES}|[A-Za-z0-9_\\-]{{40,}})")
SECRET_HINT = "keys are read from the environment only (e.g. export OPENAI_API_KEY=...)"
MASK = "***"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name)))


def looks_like_secret(value: Any, *, strict: bool = False) -> bool:
    """True if `value` (a string, or a list/tuple/dict holding strings) contains something shaped like a key."""
    if isinstance(value, str):
        return bool((_SECRET_VALUE_STRICT if strict else _SECRET_VALUE).search(value))
    if isinstance(value, (list, tuple)):
        return any(looks_like_secret(v, strict=strict) for v in value)
    if isinstance(value, dict):
        return any(looks_like_secret(v, strict=strict) for v in value.values())
    return False


def masked(name: str, value: Any) -> Any:
    """`value` with anything secret (by its name or its shape) replaced by `***`, recursively for dicts."""
    if is_secret_name(name):
        return MASK if value else value
    if isinstance(value, dict):
        return {key: masked(str(key), item) for key, item in value.items()}
    if looks_like_secret(value, strict=True):
        return MASK
    return value
