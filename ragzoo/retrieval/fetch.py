"""Corpora by name: download through `huggingface_hub`, unpack streaming, publish only a complete file.

    ragzoo corpus fetch wiki17-abstracts     # then: ragzoo index build --corpus wiki17-abstracts
    ragzoo corpus fetch --list               # what each name is, its size, the papers that use it

`wiki17-abstracts` is the full 2017 Wikipedia abstracts collection (about 5.2M passages) from where DSPy's
own tutorials get it: the hub repository `dspy/cache` (a model repository), file
`wiki.abstracts.2017.tar.gz`, one member `wiki.abstracts.2017.jsonl`.

`wiki18-100w` is DPR's `psgs_w100` (Karpukhin et al. 2020: the 20 Dec 2018 English Wikipedia in disjoint
100-word passages, 21,015,324 in DPR's tsv), the corpus of Post-Fusion, FILCO and RA-ISF. DPR itself serves the
tsv from dl.fbaipublicfiles.com, not the hub; the hub copy kept by its authors' organisation is the dataset
`facebook/wiki_dpr`, subset `no_embeddings`: 28 parquet files (`data/psgs_w100/no_embeddings/train-000NN-
of-00028.parquet`, columns id, text, title). They are downloaded one by one (each resumable and cached as
above) and converted, streaming, into one corpus JSONL `{"id", "title", "text"}` (the passage id stays DPR's),
published as the tar member is below. 13 of the 28 files have their LFS sha256 pinned here (the ones found in
stored copies of the hub's pages); the others are checked against the hub's sha256 ETag. KILT's Wikipedia
(ActiveRAG) is listed but not fetchable by name (`CorpusSource.why_not`).

- Download: `huggingface_hub.hf_hub_download`, so the hub's cache (`HF_HUB_CACHE`/`HF_HOME`), its resume of a
  dropped transfer (HTTP Range, within the run), `HF_ENDPOINT` (a mirror, or the loopback fake hub of the tests)
  and offline mode (`HF_HUB_OFFLINE=1`: the cached copy only, no request) all apply. A stopped run (Ctrl-C,
  SIGTERM) keeps the files it finished; the one in flight starts over, and what a run killed outright left of
  it (`<etag>.<random>.incomplete`, never reused by the client) is removed by the next fetch of that file.
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
  sha256, member size) is written last (and one without a size before the rename: the file is ragzoo's from
  the moment it has its name). A file at the target without ragzoo's marker beside it is the user's
  (RAGZOO_CORPORA may be their folder): never overwritten, the fetch is refused before any download
  (`check_ours`). A corpus is known by name only when file and marker agree, so an
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ragzoo import files
from ragzoo.errors import ConfigError, DataError, error_line
from ragzoo.paths import cache_root, writable_cache_root

MARKER_SUFFIX = ".ragzoo.json"
CORPUS_MARK = '"format": "ragzoo-corpus"'  # what every marker of a corpus ragzoo wrote holds (json.dumps)
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
    # "tar.gz": `member` is unpacked from `filename`; "parquet": every file of `files` is converted, in order,
    # into one corpus JSONL named `member` (pins per file in `sha256s`; a file without one: the hub's ETag)
    format: str = "tar.gz"
    files: tuple[str, ...] = ()
    sha256s: dict = field(default_factory=dict)
    papers: tuple[str, ...] = ()  # the seed papers that retrieve from this corpus
    download_size: str = ""  # as the hub lists it, for `corpus fetch --list`
    unpacked_size: str = ""
    sample: str | None = None  # the shipped sample (under RAGZOO_DATA) presets use when this is not fetched
    why_not: str = ""  # set: known by name for --list, but not fetchable (and why)
    # retriever options a preset adds when it swaps the sample for this corpus, and the modules they need
    options: str = ""
    needs: tuple[str, ...] = ()

    def pin(self, filename: str) -> str | None:
        return self.sha256s.get(filename) if self.files else self.sha256

    @property
    def hub_files(self) -> tuple[str, ...]:
        return self.files or (self.filename,)


# Pins of the archives ragzoo knows by name. WIKI17_SHA256 is None until someone who can reach the hub records
# the LFS sha256 of dspy/cache's wiki.abstracts.2017.tar.gz (no stored copy of it was found offline); until
# then the hub's sha256 ETag verifies it, and a mirror without one is refused (--allow-unverified overrides).
WIKI17_SHA256: str | None = None
# The unpacked jsonl of ~5.2M abstracts is ~1-2 GB; 4 GiB bounds it without being a guess at its exact size.
WIKI17_MAX_UNPACKED = 4 << 30

WIKI18_SHARDS = tuple(f"data/psgs_w100/no_embeddings/train-{i:05d}-of-00028.parquet" for i in range(28))
# LFS sha256 of facebook/wiki_dpr's no_embeddings shards as the hub's file pages list them ("Host data files in
# the repo (#14)", 84a0be1, the files main serves; the same digests at 531e06c2 of refs/pr/15). Shards not here
# were not in any stored copy found offline: the hub's sha256 ETag verifies them.
WIKI18_SHA256 = {WIKI18_SHARDS[i]: digest for i, digest in {
    1: "2f6e83fef7ce201106c193dde1405feb1c98d429de36878264903ed55b17013a",
    2: "c93329455a188c6a9da7ce0e0aa703219267ea361b5fd21e496360ce1a77a532",
    3: "84c7db33390e820373516b2e4f03b9568f2cce313dfc73e6014aeb4969402179",
    6: "a78cd70630a7a3e4c38f70873ad6ea79d7572ca6bf997fdb248c7a6d44d85b8b",
    7: "b40e6665eb38dc26fd31e6722a0b6433141f73d789cfbff8c9e3167baf8cd05b",
    11: "ae09f000731db843352b88d3de1a057c57cbcf5118643d332c36c11d866365b1",
    15: "f97e86b9700b475dd38faa07adf84d39ef101de715377df646edd037ad4d9303",
    16: "83fd6a67d2b964a0e588a7ead16ff72727dbd2c5f758241ef2b60db9a5d6dc2f",
    18: "d20f7bd9373d5bdcb2d655654b526c6ec54dc7cf6c2374ccff275187ffc4c9ca",
    19: "d000fa87615dabc71c16e904f09cfc145ca4ee570f6996005c2fd0c1b627d72a",
    22: "b8aaf70fdaa6c76fa52e95db644152e5ea3659b1e4aa359fcf33385c16ce1aa5",
    24: "9d50878530d4f6fcca88f4c9a3bdf78bf378ba389efae15295222dfd60075035",
    25: "281d362bbf8c330fcb0cb0c5083dca488cf0391b2b8ade2db7401aee65b7c4e0",
}.items()}
# DPR's tsv is ~13 GB of text; the JSONL adds its keys (~30 bytes a passage): 20 GiB bounds it with room.
WIKI18_MAX_UNPACKED = 20 << 30

CORPORA: dict[str, CorpusSource] = {
    "wiki17-abstracts": CorpusSource(
        name="wiki17-abstracts", repo_id="dspy/cache", filename="wiki.abstracts.2017.tar.gz",
        member="wiki.abstracts.2017.jsonl",
        description="2017 Wikipedia abstracts (the collection ColBERTv2's wiki17_abstracts index serves)",
        passages="about 5.2M", sha256=WIKI17_SHA256, max_unpacked_bytes=WIKI17_MAX_UNPACKED,
        papers=("BlendFilter",), download_size="not recorded", unpacked_size="at most 4 GiB",
        sample="hotpotqa/corpus_wiki17_abstracts.jsonl"),
    "wiki18-100w": CorpusSource(
        name="wiki18-100w", repo_id="facebook/wiki_dpr", repo_type="dataset", filename=WIKI18_SHARDS[0],
        member="psgs_w100.jsonl", format="parquet", files=WIKI18_SHARDS, sha256s=WIKI18_SHA256,
        description="DPR's psgs_w100: Wikipedia of 20 Dec 2018 in disjoint 100-word passages (hub: "
                    "facebook/wiki_dpr, no_embeddings)",
        passages="21,015,324", max_unpacked_bytes=WIKI18_MAX_UNPACKED,
        papers=("Post-Fusion (NQ, TriviaQA)", "FILCO", "RA-ISF"),
        download_size="about 7.5 GB (28 parquet files of 250-280 MB)", unpacked_size="about 14 GB",
        sample="wiki18_passages/corpus.jsonl",
        # 21M passages: the compressed postings (bm25_packed) keep the index within a 24 GB machine
        options="format=packed&backend=numba", needs=("numba",)),
    "kilt-wikipedia": CorpusSource(
        name="kilt-wikipedia", repo_id="facebook/kilt_wikipedia", repo_type="dataset", filename="",
        member="kilt_wikipedia.jsonl",
        description="KILT's Wikipedia (1 Aug 2019 snapshot, 5.9M articles), the corpus ActiveRAG's T5-ANCE "
                    "retrieves from",
        passages="5,903,530 articles", papers=("ActiveRAG",), download_size="37 GB (hub listing)",
        unpacked_size="not measured",
        why_not="the hub's facebook/kilt_wikipedia holds whole articles behind a dataset loading script, not "
                "passages, and ActiveRAG does not say how it split them; third-party 100-word splits on the hub "
                "(e.g. dmrau/kilt-100w_passages) are not the paper's and could not be pinned offline"),
}


def hub_shown() -> str:
    """The hub `corpus fetch` asks (HF_ENDPOINT, else the hub client's default) as output may name it: through
    `secrets.strip_endpoint`, so a mirror's userinfo or token is never shown (and is registered for redaction),
    with its scheme or without."""
    from ragzoo.secrets import strip_endpoint

    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    return strip_endpoint(endpoint.rstrip("/"))


def corpora_root() -> Path:
    """Unpacked corpora: `$RAGZOO_CORPORA`, else `<RAGZOO_CACHE>/corpora`."""
    env = os.environ.get("RAGZOO_CORPORA")
    return Path(env).expanduser() if env else cache_root() / "corpora"


def source(name: str) -> CorpusSource:
    try:
        return CORPORA[name]
    except KeyError:
        raise ConfigError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)} (ragzoo corpus fetch --list)") \
            from None


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
    if CORPORA[name].why_not:
        raise DataError(f"corpus {name!r} cannot be fetched by name: {CORPORA[name].why_not}")
    path = corpus_path(name)
    if not is_complete(path):
        raise DataError(f"corpus {name!r} is not fetched yet (nothing complete at {path}); "
                        f"run `ragzoo corpus fetch {name}` first")
    return path


def over_sample(spec: str, name: str) -> str | None:
    """For a retriever spec over the shipped sample that stands in for corpus `name` (e.g.
    `bm25:wiki18_passages/corpus.jsonl?k1=0.9`), the same spec over `name` itself, with the options the corpus
    needs at its size where the spec sets none of its own (`bm25:wiki18-100w?k1=0.9&format=packed&backend=numba`);
    None for any other spec. Only bm25 is swapped: embedding 21M passages for a dense index takes days on CPU."""
    from urllib.parse import parse_qsl

    src = source(name)
    scheme, sep, rest = spec.partition(":")
    target, _, options = rest.partition("?")
    if scheme.strip().lower() != "bm25" or not sep or not src.sample or target.strip() != src.sample:
        return None
    given = dict(parse_qsl(options, keep_blank_values=True))
    added = [f"{key}={value}" for key, value in parse_qsl(src.options) if key not in given]
    merged = "&".join(part for part in [options, *added] if part)
    return f"{scheme}:{name}{'?' + merged if merged else ''}"


def missing_modules(name: str) -> list[str]:
    """The modules searching corpus `name` at its size needs (`CorpusSource.needs`) that are not installed."""
    from importlib.util import find_spec

    return [module for module in source(name).needs if find_spec(module) is None]


def fetched(name: str) -> Path | None:
    """The complete unpacked file of corpus `name`, None when it is not (completely) fetched."""
    path = corpus_path(name)
    return path if not source(name).why_not and is_complete(path) else None


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
            if pid_text.isdigit() and (int(pid_text) == os.getpid() or not _pid_alive(int(pid_text))) \
                    and not files.in_use(sibling):  # locked while written: a fetch in another PID namespace
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
             progress: bool = True, allow_unverified: bool = False,
             filename: str | None = None) -> tuple[Path, str | None, str | None]:
    """The archive (or one of `src.files`: `filename`) in the hub cache, downloaded or resumed if needed, the
    sha256 it must have and what vouches for that digest: "pin" (ragzoo's own), "hub" (the hub's sha256 ETag) or
    None (nothing: only with `allow_unverified`, else DataError before any download)."""
    filename = filename or src.filename
    offline, endpoint, cache_dir = _hub_settings(offline, cache_dir)
    if offline:
        return _cached(src, filename, cache_dir, allow_unverified)
    expected, by = expectation(src, filename, endpoint=endpoint, allow_unverified=allow_unverified)
    return _hub_download(src, filename, endpoint, cache_dir, progress), expected, by


def _hub_settings(offline: bool | None, cache_dir: str | None) -> tuple[bool, str | None, str | None]:
    from huggingface_hub import constants

    offline = constants.is_offline_mode() if offline is None else offline
    return offline, os.environ.get("HF_ENDPOINT") or None, cache_dir or os.environ.get("HF_HUB_CACHE") or None


def _cached(src: CorpusSource, filename: str, cache_dir: str | None,
            allow_unverified: bool) -> tuple[Path, str | None, str | None]:
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(src.repo_id, filename, cache_dir=cache_dir, revision=src.revision,
                                    repo_type=src.repo_type)
    if not isinstance(cached, str):
        raise DataError(f"offline (HF_HUB_OFFLINE=1) and {filename} is not in the hub cache; unset "
                        f"HF_HUB_OFFLINE to download it from {src.repo_id}, or copy the hub cache here")
    blob = Path(cached).resolve().name  # the hub cache names a blob by its ETag: an LFS file's sha256
    expected, by = _expected(src, filename, blob if _SHA256.match(blob) else None, "the hub cache", blob,
                             allow_unverified)
    return Path(cached), expected, by


def _what_next(error: BaseException) -> str:
    """What to do after a failed download: a rerun resumes it, unless the server said the file is not there
    (404, 401/403: another endpoint, revision or token is needed; no rerun changes that)."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status in (401, 403, 404, 410):
        return "check HF_ENDPOINT (and HF_TOKEN for a gated copy): the server does not serve this file"
    return "rerun to resume"


def _hub_errors(src: CorpusSource, filename: str):
    """The hub client's failures as one-line DataErrors (a context manager)."""
    from contextlib import contextmanager

    from huggingface_hub.errors import LocalEntryNotFoundError

    # the hub client's HTTP errors run over several lines (docs links): each said in one, whole
    @contextmanager
    def translated():
        try:
            yield
        except LocalEntryNotFoundError as error:
            raise DataError(f"cannot download {filename} from {src.repo_id}: {error_line(error, None)}") from None
        except OSError as error:  # httpx transport errors, HTTP errors (HfHubHTTPError is an OSError), disk full
            raise DataError(f"cannot download {filename} from {src.repo_id}: {error_line(error, None)}; "
                            f"{_what_next(error)}") from None
        except DataError:
            raise
        except Exception as error:  # httpx errors that are not OSErrors
            if type(error).__module__.startswith(("httpx", "huggingface_hub")):
                raise DataError(f"cannot download {filename} from {src.repo_id}: {error_line(error, None)}; rerun to "
                                f"resume") from None
            raise

    return translated()


def expectation(src: CorpusSource, filename: str, *, endpoint: str | None = None,
                allow_unverified: bool = False) -> tuple[str | None, str | None]:
    """Ask the hub (HEAD) for `filename`'s sha256 ETag: (the digest it must have, "pin" | "hub" | None). Refused
    here, before any byte is downloaded, when the hub's sha256 differs from the pin or nothing can verify it."""
    import huggingface_hub
    from huggingface_hub import hf_hub_url

    from ragzoo.secrets import strip_endpoint

    # a mirror's userinfo/token: not shown, and registered (by strip_endpoint, before any request) so the hub
    # client's own errors, which echo the URL, are redacted too
    where = strip_endpoint(endpoint) if endpoint else "the hub"
    with _hub_errors(src, filename):
        meta = huggingface_hub.get_hf_file_metadata(
            hf_hub_url(src.repo_id, filename, repo_type=src.repo_type, revision=src.revision, endpoint=endpoint),
            endpoint=endpoint)
    etag = (meta.etag or "").strip('"').lower()
    hub_sha256 = etag if _SHA256.match(etag) else None
    pinned = src.pin(filename)
    if pinned and hub_sha256 and hub_sha256 != pinned:
        raise DataError(f"{where} serves {filename} with sha256 {hub_sha256[:12]}..., not the "
                        f"{pinned[:12]}... ragzoo pins for corpus {src.name}; refused before downloading "
                        f"(a changed or substituted archive)")
    return _expected(src, filename, hub_sha256, where, etag, allow_unverified)


def _hub_download(src: CorpusSource, filename: str, endpoint: str | None, cache_dir: str | None,
                  progress: bool) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    if not progress:
        disable_progress_bars()
    try:
        with _hub_errors(src, filename):
            path = Path(hf_hub_download(src.repo_id, filename, repo_type=src.repo_type, revision=src.revision,
                                        endpoint=endpoint, cache_dir=cache_dir))
    finally:
        if not progress:
            enable_progress_bars()
    _drop_orphaned_downloads(path)
    return path


def _drop_orphaned_downloads(pointer: Path) -> list[Path]:
    """Remove what killed downloads of this file left in the hub cache. huggingface_hub (1.x) downloads into
    `blobs/<etag>.<8 hex>.incomplete`, a name of that process's own that it removes when stopped but that no later
    run reuses: a fetch killed outright (SIGKILL, the OOM killer, a power cut) leaves one for good, as large as
    what had come (GBs of an archive). The hub client holds `.locks/<repo>/<etag>.lock` while it downloads; only
    when that lock is free (no download of this file running anywhere) are they removed, under it (the client's
    own lock helper: the same flock, or its fallback where the filesystem has none)."""
    from huggingface_hub.utils import WeakFileLock

    blob = pointer.resolve()
    if blob.parent.name != "blobs" or not blob.is_file():
        return []  # a cache without symlinks (a copy at the pointer): no blob name to go by
    pattern = re.compile(re.escape(blob.name) + r"\.[0-9a-f]{8}\.incomplete$")
    orphans = [path for path in blob.parent.iterdir() if pattern.match(path.name)]
    if not orphans:
        return []
    lock = blob.parent.parent.parent / ".locks" / blob.parent.parent.name / f"{blob.name}.lock"
    try:
        with WeakFileLock(lock, timeout=0.01):
            for path in orphans:
                path.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - filelock's Timeout (downloading now) or a lock we cannot take: kept
        return []
    return orphans


def _expected(src: CorpusSource, filename: str, hub_sha256: str | None, where: str, etag: str,
              allow_unverified: bool) -> tuple[str | None, str | None]:
    """(the digest the archive must have, who vouches for it); refuses an unverifiable archive unless allowed."""
    if src.pin(filename):
        return src.pin(filename), "pin"
    if hub_sha256:
        return hub_sha256, "hub"
    if not allow_unverified:
        shown = (etag[:40] + "...") if len(etag) > 40 else etag
        raise DataError(f"cannot verify {filename} for corpus {src.name}: ragzoo pins no sha256 for it and "
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
                            files.lock_while_open(sink)
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
        return _publish(partial, target, {
            "format": "ragzoo-corpus", "member": member, "archive": archive.name, "archive_sha256": digest,
            "verified": bool(expected_sha256), "verified_by": verified_by if expected_sha256 else None})
    except BaseException:
        partial.unlink(missing_ok=True)
        for folder in created:  # deepest first; only folders this call made, and only if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def passages_in(path: Path) -> int | None:
    """The passages a converted corpus holds, as its marker records them (None: not recorded, e.g. a tar member)."""
    try:
        count = json.loads(_marker(path).read_text(encoding="utf-8")).get("passages")
    except (OSError, ValueError, AttributeError):
        return None
    return count if isinstance(count, int) else None


def verification(path: Path) -> str | None:
    """What vouched for a fetched corpus ("pin", "hub"), or None if it was fetched unverified."""
    try:
        marker = json.loads(_marker(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or not marker.get("verified"):
        return None
    return marker.get("verified_by") or "hub"


def check_ours(target: Path) -> None:
    """Refuse (ConfigError, one line, before any download) to write a corpus over a file ragzoo did not write:
    RAGZOO_CORPORA may be a folder of the user's, and a file at `target` (or at its marker's name) without
    ragzoo's marker beside it is theirs, kept as it is."""
    from ragzoo.errors import ConfigError
    from ragzoo.ownership import check_file

    remedy = "move it away, or set RAGZOO_CORPORA to another folder"
    for folder in (target.parent, *target.parent.parents):
        if folder.is_dir():
            break
        if folder.exists() or folder.is_symlink():  # a file where this fetch needs a folder: found before the
            # download, not by the unpack after it (7.5 GB for wiki18-100w)
            raise ConfigError(f"{folder} is a file, where the corpus needs a folder; {remedy}")
    if not target.parent.is_dir():
        return  # a folder this fetch makes: nothing of anyone's in it yet
    for path in (target, _marker(target)):
        check_file(path, CORPUS_MARK, "corpus", flag="RAGZOO_CORPORA", marked_by=_marker(target), remedy=remedy)


def _write_marker(target: Path, marker: dict) -> None:
    tmp = _marker(target).with_name(_marker(target).name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(marker, indent=2), encoding="utf-8")
    os.replace(tmp, _marker(target))


def _publish(partial: Path, target: Path, marker: dict) -> dict:
    """Rename the finished (fsynced) `partial` onto `target`, then write its marker: the complete marker last, so a
    corpus is known complete only once both are there. A marker without a size goes first: killed between the
    rename and the last write, the file is still known as ragzoo's (`check_ours`) and the next fetch replaces it."""
    check_ours(target)
    marker = {**marker, "size": partial.stat().st_size}
    _write_marker(target, {"format": marker["format"], "member": marker["member"], "publishing": partial.name})
    os.replace(partial, target)
    _write_marker(target, marker)
    return marker


def _discard_cached(archive: Path) -> None:
    """Remove a bad archive from the hub cache (the snapshot link and its blob)."""
    try:
        blob = archive.resolve()
        archive.unlink(missing_ok=True)
        if blob != archive:
            blob.unlink(missing_ok=True)
    except OSError:
        pass


class BadShard(BadArchive):
    """One file of a multi-file corpus that must leave the hub cache (the others stay: rerun fetches only it)."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


PSGS_COLUMNS = ("id", "title", "text")


def _sha256_file(path: Path, bar=None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
            if bar is not None:
                bar.update(len(block))
    return digest.hexdigest()


def _batches(table, name: str, path):
    """(JSONL bytes, passages) of one parquet file's psgs_w100 columns, batch by batch; a file damaged inside its
    data (its footer read fine: pages that do not decode, text that is not UTF-8) is that file's `BadShard`: named,
    removed, fetched again by a rerun (not pyarrow's multi-line error, nor an internal error)."""
    import pyarrow
    import ujson

    batches = table.iter_batches(batch_size=65536, columns=list(PSGS_COLUMNS))
    while True:
        try:
            batch = next(batches)
            lines = "".join([ujson.dumps({"id": str(pid), "title": title or "", "text": text or ""},
                                         ensure_ascii=False, escape_forward_slashes=False) + "\n"
                             for pid, title, text in zip(*(batch.column(c).to_pylist()
                                                           for c in PSGS_COLUMNS))]).encode("utf-8")
        except StopIteration:
            return
        except (OSError, ValueError, TypeError, pyarrow.ArrowException) as error:  # binary text: TypeError
            raise BadShard(f"{name} is not readable parquet ({' '.join(str(error).split())}); it was removed, "
                           f"rerun to download it again", path) from None
        yield lines, batch.num_rows


def convert_parquet(shards: list[tuple[str, Path, str | None, str | None]], target: Path, *, progress: bool = True,
                    max_unpacked_bytes: int | None = None) -> dict:
    """Convert psgs_w100-shaped parquet files (columns id, text, title), in the given order, into one corpus JSONL
    `target` of `{"id", "title", "text"}` lines, atomically. `shards` holds (hub file name, cached path, sha256 it
    must have or None, who vouches for it). Each file is hashed before it is read (parquet is read by random
    access, not as a stream); a mismatch raises BadShard naming it. The JSONL stops past `unpack_limit` bytes.
    On any failure nothing is left: no partial file, and no folder this call created."""
    import ujson
    from tqdm.auto import tqdm

    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with `datasets`, a ragzoo dependency
        raise DataError("converting parquet corpora needs pyarrow (pip install pyarrow)") from None

    created = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_partials(target)
    partial = target.with_name(f".{target.name}{PARTIAL_MARK}{os.getpid()}")
    total = sum(path.stat().st_size for _, path, _, _ in shards)
    limit = unpack_limit(total, max_unpacked_bytes)
    try:
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"verify {len(shards)} files",
                  disable=not progress) as bar:
            for name, path, expected, by in shards:
                digest = _sha256_file(path, bar)
                if expected and digest != expected:
                    vouch = "ragzoo pins" if by == "pin" else "the hub says"
                    raise BadShard(f"{name} failed its integrity check (sha256 {digest[:12]}..., {vouch} "
                                   f"{expected[:12]}...); it was removed, rerun to download it again", path)
        passages, written, rows = 0, 0, 0
        for name, path, _, _ in shards:  # named: which of the 28 files of 250 MB is bad, and only it leaves the cache
            try:
                rows += pq.ParquetFile(path).metadata.num_rows
            except Exception as error:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ...
                raise BadShard(f"{name} is not readable parquet ({' '.join(str(error).split())}); it was removed, "
                               f"rerun to download it again", path) from None
        with open(partial, "wb") as sink, \
                tqdm(total=rows, unit=" passages", unit_scale=True, desc=f"convert -> {target.name}",
                     disable=not progress) as bar:
            files.lock_while_open(sink)
            for name, path, _, _ in shards:
                table = pq.ParquetFile(path)
                missing = [column for column in PSGS_COLUMNS if column not in table.schema_arrow.names]
                if missing:
                    raise BadShard(f"{name} has no column {', '.join(missing)} (columns: "
                                   f"{', '.join(table.schema_arrow.names)}); not a psgs_w100 file, it was removed",
                                   path)
                for lines, count in _batches(table, name, path):
                    written += len(lines)
                    if written > limit:
                        raise BadArchive(f"the parquet files of {target.name} convert to more than {limit:,} "
                                         f"bytes, past the most this corpus can be; refused, nothing kept")
                    sink.write(lines)
                    passages += count
                    bar.update(count)
            sink.flush()
            os.fsync(sink.fileno())
        by_file = {name: by for name, _, expected, by in shards}
        kinds = {by for by in by_file.values()}
        verified = None not in kinds
        return _publish(partial, target, {
            "format": "ragzoo-corpus", "member": target.name, "passages": passages, "verified": verified,
            "verified_by": ("+".join(sorted(kinds)) if verified else None),
            "files": [{"name": name, "sha256": expected, "verified_by": by} for name, _, expected, by in shards]})
    except BaseException:
        partial.unlink(missing_ok=True)
        for folder in created:  # deepest first; only folders this call made, and only if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _fetch_files(src: CorpusSource, target: Path, *, offline: bool | None, cache_dir: str | None, progress: bool,
                 allow_unverified: bool, log: Callable[[str], None]) -> None:
    """A corpus of several hub files: every file is checked with the hub before the first is downloaded (a
    refusal costs no download), then each is downloaded or resumed (finished ones come from the hub cache),
    then all are converted together."""
    offline, endpoint, cache_dir = _hub_settings(offline, cache_dir)
    if offline:
        shards = [(name, *_cached(src, name, cache_dir, allow_unverified)) for name in src.files]
    else:
        expected = {name: expectation(src, name, endpoint=endpoint, allow_unverified=allow_unverified)
                    for name in src.files}
        shards = []
        for number, name in enumerate(src.files, 1):
            log(f"download {number}/{len(src.files)}: {src.repo_id}/{name}")
            shards.append((name, _hub_download(src, name, endpoint, cache_dir, progress), *expected[name]))
    unverified = [name for name, _, digest, _ in shards if digest is None]
    if unverified:
        log(f"warning: {len(unverified)} of {len(shards)} files are unverified (no pinned sha256, no sha256 "
            f"ETag); fetched because of --allow-unverified")
    log(f"converting {len(shards)} parquet files -> {target}")
    try:
        convert_parquet([(name, Path(path), digest, by) for name, path, digest, by in shards], target,
                        progress=progress, max_unpacked_bytes=src.max_unpacked_bytes)
    except BadShard as bad:  # only the bad file leaves the cache; the good ones are not downloaded again
        _discard_cached(bad.path)
        raise


def fetch(name: str, *, root: Path | None = None, force: bool = False, progress: bool = True,
          offline: bool | None = None, cache_dir: str | None = None, allow_unverified: bool = False,
          log: Callable[[str], None] = lambda _line: None) -> tuple[Path, bool]:
    """Make the named corpus available on disk. Returns (path, fetched_now)."""
    src = source(name)
    if src.why_not:
        raise ConfigError(f"corpus {name!r} cannot be fetched by name: {src.why_not}")
    target = corpus_path(name, root)
    if not force and is_complete(target):
        clean_partials(target)
        return target, False
    check_ours(target)
    if root is None and not os.environ.get("RAGZOO_CORPORA"):
        writable_cache_root("corpora")  # unpacked into the cache root: only into ragzoo's, before any download
    if src.format == "parquet":
        _fetch_files(src, target, offline=offline, cache_dir=cache_dir, progress=progress,
                     allow_unverified=allow_unverified, log=log)
        return target, True
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
