"""Where indexes live and how we know they still match their corpus.

An index built from a corpus is cached under `cache_root()/indexes/<backend>-<name>-<key>`, the key being a
hash of the corpus *content*, the backend settings and the library versions. Hashing a 5 GB corpus on every
load would be slow, so a small pointer file remembers the content hash for a (path, size, mtime) triple:
when the corpus changes, its size or mtime changes, the pointer misses, the content is re-hashed and a new
key (so a fresh index) follows. An index loaded from an explicit folder checks its recorded corpus the same
way and refuses to answer if the corpus changed (`RetrieverError`, never a silently wrong answer).
Every index folder carries `meta.json` saying what it is; it is written last, so a folder without it is an
unfinished build and is never used.

Writing goes through `ragzoo.files`, the one atomic-write routine: a build fills a hidden staging folder
beside its target and `publish` swaps it in (`files.replace_dir`: the old index is renamed to a backup and
dropped only once the new one is in place). A build replaces only what ragzoo wrote (`check_replaceable`, the
rule of `ragzoo.ownership`: a missing path, an empty folder, or an index folder ragzoo marked, or an earlier
version's whose `meta.json` says format "ragzoo-index"); anything else is refused before any work, and files a
user added inside an index folder are carried over into the rebuilt one. Staging folders (and swap backups) of
builds whose process is gone are removed by the next build of the same target (`clean_stale_builds`), except a
backup still holding a user's files. Inside the cache root, nothing is written or cleaned unless the root is
ragzoo's cache folder (`paths.writable_cache_root`: marked "cache", made by ragzoo); a user's folder given as
RAGZOO_CACHE is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ragzoo import files
from ragzoo.errors import ConfigError, DataError, RetrieverError
from ragzoo.files import BACKUP_MARK, STAGING_MARK, discard_dir
from ragzoo import ownership
from ragzoo.paths import cache_root, data_root, writable_cache_root

META_FILE = "meta.json"
FORMAT = "ragzoo-index"
FORMAT_VERSION = 1


def resolve_corpus(path: str | os.PathLike) -> Path:
    """A corpus path as given, else relative to `RAGZOO_DATA`, else a corpus name fetched with `ragzoo corpus
    fetch` (e.g. `wiki17-abstracts`); DataError if none exists or it is empty."""
    candidate = Path(path).expanduser()
    if not candidate.exists() and not (data_root() / candidate).exists():
        from ragzoo.retrieval.fetch import resolve_named

        named = resolve_named(str(path))
        if named is not None:
            return named.resolve()
    if not candidate.exists() and not candidate.is_absolute():
        in_data = data_root() / candidate
        if in_data.exists():
            candidate = in_data
    if not candidate.exists():
        from ragzoo.paths import locate_data

        root, why = locate_data()
        raise DataError(f"corpus not found: {path} (looked here and in the data folder {root}: {why}); "
                        f"pass an existing JSONL file or set RAGZOO_DATA")
    if candidate.is_file() and candidate.stat().st_size == 0:
        raise DataError(f"corpus is empty: {candidate}; it needs one JSON passage per line")
    return candidate.resolve()


def _content_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_fingerprint(path: Path) -> dict[str, Any]:
    """{path, size, mtime_ns, sha256} of a corpus file, the hash remembered per (path, size, mtime)."""
    stat = path.stat()
    fingerprint = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    pointer_key = hashlib.sha1(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    pointer = cache_root() / "indexes" / "fingerprints" / f"{pointer_key}.json"
    if pointer.exists():
        try:
            return json.loads(pointer.read_text())
        except (OSError, ValueError):
            pass  # a damaged pointer is just a miss
    fingerprint["sha256"] = _content_sha256(path)
    writable_cache_root("indexes")  # the cache root must be ragzoo's before the pointer is written in it
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(fingerprint))
    os.replace(tmp, pointer)
    return fingerprint


def index_key(backend: str, fingerprint: dict, settings: dict, versions: dict) -> str:
    material = json.dumps({"backend": backend, "sha256": fingerprint["sha256"], "settings": settings,
                           "versions": versions, "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cached_index_dir(backend: str, corpus: Path, fingerprint: dict, settings: dict, versions: dict) -> Path:
    name = corpus.stem.replace(" ", "_")[:40]
    return cache_root() / "indexes" / f"{backend}-{name}-{index_key(backend, fingerprint, settings, versions)}"


def is_index_dir(path: Path) -> bool:
    return path.is_dir() and (path / META_FILE).exists()


def check_asked_settings(folder: Path, asked: dict, built: dict) -> None:
    """A retriever spec over an index folder searches with the settings the folder was built with: one the spec
    names that differs from them is refused in one line, never dropped (a k1 sweep over a folder scored every
    point with the folder's k1)."""
    differing = {name: value for name, value in asked.items() if built.get(name) != value}
    if differing:
        wanted = ", ".join(f"{name}={value}" for name, value in differing.items())
        has = ", ".join(f"{name}={built.get(name)}" for name in differing)
        raise ConfigError(f"the index {folder} was built with {has}; the retriever spec asks {wanted}: search the "
                          f"corpus file with those options (its index is built for them), or drop them from the spec")


def read_meta(folder: Path, backend: str | None = None) -> dict:
    meta_path = Path(folder) / META_FILE
    if not meta_path.exists():
        raise RetrieverError(f"{folder} is not a ragzoo index (no {META_FILE}); build one with "
                             f"`ragzoo index build --corpus FILE --out {folder}`")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise RetrieverError(f"{folder} holds an index of another format/version; rebuild it with "
                             f"`ragzoo index build`")
    if backend and meta.get("backend") != backend:
        raise RetrieverError(f"{folder} is a {meta.get('backend')} index, not a {backend} index")
    return meta


def check_not_stale(meta: dict, folder: Path) -> None:
    """Refuse an index whose recorded corpus file changed since the build."""
    recorded = meta.get("corpus") or {}
    path = Path(recorded.get("path", ""))
    if not recorded or not path.is_file():
        return  # the passages live inside the index; without the corpus there is nothing to compare
    stat = path.stat()
    if stat.st_size == recorded["size"] and stat.st_mtime_ns == recorded["mtime_ns"]:
        return
    if stat.st_size == recorded["size"] and corpus_fingerprint(path)["sha256"] == recorded["sha256"]:
        return
    raise RetrieverError(f"stale index {folder}: its corpus {path} changed since the index was built; "
                         f"rebuild it with `ragzoo index build --corpus {path} --out {folder}`")


def check_replaceable(folder: Path, flag: str = "--out") -> None:
    """Refuse (ConfigError, one line) to build over anything but a path that does not exist yet, an empty
    folder, or an index ragzoo wrote (`ragzoo.ownership.claim`). Nothing else is ever deleted or replaced."""
    ownership.claim(folder, "index", flag=flag)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's live process
        return True
    return True


def _leftovers(final: Path) -> list[tuple[Path, int, str]]:
    """(path, owning pid, kind) of the build folders an earlier build of `final` may have left: staging
    folders (`.NAME.building-PID-...`, and the older `NAME.building-PID-...`) and swap backups
    (`.NAME.old-PID-...`)."""
    found = []
    prefixes = ((f".{final.name}{STAGING_MARK}", "staging"), (f"{final.name}.building-", "legacy staging"),
                (f".{final.name}{BACKUP_MARK}", "backup"))
    try:
        siblings = list(final.parent.iterdir())
    except OSError:
        return found
    for sibling in siblings:
        for prefix, kind in prefixes:
            if sibling.name.startswith(prefix):
                pid_text = sibling.name[len(prefix):].split("-", 1)[0]
                if pid_text.isdigit():
                    found.append((sibling, int(pid_text), kind))
                break
    return found


def _claim_cache_of(final: Path) -> None:
    """When `final` lies inside the cache root, claim the root (ConfigError unless it is ragzoo's cache)."""
    root = cache_root()
    try:
        inside = Path(os.path.abspath(final)).relative_to(os.path.abspath(root))
    except ValueError:
        return  # an index at --out: its own folder is claimed by `check_replaceable`
    if inside.parts:
        writable_cache_root(inside.parts[0])


# what a build writes into its staging folder before the index's own files: its spools (bm25 and packed)
_BUILD_SPOOL = re.compile(r"^spool\.[\w.]+$")


def clean_stale_builds(final: Path) -> list[Path]:
    """Remove what builds of `final` killed before they could clean up (SIGKILL, power loss) left beside it:
    staging folders whose owning process is gone, and a swap backup whose process is gone (put back when
    `final` itself is missing, removed otherwise). Folders of live processes are left alone. Inside a cache
    root that is not ragzoo's, nothing is removed (ConfigError). Returns the folders removed."""
    final = Path(final)
    _claim_cache_of(final)
    removed = []
    for path, pid, kind in _leftovers(final):
        if pid == os.getpid() or _pid_alive(pid) or not path.is_dir() or path.is_symlink():
            continue
        if files.in_use(path):  # its PID is gone here, but its lock is held: a build in another namespace
            continue
        if kind in ("backup", "legacy staging") and [name for name in ownership.foreign_entries(path, "index")
                                                       if not (kind == "legacy staging" and _BUILD_SPOOL.match(name))]:
            # a swap cut before it carried the user's files over, or a folder of the user's that merely has an
            # older build's name (NAME.building-...): never delete what ragzoo did not write
            continue
        if kind == "backup" and not final.exists() and not final.is_symlink():
            os.replace(path, final)  # the swap was cut between its two renames: the old index goes back
            continue
        discard_dir(path)
        removed.append(path)
    return removed


def staging_dir(final: Path) -> Path:
    """A fresh, empty sibling folder of `final` to build into (after removing stale ones of dead builds);
    `publish` swaps it into place."""
    final = Path(final)
    clean_stale_builds(final)
    try:
        return files.staging_dir(final)
    except OSError as error:
        raise ConfigError(f"cannot build the index beside {final}: {error.strerror or error}; choose a folder "
                          f"you can write to") from None


def publish(staging: Path, final: Path, meta: dict) -> None:
    """Write `meta.json` last inside `staging`, then swap `staging` in for `final` (the old index, if any, is
    kept as a backup until the new one is in place: there is never a moment without an index)."""
    check_replaceable(final)  # again: the folder may have changed during a long build
    _claim_cache_of(Path(final))
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **meta}
    try:
        files.atomic_write_json(Path(staging) / META_FILE, meta)
        ownership.replace(staging, final, "index")  # marks it; files the user added to the old index are carried over
    except OSError as error:
        kept = "the previous index is kept" if is_index_dir(Path(final)) else "nothing was replaced"
        raise RetrieverError(f"could not put the new index in place at {final} ({error.strerror or error}); "
                             f"{kept}") from None


def discard(staging: Path) -> None:
    discard_dir(staging)
