"""Where ragzoo finds data and keeps caches."""

from __future__ import annotations

import os
from pathlib import Path

# The small slice of every data file shipped with ragzoo (see demo_data/SOURCES.md), so that a clone or an
# installed package runs the demo and most tests with no data folder at all.
DEMO_DATA = Path(__file__).resolve().parent / "demo_data"
# `../shared/data` beside the checkout (the layout of the machines the project is developed on).
CHECKOUT_SIBLING = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
HOME_DATA = Path("~/.ragzoo/data")


def data_root() -> Path:
    """The benchmark data folder: the first existing one of `$RAGZOO_DATA`, `../shared/data` beside the checkout
    and `~/.ragzoo/data`; else the demo slice shipped with ragzoo (`DEMO_DATA`)."""
    return locate_data()[0]


def locate_data() -> tuple[Path, str]:
    """The data folder and, in a few words, why that one (for `ragzoo datasets` and the test summary). A
    RAGZOO_DATA that names no folder is a mistake (a typo), refused in one line: falling back would run a
    benchmark on whatever folder comes next, the demo slice's 100 questions read as a split's."""
    env = os.environ.get("RAGZOO_DATA")
    if env:
        path = Path(env).expanduser()
        if path.is_dir():
            return path, "RAGZOO_DATA"
        from ragzoo.errors import ConfigError

        raise ConfigError(f"RAGZOO_DATA={env} is not a folder; point it at the benchmark data folder, or unset it "
                          f"to use ../shared/data beside the checkout, {HOME_DATA} or the demo slice")
    if CHECKOUT_SIBLING.is_dir():
        return CHECKOUT_SIBLING, "beside the checkout"
    home = HOME_DATA.expanduser()
    if home.is_dir():
        return home, "the default folder"
    return DEMO_DATA, (f"the demo slice shipped with ragzoo: RAGZOO_DATA is not set, and neither ../shared/data "
                       f"beside the checkout nor {HOME_DATA} exists")


def is_demo_data(root: Path | None = None) -> bool:
    """True when `root` (default: `data_root()`) is the shipped demo slice, not the full benchmark data."""
    return Path(root if root is not None else data_root()).resolve() == DEMO_DATA.resolve()


def cache_root() -> Path:
    """Index and LM caches: `$RAGZOO_CACHE`, else `~/.cache/ragzoo`."""
    env = os.environ.get("RAGZOO_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "ragzoo"
    return root


def writable_cache_root(sub: str) -> Path:
    """`cache_root()/sub`, for ragzoo to write in: the cache root is claimed first as a folder of kind "cache"
    (`ragzoo.ownership`): made and marked when missing or empty, marked when an earlier version made it (only
    ragzoo's cache subfolders in it). A folder holding anything else is refused (ConfigError, one line), so
    nothing inside it is written, replaced or cleaned."""
    from ragzoo import ownership

    root = cache_root()
    where = "RAGZOO_CACHE" if os.environ.get("RAGZOO_CACHE") else "the cache folder"
    # the way out is the variable, not another flag
    found = ownership.claim(root, "cache", flag=where, remedy="set RAGZOO_CACHE to a new or empty folder",
                            read_only_remedy="make it writable, or set RAGZOO_CACHE to a new or empty folder")
    names = {sub}
    if found.state == "legacy":  # what the earlier version made there is ragzoo's
        names |= ownership.ragzoo_files(found.path, "cache") & {entry.name for entry in found.path.iterdir()}
    found.path.mkdir(parents=True, exist_ok=True)
    ownership.mark(found.path, "cache", names)
    return root / sub
