"""Where ragzoo finds data and keeps caches."""

from __future__ import annotations

import os
from pathlib import Path


def data_root() -> Path:
    """The benchmark data folder: `$RAGZOO_DATA`, else `../shared/data` next to the checkout when present,
    else `~/.ragzoo/data`."""
    env = os.environ.get("RAGZOO_DATA")
    if env:
        return Path(env).expanduser()
    checkout_sibling = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    if checkout_sibling.is_dir():
        return checkout_sibling
    return Path.home() / ".ragzoo" / "data"


def cache_root() -> Path:
    """Index and LM caches: `$RAGZOO_CACHE`, else `~/.cache/ragzoo`."""
    env = os.environ.get("RAGZOO_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "ragzoo"
    return root
