"""Corpora by name: download through `huggingface_hub`, unpack streaming, publish only a complete file.

    ragzoo corpus fetch wiki17-abstracts     # then: ragzoo index build --corpus wiki17-abstracts

`wiki17-abstracts` is the full 2017 Wikipedia abstracts collection (about 5.2M passages) from where DSPy's
own tutorials get it: the hub repository `dspy/cache` (a model repository), file
`wiki.abstracts.2017.tar.gz`, one member `wiki.abstracts.2017.jsonl`.

- Download: `huggingface_hub.hf_hub_download`, so the hub's cache (`HF_HUB_CACHE`/`HF_HOME`), its resume of an
  interrupted transfer (`.incomplete` blob + HTTP Range), `HF_ENDPOINT` (a mirror, or the loopback fake hub of
  the tests) and offline mode (`HF_HUB_OFFLINE=1`: the cached copy only, no request) all apply.
- Integrity: the hub publishes an LFS file's sha256 as its ETag (`X-Linked-Etag`); the archive is hashed while
  it is unpacked and a mismatch discards both the cached archive and the unpacked file (the next run
  downloads again). An ETag that is not a sha256 (a small non-LFS file) is checked by size only, by the hub
  client.
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
from ragzoo.paths import cache_root

MARKER_SUFFIX = ".ragzoo.json"
PARTIAL_MARK = ".partial-"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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


CORPORA: dict[str, CorpusSource] = {
    "wiki17-abstracts": CorpusSource(
        name="wiki17-abstracts", repo_id="dspy/cache", filename="wiki.abstracts.2017.tar.gz",
        member="wiki.abstracts.2017.jsonl",
        description="2017 Wikipedia abstracts (the collection ColBERTv2's wiki17_abstracts index serves)",
        passages="about 5.2M"),
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
             progress: bool = True) -> tuple[Path, str | None]:
    """The archive in the hub cache (downloaded or resumed if needed) and its expected sha256 (None if the hub
    gave no sha256 ETag, or offline)."""
    import huggingface_hub
    from huggingface_hub import constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import LocalEntryNotFoundError
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    offline = constants.is_offline_mode() if offline is None else offline
    endpoint = os.environ.get("HF_ENDPOINT") or None
    cache_dir = cache_dir or os.environ.get("HF_HUB_CACHE") or None
    expected = None
    if offline:
        cached = try_to_load_from_cache(src.repo_id, src.filename, cache_dir=cache_dir, revision=src.revision,
                                        repo_type=src.repo_type)
        if not isinstance(cached, str):
            raise DataError(f"offline (HF_HUB_OFFLINE=1) and {src.filename} is not in the hub cache; unset "
                            f"HF_HUB_OFFLINE to download it from {src.repo_id}, or copy the hub cache here")
        return Path(cached), None
    if not progress:
        disable_progress_bars()
    try:
        meta = huggingface_hub.get_hf_file_metadata(
            hf_hub_url(src.repo_id, src.filename, repo_type=src.repo_type, revision=src.revision, endpoint=endpoint),
            endpoint=endpoint)
        etag = (meta.etag or "").strip('"').lower()
        expected = etag if _SHA256.match(etag) else None
        path = hf_hub_download(src.repo_id, src.filename, repo_type=src.repo_type, revision=src.revision,
                               endpoint=endpoint, cache_dir=cache_dir)
    except LocalEntryNotFoundError as error:
        raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}") from None
    except OSError as error:  # httpx transport errors, HTTP errors (HfHubHTTPError is an OSError), disk full
        raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}; rerun to resume") from None
    except Exception as error:  # httpx errors that are not OSErrors
        if type(error).__module__.startswith(("httpx", "huggingface_hub")):
            raise DataError(f"cannot download {src.filename} from {src.repo_id}: {error}; rerun to resume") from None
        raise
    finally:
        if not progress:
            enable_progress_bars()
    return Path(path), expected


def unpack(archive: Path, member: str, target: Path, expected_sha256: str | None = None,
           progress: bool = True) -> dict:
    """Stream `member` (matched by base name) out of the .tar.gz `archive` into `target`, atomically; verify the
    archive's sha256 on the way. Returns the marker written beside `target`."""
    from tqdm.auto import tqdm

    target.parent.mkdir(parents=True, exist_ok=True)
    clean_partials(target)
    partial = target.with_name(f".{target.name}{PARTIAL_MARK}{os.getpid()}")
    try:
        found = None
        with open(archive, "rb") as raw, tqdm(total=archive.stat().st_size, unit="B", unit_scale=True,
                                               desc=f"unpack {archive.name}", disable=not progress) as bar:
            reader = _HashingReader(raw)
            try:
                with tarfile.open(fileobj=reader, mode="r|gz") as tar:
                    for info in tar:
                        if not info.isfile() or Path(info.name).name != member:
                            continue
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
                raise DataError(f"{archive.name} is damaged or incomplete ({error}); it was removed, rerun "
                                f"to download it again") from None
            digest = reader.finish()
        if expected_sha256 and digest != expected_sha256:
            raise DataError(f"{archive.name} failed its integrity check (sha256 {digest[:12]}..., the hub says "
                            f"{expected_sha256[:12]}...); it was removed, rerun to download it again")
        if found is None:
            raise DataError(f"{archive.name} holds no {member}; is this the right archive?")
        size = partial.stat().st_size
        os.replace(partial, target)
        marker = {"format": "ragzoo-corpus", "member": member, "size": size, "archive": archive.name,
                  "archive_sha256": digest, "verified": bool(expected_sha256)}
        tmp = _marker(target).with_name(_marker(target).name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(marker, indent=2), encoding="utf-8")
        os.replace(tmp, _marker(target))
        return marker
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


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
          offline: bool | None = None, cache_dir: str | None = None,
          log: Callable[[str], None] = lambda _line: None) -> tuple[Path, bool]:
    """Make the named corpus available on disk. Returns (path, fetched_now)."""
    src = source(name)
    target = corpus_path(name, root)
    if not force and is_complete(target):
        clean_partials(target)
        return target, False
    archive, expected = download(src, offline=offline, cache_dir=cache_dir, progress=progress)
    log(f"unpacking {archive.name} -> {target}")
    try:
        unpack(archive, src.member, target, expected, progress=progress)
    except DataError as error:
        if "removed" in str(error):
            _discard_cached(archive)
            for path in (target, _marker(target)):
                path.unlink(missing_ok=True)
        raise
    return target, True
