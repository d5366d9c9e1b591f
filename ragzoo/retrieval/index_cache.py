"""Where indexes live and how we know they still match their corpus.

An index built from a corpus is cached under `cache_root()/indexes/<backend>-<name>-<key>`, the key being a
hash of the corpus *content*, the backend settings and the library versions. Hashing a 5 GB corpus on every
load would be slow, so a small pointer file remembers the content hash for a (path, size, mtime) triple:
when the corpus changes, its size or mtime changes, the pointer misses, the content is re-hashed and a new
key (so a fresh index) follows. An index loaded from an explicit folder checks its recorded corpus the same
way and refuses to answer if the corpus changed (`RetrieverError`, never a silently wrong answer).
Every index folder carries `meta.json` saying what it is; it is written last, so a folder without it is an
unfinished build and is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ragzoo.errors import DataError, RetrieverError
from ragzoo.paths import cache_root, data_root

META_FILE = "meta.json"
FORMAT = "ragzoo-index"
FORMAT_VERSION = 1


def resolve_corpus(path: str | os.PathLike) -> Path:
    """A corpus path as given, else relative to `RAGZOO_DATA`; DataError if neither exists or it is empty."""
    candidate = Path(path).expanduser()
    if not candidate.exists() and not candidate.is_absolute():
        in_data = data_root() / candidate
        if in_data.exists():
            candidate = in_data
    if not candidate.exists():
        raise DataError(f"corpus not found: {path} (looked here and under RAGZOO_DATA={data_root()}); "
                        f"pass an existing JSONL file")
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


def staging_dir(final: Path) -> Path:
    """A fresh sibling folder to build into; `publish` moves it into place atomically."""
    staging = final.with_name(f"{final.name}.building-{os.getpid()}-{time.time_ns()}")
    staging.mkdir(parents=True)
    return staging


def publish(staging: Path, final: Path, meta: dict) -> None:
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **meta}
    (staging / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
