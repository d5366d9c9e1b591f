"""Which folders ragzoo may write into: the one ownership rule of every writing command.

Every folder ragzoo creates (a run, a compiled-program artifact, a grid, an index, a compile checkpoint, the
cache root) carries a marker file,
`.ragzoo-folder.json`: {"kind", "ragzoo_version", "files": [the names ragzoo wrote there]}. A command writes
into an existing folder only when its marker names the command's kind (`claim`); `--force` and `--resume` are
weighed by the caller only after that, so they never apply to a folder without the marker. Anything ragzoo did
not write inside its own folder (a user's NOTES.md, a data/ subfolder) is left alone: in-place writers touch only
their own names, and a replace (`replace`: artifact save, index build) carries such entries over into the new
folder and names them.

Never a target, whatever the folder holds: `/`, the home folder, the current folder, and any folder holding
`.git`. A symbolic link is judged by the folder it points to. Folders of earlier ragzoo versions (no marker)
are recognised by their full set of files (`legacy_kind`: a run or an artifact with exactly ragzoo's files, an
index whose meta.json says "ragzoo-index", a grid whose grid.json names its grid and cells, a checkpoint
with its checkpoint.json, a cache root holding only ragzoo's cache subfolders) and are marked when next written.
Starting a folder over in place (`clear`: a compile checkpoint under --force) removes only what ragzoo wrote.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ragzoo.errors import ConfigError
from ragzoo.files import atomic_write_json, replace_dir, sha256_file

MARKER = ".ragzoo-folder.json"
# the temporary file of a marker being written (files.atomic_write_bytes): another process marking the folder
# that moment, not a file of the user's
_MARKER_TMP = re.compile(re.escape(f".{MARKER}.") + r".+\.tmp$")
NOUNS = {"run": "ragzoo run directory", "artifact": "ragzoo compiled-program artifact",
         "grid": "ragzoo grid directory", "index": "ragzoo index", "cache": "ragzoo cache folder",
         "checkpoint": "ragzoo compile checkpoint", "mlflow-artifacts": "ragzoo MLflow artifact folder"}

# What earlier versions wrote, kind by kind: (files that must all be there, files that may be there). A legacy
# folder holding anything else is not recognised (a look-alike config.json among a user's files is not a run).
_RUN_LOCK = ".ragzoo-run.lock"
_LEGACY_RUN = ({"config.json", "predictions.jsonl"}, {"summary.json", _RUN_LOCK})
_LEGACY_ARTIFACT = ({"program.json", "manifest.json"}, {"knn_trainset.json"})
_LEGACY_GRID_FILES = {"grid.json", "cells", "results.md", "results.csv", "results.json"}
# an index of an earlier version says what it is in meta.json; these are the names its builds wrote
_INDEX_FILES = {"meta.json", "passages.jsonl", "passage_offsets.npy", "data.csc.index.npy", "indices.csc.index.npy",
                "indptr.csc.index.npy", "vocab.index.json", "params.index.json", "term_max.npy", "embeddings.f32",
                "faiss.index", "collection.tsv", "pids.json", "plaid", "ragzoo"}
# a compile checkpoint of an earlier version: what it is of, and what the optimizer kept
_LEGACY_CHECKPOINT = ({"checkpoint.json"}, {"bootstrap.json", "gepa"})
# the subfolders earlier versions made in the cache root (RAGZOO_CACHE, ~/.cache/ragzoo)
CACHE_FOLDERS = {"indexes", "onnx", "corpora", "hf_datasets"}


@dataclass
class Claim:
    """A folder a command may write: `path` (a link already followed), `state` "new" (missing or empty),
    "ours" (marked as this kind) or "legacy" (this kind, from a version before markers)."""

    path: Path
    kind: str
    state: str

    @property
    def existing(self) -> bool:
        return self.state != "new"


def _version() -> str:
    from ragzoo import __version__

    return __version__


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of `folder` when it is one ragzoo wrote (a JSON object naming a known kind), else None."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("kind") not in NOUNS:
        return None
    files = marker.get("files")
    marker["files"] = [name for name in files if isinstance(name, str)] if isinstance(files, list) else []
    return marker


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


def legacy_kind(folder: str | os.PathLike) -> str | None:
    """The kind of an unmarked folder that an earlier ragzoo version wrote, recognised by its files; else None."""
    folder = Path(folder)
    try:
        names = {entry.name for entry in folder.iterdir() if not _MARKER_TMP.match(entry.name)}
    except OSError:
        return None
    required, optional = _LEGACY_RUN
    if required <= names <= required | optional and (folder / "predictions.jsonl").is_file():
        config = _read_json(folder / "config.json")
        if isinstance(config, dict) and isinstance(config.get("metrics"), list):
            return "run"
    required, optional = _LEGACY_ARTIFACT
    if required <= names <= required | optional and (folder / "program.json").is_file():
        manifest = _read_json(folder / "manifest.json")
        if isinstance(manifest, dict) and isinstance(manifest.get("format_version"), int) \
                and manifest.get("program_sha256") == sha256_file(folder / "program.json"):
            return "artifact"
    if "meta.json" in names:
        meta = _read_json(folder / "meta.json")
        if isinstance(meta, dict) and meta.get("format") == "ragzoo-index":
            return "index"
    if "grid.json" in names and names <= _LEGACY_GRID_FILES:
        grid = _read_json(folder / "grid.json")
        if isinstance(grid, dict) and isinstance(grid.get("name"), str) and isinstance(grid.get("cells"), list) \
                and "lms" in grid:
            return "grid"
    required, optional = _LEGACY_CHECKPOINT
    if required <= names <= required | optional and (folder / "checkpoint.json").is_file():
        meta = _read_json(folder / "checkpoint.json")
        if isinstance(meta, dict) and isinstance(meta.get("version"), int) \
                and isinstance(meta.get("fingerprint"), dict):
            return "checkpoint"
    if names and names <= CACHE_FOLDERS and all((folder / name).is_dir() and not (folder / name).is_symlink()
                                                for name in names):
        return "cache"
    return None


def kind_of(folder: str | os.PathLike) -> str | None:
    """What ragzoo folder `folder` is (its marker, else what an earlier version wrote), or None."""
    marker = read_marker(folder)
    return marker["kind"] if marker is not None else legacy_kind(folder)


def never_a_target(path: str | os.PathLike) -> str | None:
    """Why `path` may never be written by ragzoo (the root, the home or the current folder, a git working tree),
    or None."""
    resolved = Path(path).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return "the root folder"
    try:
        if resolved == Path.home().resolve():
            return "your home folder"
    except RuntimeError:  # no home to compare with
        pass
    if resolved == Path.cwd().resolve():
        return "the current folder"
    if (resolved / ".git").exists():
        return "a git working tree (it holds .git)"
    return None


def claim(path: str | os.PathLike, kind: str, *, flag: str = "--out", error: type[Exception] = ConfigError,
          remedy: str | None = None, read_only_remedy: str | None = None) -> Claim:
    """Decide whether a command writing a `kind` folder may write at `path`; raises `error` (one line: what is
    wrong, then what to do) unless `path` is missing, an empty folder, or a folder ragzoo made for `kind`. Writes
    nothing. What to do is "choose another {flag}" (or a new folder) unless the caller knows better: `remedy`
    ends every refusal instead, `read_only_remedy` the one of a read-only folder (default "make it writable or
    {remedy}"), for a folder the user does not name by a flag (the cache root, a compile's checkpoint)."""
    def refuse(problem: str, advice: str) -> Exception:
        return error(f"{problem}; {advice if remedy is None else remedy}")

    noun = NOUNS[kind]
    given = Path(path).expanduser()
    reason = never_a_target(given)
    if reason:
        raise refuse(f"{flag} {path} is {reason}, which ragzoo never writes into",
                     f"choose a new folder for the {noun.removeprefix('ragzoo ')}")
    if given.is_symlink() and not given.exists():
        raise refuse(f"{flag} {path} is a symbolic link to nothing", "choose a new or empty folder")
    if not given.exists():
        return Claim(given, kind, "new")
    target = given.resolve() if given.is_symlink() else given
    if not target.is_dir():
        raise refuse(f"{flag} {path} is a file, not a {noun}", f"choose another {flag}")
    try:
        names = {entry.name for entry in target.iterdir() if not _MARKER_TMP.match(entry.name)}
    except OSError as failure:
        problem = f"{flag} {path} cannot be read ({failure.strerror or failure})"
        raise refuse(problem, f"choose another {flag}") from None
    if remedy is not None and read_only_remedy is None:
        read_only_remedy = f"make it writable or {remedy}"
    if not names or (kind == "run" and names == {_RUN_LOCK}):  # a run killed before its first file
        return _writable(Claim(target, kind, "new"), path, flag, error, read_only_remedy)
    marker = read_marker(target)
    found = marker["kind"] if marker is not None else legacy_kind(target)
    if found == kind:
        return _writable(Claim(target, kind, "ours" if marker is not None else "legacy"), path, flag, error,
                         read_only_remedy)
    if found is not None:
        raise refuse(f"{flag} {path} is a {NOUNS[found]}, not a {noun}", f"choose another {flag}")
    link = " (through a symbolic link)" if target is not given else ""
    raise error(f"{flag} {path}{link} is not a {noun}: it holds files ragzoo did not write and no {MARKER}; "
                f"ragzoo never writes into it: {'choose a new or empty folder' if remedy is None else remedy}")


def _writable(found: Claim, path, flag: str, error: type[Exception], remedy: str | None = None) -> Claim:
    # said before any work: a replace would otherwise swap a read-only folder away, an in-place write fail midway
    if not os.access(found.path, os.W_OK | os.X_OK):
        raise error(f"{flag} {path} is read-only; {remedy or f'make it writable or choose another {flag}'}")
    return found


def ragzoo_files(folder: str | os.PathLike, kind: str) -> set[str]:
    """The names inside `folder` that ragzoo wrote (its marker's list, or what an earlier version wrote)."""
    marker = read_marker(folder)
    if marker is not None:
        return {MARKER, *marker["files"]}
    if kind == "run":
        return _LEGACY_RUN[0] | _LEGACY_RUN[1]
    if kind == "artifact":
        return _LEGACY_ARTIFACT[0] | _LEGACY_ARTIFACT[1]
    if kind == "index":
        return set(_INDEX_FILES)
    if kind == "grid":
        return set(_LEGACY_GRID_FILES)
    if kind == "checkpoint":
        return _LEGACY_CHECKPOINT[0] | _LEGACY_CHECKPOINT[1]
    if kind == "cache":
        return set(CACHE_FOLDERS)
    return set()


def mark(folder: str | os.PathLike, kind: str, files: Iterable[str] = ()) -> None:
    """Write (or extend) the marker of `folder`: it is a `kind` folder and ragzoo wrote `files` in it."""
    folder = Path(folder)
    previous = read_marker(folder)
    names = set(files)
    if previous is not None and previous["kind"] == kind:
        names |= set(previous["files"])
    names.discard(MARKER)
    marker = {"kind": kind, "ragzoo_version": _version(), "files": sorted(names)}
    if previous is not None and {k: previous.get(k) for k in marker} == marker:
        return  # nothing new: no write, so a read-only rerun stays read-only
    atomic_write_json(folder / MARKER, marker)


def foreign_entries(folder: str | os.PathLike, kind: str) -> list[str]:
    """Entries of `folder` ragzoo did not write (kept by any replace of it)."""
    folder = Path(folder)
    try:
        names = {entry.name for entry in folder.iterdir()}
    except OSError:
        return []
    return sorted(names - ragzoo_files(folder, kind))


def replace(staging: str | os.PathLike, final: str | os.PathLike, kind: str) -> list[str]:
    """Mark the finished folder `staging` (ragzoo wrote every file in it) and swap it in for `final`, carrying
    over what ragzoo did not write in the old `final`. Says on stderr, in one line, which entries were kept;
    returns their names in the new folder."""
    staging, final = Path(staging), Path(final)
    mark(staging, kind, (entry.name for entry in staging.iterdir()))
    keep = foreign_entries(final, kind) if final.is_dir() and not final.is_symlink() else []
    carried = replace_dir(staging, final, keep=keep)
    if carried:
        shown = ", ".join(new if new == old else f"{old} (as {new})" for old, new in carried)
        print(f"ragzoo: kept {len(carried)} entr{'y' if len(carried) == 1 else 'ies'} of {final} that ragzoo did "
              f"not write: {shown}", file=sys.stderr)
    return [new for _, new in carried]


def clear(folder: str | os.PathLike, kind: str) -> list[str]:
    """Start the `kind` folder `folder` over in place: remove what ragzoo wrote there and keep anything else. The
    folder goes too when nothing else is left; otherwise it stays marked, listing none of ragzoo's files, and
    stderr names what was kept. Returns the names kept. A folder that is not ragzoo's `kind` is left untouched."""
    import shutil

    folder = Path(folder)
    if not folder.is_dir() or kind_of(folder) != kind:
        return []
    keep = foreign_entries(folder, kind)
    for name in sorted(ragzoo_files(folder, kind) - {MARKER}):
        entry = folder / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()
    if not keep:
        (folder / MARKER).unlink(missing_ok=True)
        if not folder.is_symlink():
            folder.rmdir()
        return []
    atomic_write_json(folder / MARKER, {"kind": kind, "ragzoo_version": _version(), "files": []})
    print(f"ragzoo: kept {len(keep)} entr{'y' if len(keep) == 1 else 'ies'} of {folder} that ragzoo did not write: "
          f"{', '.join(keep)}", file=sys.stderr)
    return keep


# ---------------------------------------------------------------------------------------------------------
# Single files a command writes beside the user's own (a report page, a plot): the same rule as folders, with
# the mark inside the file itself (its generator tag or metadata), since a file has no room for a marker file.

PLOT_MARK = "ragzoo report --plot"
_MARK_WINDOW = 1 << 16  # where each format keeps its metadata: PNG ~50 bytes in, SVG ~700, PDF ~4 KiB


def plot_metadata(path: str | os.PathLike) -> dict | None:
    """`savefig` metadata that marks a plot as ragzoo's, for the formats that carry metadata (None otherwise:
    such a file is written once and then never replaced)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".png":
        return {"Software": PLOT_MARK}
    if suffix in (".svg", ".pdf", ".ps", ".eps"):
        return {"Creator": PLOT_MARK}
    return None


_WHOLLY_RAGZOOS = {"run", "artifact", "index", "checkpoint"}  # folders no other file goes into (a grid's may)


def check_file(path: str | os.PathLike, mark: str, what: str, *, flag: str, marked_by: str | os.PathLike | None = None,
               remedy: str | None = None) -> Path:
    """The path of a file a command is about to write, refused (ConfigError, one line) when its folder is missing,
    when it is a folder, or when a file is there that does not carry `mark` near its start: a user's file is never
    overwritten, and one this command wrote is replaced. A file with no room for a mark (a corpus JSONL, read line
    by line) is marked by another one its writer puts beside it first: `marked_by`, which must carry `mark`.
    `remedy` ends the refusal of a file that is not ours (default: choose another `flag` path or remove it)."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"cannot write the {what} to {path}: folder {parent} does not exist; create it or choose "
                          f"another {flag} path")
    if target.is_dir():
        raise ConfigError(f"cannot write the {what} to {path}: it is a folder; give a file name to {flag}")
    inside = kind_of(parent)
    if inside in _WHOLLY_RAGZOOS:  # its every file is ragzoo's: a --force would take it, a resume could trip on it
        raise ConfigError(f"cannot write the {what} to {path}: {parent} is a {NOUNS[inside]}, which holds only "
                          f"what ragzoo writes there; choose another {flag} path")
    if target.exists() or target.is_symlink():
        witness = Path(marked_by) if marked_by is not None else target
        try:
            with open(witness, "rb") as handle:
                head = handle.read(_MARK_WINDOW)
        except FileNotFoundError:
            head = b""
        except OSError as error:
            raise ConfigError(f"cannot write the {what} to {path}: {error.strerror}") from None
        if mark.encode("utf-8") not in head:
            unmarked = f" (no {witness.name} of ragzoo's beside it)" if witness != target else ""
            raise ConfigError(f"refusing to overwrite {path}: this command did not write it{unmarked}, so it is kept "
                              f"as it is; {remedy or f'choose another {flag} path or remove it'}")
    return target


# tables of Optuna's schema: an SQLite file holding one is an Optuna storage (or one being created)
_OPTUNA_TABLES = {"studies", "version_info", "alembic_version", "trials", "study_directions"}


def sqlite_file(url: str) -> str | None:
    """The database file of an `sqlite:///PATH[?options]` URL as written (Optuna's storage, MLflow's tracking
    store; "" for an in-memory one); None for any other URL."""
    if not url.startswith("sqlite:///"):
        return None
    return url[len("sqlite:///"):].partition("?")[0]


def storage_file(url: str) -> str | None:
    """The file on this machine's disk an Optuna storage URL writes (`journal:PATH`, `sqlite:///PATH`), or None (a
    database server's URL)."""
    return url[len("journal:"):] if url.startswith("journal:") else sqlite_file(url)


def check_storage(url: str, *, flag: str = "--storage") -> None:
    """An Optuna storage on this machine's disk (`journal:PATH`, `sqlite:///PATH`) is written only where it is new
    (missing or empty; a missing folder is the opener's to create or refuse) or already an Optuna storage: a
    journal whose first line is one of Optuna's log records, an SQLite database holding Optuna's tables. Several
    workers and machines share one on purpose, so an Optuna storage is not claimed for one command; a user's file
    (a log, a database of their own tables) is refused in one line before Optuna appends to it. A database server's
    URL (postgresql://, mysql://) is the user's to give."""
    journal = url.startswith("journal:")
    name = storage_file(url)
    if name is None:
        return
    path = Path(name)
    what = "an Optuna journal" if journal else "an Optuna SQLite storage"
    if path.is_dir():
        raise ConfigError(f"{flag} {url}: {path} is a folder; give a file name")
    try:
        if not path.exists() or path.stat().st_size == 0:
            return
        if journal:
            with open(path, "rb") as handle:
                head = handle.read(64)
            # Optuna's log records are JSON objects starting with their op_code (read as a prefix: another
            # worker may be writing the first line this moment)
            ours = head.lstrip().startswith(b'{"op_code"')
        else:
            with open(path, "rb") as handle:
                database = handle.read(16) == b"SQLite format 3\x00"
            tables = _sqlite_tables(path) if database else set()
            # any of Optuna's tables (another worker may be creating the schema this moment); a database whose
            # tables cannot be read now (locked, a crashed writer's journal) is not refused on a guess
            ours = database and (not tables or bool(tables & _OPTUNA_TABLES))  # None: unreadable, not refused
    except OSError as error:
        raise ConfigError(f"{flag} {url}: cannot read {path}: {error.strerror or error}") from None
    if not ours:
        raise ConfigError(f"refusing to write to {path}: it is not {what} (a file of yours?), so it is kept as it "
                          f"is; choose another {flag} path (a new file) or remove it")


def _sqlite_tables(path: Path) -> set[str] | None:
    """The tables of the SQLite database at `path`, read without writing or locking anything (`immutable`: a hot
    journal a killed writer left is not rolled back, which a read-only open cannot do); None if they cannot be
    read."""
    import sqlite3

    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return None
    finally:
        connection.close()
