"""Corpora by name: download through `huggingface_hub`, unpack streaming, publish only a complete file.

    ragzoo corpus fetch wiki17-abstracts     # then: ragzoo index build --corpus wiki17-abstracts

`wiki17-abstracts` is the full 2017 Wikipedia abstracts collection (about 5.2M passages) from where DSPy's
own tutorials get it: the hub repository `dspy/cache` (a model repository), file
`wiki.abstracts.2017.tar.gz`, one member `wiki.abstracts.2017.jsonl`.

- Download: `huggingface_hub.hf_hub_download`, so the hub's cache (`HF_HUB_CACHE`/`HF_HOME`), its resume of an
  interrupted transfer (`.incomplete` blob + HTTP Range), `HF_ENDPOINT` (a mirror, or the loopback fake hub of
  the tests) and offline mode (`HF_HUB_OFFLINE=1`: the cached copy only, no request) all apply.
- Integrity: the archive is hashed while it is unpacked and checked against the sha256 ragzoo pins for the
  corpus (`CorpusSource.sha256`), else against the sha256 the hub publishes as an LFS file's ETag
  (`X-Linked-Etag`; offline: the hub cache's blob name, which is that ETag). A mismatch discards both the
  cached archive and the unpacked file (the next run downloads again); a hub whose sha256 ETag differs from
  the pin is refused before anything is downloaded. With neither a pin nor a sha256 ETag (a mirror serving
  plain ETags) nothing could tell a substituted archive apart, so the fetch is refused unless the user passes
  `--allow-unverified`, and then says "unverified" where it reports the fetch.
- Size: unpacking stops (one-line error, no partial file, no folder left) when the archive expands past
  `MAX_RATIO` times its own size (never below `MIN_UNPACK_LIMIT`) or past the corpus's known bound
  (`max_unpacked_bytes`, plus tar's own headers): a 5 MB gzip of zeros stops at 100 MB. The bytes counted are the whole decompressed tar stream, skipped members included.
- Unpack: streamed (`tarfile` mode "r|gz", never the whole archive in memory) into a hidden
  `.NAME.partial-PID` file beside the target, then fsynced and renamed; a `NAME.ragzoo.json` marker (archive
  sha256, member size) is written last. A corpus is known by name only when file and marker agree, so an
  interrupted unpack (Ctrl-C, SIGTERM, power loss) is never indexed: the next run removes the partial file of a
  dead process and unpacks again. Only the named member is read, under our own file name: member paths in
  the archive are never used as paths.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ragzoo.errors import ConfigError, DataError
from ragzoo.paths import cache_root, writable_cache_root

MARKER_SUFFIX = ".ragzoo.json"
PARTIAL_MARK = ".partial-"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Decompressed bytes allowed for a corpus with no known size: text compresses 3-5x under gzip, so 20x is far
# above any real corpus and far below a bomb (gzip of zeros is ~1000x); the floor keeps tiny archives (tar
# pads to 10 KiB records) from tripping it.
MAX_RATIO = 20
MIN_UNPACK_LIMIT = 64 << 20
TAR_OVERHEAD = 1 << 20  # headers, padding and small side files beside a corpus member of known size


@dataclass(frozen=True)
class CorpusSource:
    name: str
    repo_id: str
    filename: str
    member: str  # the archive member that holds the corpus (matched by base name)
    repo_type: str = "model"
    revision: str = "main"
    description: str = ""
    passages: str = ""
    sha256: str | None = None  # the archive's pinned digest (None: trust the hub's sha256 ETag, if any)
    max_unpacked_bytes: int | None = None  # bound on the member's size (None: the ratio cap applies)


# Pins of the archives ragzoo knows by name. WIKI17_SHA256 is None until someone who can reach the hub records
# the LFS sha256 of dspy/cache's wiki.abstracts.2017.tar.gz (no stored copy of it was found offline); until
# then the hub's sha256 ETag verifies it, and a mirror without one is refused (--allow-unverified overrides).
WIKI17_SHA256: str | None = None
# The unpacked jsonl of ~5.2M abstracts is ~1-2 GB; 4 GiB bounds it without being a guess at its exact size.
WIKI17_MAX_UNPACKED = 4 << 30

CORPORA: dict[str, CorpusSource] = {
    "wiki17-abstracts": CorpusSource(
        name="wiki17-abstracts", repo_id="dspy/cache", filename="wiki.abstracts.2017.tar.gz",
        member="wiki.abstracts.2017.jsonl",
        description="2017 Wikipedia abstracts (the collection ColBERTv2's wiki17_abstracts index serves)",
        passages="about 5.2M", sha256=WIKI17_SHA256, max_unpacked_bytes=WIKI17_MAX_UNPACKED),
}


def corpora_root() -> Path:
    """Unpacked corpora: `$RAGZOO_CORPORA`, else `<RAGZOO_CACHE>/corpora`."""
    env = os.environ.get("RAGZOO_CORPORA")
    return Path(env).expanduser() if env else cache_root() / "corpora"


def source(name: str) -> CorpusSource:
    try:
        return CORPORA[name]
    except KeyError:
        raise ConfigError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}") from None


def corpus_path(name: str, root: Path | None = None) -> Path:
    src = source(name)
    return Path(root or corpora_root()) / src.name / src.member


def _marker(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def is_complete(path: Path) -> bool:
    """True when `path` was fully unpacked by `fetch` (its marker exists and records its size)."""
    try:
        marker = json.loads(_marker(path).read_text(encoding="utf-8"))
        return isinstance(marker, dict) and path.is_file() and marker.get("size") == path.stat().st_size
    except (OSError, ValueError):
        return False


def resolve_named(name: str) -> Path | None:
    """The unpacked file of a known corpus name, None if `name` is not a corpus name. DataError when the name
    is known but the corpus was not (completely) fetched."""
    if name not in CORPORA:
        return None
    path = corpus_path(name)
    if not is_complete(path):
        raise DataError(f"corpus {name!r} is not fetched yet (nothing complete at {path}); "
                        f"run `ragzoo corpus fetch {name}` first")
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def clean_partials(path: Path) -> list[Path]:
    """Remove partial unpacks of `path` whose process is gone."""
    removed = []
    prefix = f".{path.name}{PARTIAL_MARK}"
    if not path.parent.is_dir():
        return removed
    for sibling in path.parent.iterdir():
        if sibling.name.startswith(prefix):
            pid_text = sibling.name[len(prefix):].split("-", 1)[0]
            if pid_text.isdigit() and (int(pid_text) == os.getpid() or not _pid_alive(int(pid_text))):
                sibling.unlink(missing_ok=True)
                removed.append(sibling)
    return removed


class BadArchive(DataError):
    """An archive that must not be kept in the hub cache (damaged, oversized, not the pinned file)."""


class _CountingReader:
    """The decompressed tar stream, counted: past `limit` bytes it raises BadArchive (a decompression bomb)."""

    def __init__(self, handle, limit: int, message: Callable[[int], str]):
        self.handle, self.limit, self.message, self.count = handle, limit, message, 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size if size >= 0 else self.limit + 1 - self.count)
        self.count += len(data)
        if self.count > self.limit:
            raise BadArchive(self.message(self.limit))
        return data


def unpack_limit(archive_size: int, max_unpacked_bytes: int | None) -> int:
    """Decompressed bytes an archive may expand to: the ratio cap, and the corpus's known bound if it has one
    (both: a 5 MB bomb served under a known name must not get to fill the known corpus's gigabytes)."""
    by_ratio = max(archive_size * MAX_RATIO, MIN_UNPACK_LIMIT)
    return by_ratio if max_unpacked_bytes is None else min(by_ratio, max_unpacked_bytes + TAR_OVERHEAD)


class _HashingReader:
    """A read-only file wrapper that hashes every byte read (the tar stream reads the archive once)."""

    def __init__(self, handle):
        self.handle = handle
        self.digest = hashlib.sha256()
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        self.read_bytes += len(data)
        return data

    def finish(self) -> str:
        while block := self.read(1 << 22):
            pass
        return self.digest.hexdigest()


def download(src: CorpusSource, *, offline: bool | None = None, cache_dir: str | None = None,
             progress: bool = True, allow_unverified: bool = False) -> tuple[Path, str | None, str | None]:
    """The archive in the hub cache (downloaded or resumed if needed), the sha256 it must have and what vouches
    for that digest: "pin" (ragzoo's own), "hub" (the hub's sha256 ETag) or None (nothing: only with
    `allow_unverified`, else DataError before any download)."""
    import huggingface_hub
    from huggingface_hub import constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import LocalEntryNotFoundError
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    offline = constants.is_offline_mode() if offline is None else offline
    endpoint = os.environ.get("HF_ENDPOINT") or None
    cache_dir = cache_dir or os.environ.get("HF_HUB_CACHE") or None
    if offline:
        cached = try_to_load_from_cache(src.repo_id, src.filename, cache_dir=cache_dir, revision=src.revision,
                                        repo_type=src.repo_type)
        if not isinstance(cached, str):
            raise DataError(f"offline (HF_HUB_OFFLINE=1) and {src.filename} is not in the hub cache; unset "
                            f"HF_HUB_OFFLINE to download it from {src.repo_id}, or copy the hub cache here")
        blob = Path(cached).resolve().name  # the hub cache names a blob by its ETag: an LFS file's sha256
        expected, by = _expected(src, blob if _SHA256.match(blob) else None, "the hub cache", blob,
                                 allow_unverified)
        return Path(cached), expected, by
    where = endpoint or "the hub"
    if not progress:
        disable_progress_bars()
    try:
        meta = huggingface_hub.get_hf_file_metadata(
            hf_hub_url(src.repo_id, src.filename, repo_type=src.repo_type, revision=src.revision, endpoint=endpoint),
            endpoint=endpoint)
        etag = (meta.etag or "").strip('"').lower()
        hub_sha256 = etag if _SHA256.match(etag) else None
        if src.sha256 and hub_sha256 and hub_sha256 != src.sha256:
            raise DataError(f"{where} serves {src.filename} with sha256 {hub_sha256[:12]}..., not the "
                            f"{src.sha256[:12]}... ragzoo pins for corpus {src.name}; refused before downloading "
                            f"(a changed or substituted archive)")
        expected, by = _expected(src, hub_sha256, where, etag, allow_unverified)
        path = hf_hub_download(src.repo_id, src.filename, repo_type=src.repo_type, revision=src.revision,
                               endpoint=endpoint, cache_dir=cache_dir)
    except LocalEntryNotFoundError as error:
        raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}") from None
    except OSError as error:  # httpx transport errors, HTTP errors (HfHubHTTPError is an OSError), disk full
        raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}; rerun to resume") from None
    except DataError:
        raise
    except Exception as error:  # httpx errors that are not OSErrors
        if type(error).__module__.startswith(("httpx", "huggingface_hub")):
            raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}; rerun to resume") from None
        raise
    finally:
        if not progress:
            enable_progress_bars()
    return Path(path), expected, by


def _expected(src: CorpusSource, hub_sha256: str | None, where: str, etag: str,
              allow_unverified: bool) -> tuple[str | None, str | None]:
    """(the digest the archive must have, who vouches for it); refuses an unverifiable archive unless allowed."""
    if src.sha256:
        return src.sha256, "pin"
    if hub_sha256:
        return hub_sha256, "hub"
    if not allow_unverified:
        shown = (etag[:40] + "...") if len(etag) > 40 else etag
        raise DataError(f"cannot verify {src.filename} for corpus {src.name}: ragzoo pins no sha256 for it and "
                        f"{where} gives no sha256 ETag (ETag {shown or 'none'!r}), so a substituted or damaged "
                        f"archive would go unnoticed; pass --allow-unverified to fetch it anyway")
    return None, None


def unpack(archive: Path, member: str, target: Path, expected_sha256: str | None = None,
           progress: bool = True, max_unpacked_bytes: int | None = None, verified_by: str | None = None) -> dict:
    """Stream `member` (matched by base name) out of the .tar.gz `archive` into `target`, atomically; verify the
    archive's sha256 on the way and stop past `unpack_limit` decompressed bytes. Returns the marker written
    beside `target`. On any failure nothing is left: no partial file, and no folder this call created."""
    from tqdm.auto import tqdm

    created = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_partials(target)
    partial = target.with_name(f".{target.name}{PARTIAL_MARK}{os.getpid()}")
    limit = unpack_limit(archive.stat().st_size, max_unpacked_bytes)
    by_ratio = limit < (max_unpacked_bytes or 0) + TAR_OVERHEAD or max_unpacked_bytes is None
    bound = (f"{MAX_RATIO} times its compressed size" if by_ratio
             else f"the most its corpus can be ({max_unpacked_bytes:,} bytes of {member})")

    def too_big(at: int) -> str:
        return (f"{archive.name} unpacks to more than {at:,} bytes, past {bound}; refused as a decompression bomb "
                f"or the wrong archive, nothing kept; it was removed, rerun to download it again")

    try:
        found = None
        with open(archive, "rb") as raw, tqdm(total=archive.stat().st_size, unit="B", unit_scale=True,
                                               desc=f"unpack {archive.name}", disable=not progress) as bar:
            reader = _HashingReader(raw)
            try:
                # gzip decoded here rather than by tarfile ("r|gz") so every decompressed byte is counted
                with gzip.GzipFile(fileobj=reader, mode="rb") as unzipped, \
                        tarfile.open(fileobj=_CountingReader(unzipped, limit, too_big), mode="r|") as tar:
                    for info in tar:
                        if not info.isfile() or Path(info.name).name != member:
                            continue
                        cap = limit if max_unpacked_bytes is None else min(limit, max_unpacked_bytes)
                        if info.size > cap:  # the header says so: refused before a byte is written
                            raise BadArchive(too_big(cap))
                        source_file = tar.extractfile(info)
                        with open(partial, "wb") as sink:
                            while block := source_file.read(1 << 22):
                                sink.write(block)
                                bar.n = reader.read_bytes
                                bar.refresh()
                            sink.flush()
                            os.fsync(sink.fileno())
                        found = info
                        break
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
                raise BadArchive(f"{archive.name} is damaged or incomplete ({error}); it was removed, rerun "
                                 f"to download it again") from None
            digest = reader.finish()
        if expected_sha256 and digest != expected_sha256:
            vouch = "ragzoo pins" if verified_by == "pin" else "the hub says"
            raise BadArchive(f"{archive.name} failed its integrity check (sha256 {digest[:12]}..., {vouch} "
                             f"{expected_sha256[:12]}...); it was removed, rerun to download it again")
        if found is None:
            raise DataError(f"{archive.name} holds no {member}; is this the right archive?")
        size = partial.stat().st_size
        os.replace(partial, target)
        marker = {"format": "ragzoo-corpus", "member": member, "size": size, "archive": archive.name,
                  "archive_sha256": digest, "verified": bool(expected_sha256),
                  "verified_by": verified_by if expected_sha256 else None}
        tmp = _marker(target).with_name(_marker(target).name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(marker, indent=2), encoding="utf-8")
        os.replace(tmp, _marker(target))
        return marker
    except BaseException:
        partial.unlink(missing_ok=True)
        for folder in created:  # deepest first; only folders this call made, and only if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def verification(path: Path) -> str | None:
    """What vouched for a fetched corpus ("pin", "hub"), or None if it was fetched unverified."""
    try:
        marker = json.loads(_marker(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or not marker.get("verified"):
        return None
    return marker.get("verified_by") or "hub"


def _discard_cached(archive: Path) -> None:
    """Remove a bad archive from the hub cache (the snapshot link and its blob)."""
    try:
        blob = archive.resolve()
        archive.unlink(missing_ok=True)
        if blob != archive:
            blob.unlink(missing_ok=True)
    except OSError:
        pass




def fetch(name: str, *, root: Path | None = None, force: bool = False, progress: bool = True,
          offline: bool | None = None, cache_dir: str | None = None, allow_unverified: bool = False,
          log: Callable[[str], None] = lambda _line: None) -> tuple[Path, bool]:
    """Make the named corpus available on disk. Returns (path, fetched_now)."""
    src = source(name)
    target = corpus_path(name, root)
    if not force and is_complete(target):
        clean_partials(target)
        return target, False
    if root is None and not os.environ.get("RAGZOO_CORPORA"):
        writable_cache_root("corpora")  # unpacked into the cache root: only into ragzoo's, before any download
    archive, expected, verified_by = download(src, offline=offline, cache_dir=cache_dir, progress=progress,
                                              allow_unverified=allow_unverified)
    if expected is None:
        log(f"warning: {src.filename} is unverified (no pinned sha256, no sha256 ETag); fetched because of "
            f"--allow-unverified")
    log(f"unpacking {archive.name} -> {target}")
    try:
        unpack(archive, src.member, target, expected, progress=progress, max_unpacked_bytes=src.max_unpacked_bytes,
               verified_by=verified_by)
    except BadArchive:  # a complete copy already there (--force) stays: unpack replaces it only when done
        _discard_cached(archive)
        raise
    return target, True
