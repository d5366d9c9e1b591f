"""Writing files and folders so that a crash, a kill or a concurrent reader never sees half of one.

The one atomic-write routine of ragzoo: artifacts, run directories and the index cache all write through
here.
- `atomic_write_bytes` / `atomic_write_json`: a temp file in the same folder, fsynced, renamed over the
  target, then the folder fsynced.
- `staging_dir(final)` + `replace_dir(staging, final)`: build a folder beside its final place, then swap it
  in: an old folder is renamed to a backup first and dropped only once the new one is in place, so there
  is never a moment with no folder at `final`, and a failure puts the old one back; entries the caller names
  (what ragzoo did not write) are carried over into the new folder.
- Permissions follow the umask, as any other program's files do (`tempfile` would make them 0600/0700 and
  shut colleagues on a shared filesystem out of a run): no secret is ever written to these files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def _umask() -> int:
    # os.umask can only be read by setting it; set it straight back (a process-wide value, read once).
    global _UMASK
    if _UMASK is None:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK = current
    return _UMASK


_UMASK: int | None = None


def file_mode() -> int:
    """Mode a new file gets under the process umask (what `open(path, "w")` would give)."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """Mode a new folder gets under the process umask (what `mkdir` would give)."""
    return 0o777 & ~_umask()


def fsync_dir(path: str | os.PathLike) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems refuse to open a folder; the rename is atomic all the same
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a reader (or a crash) sees the old file or the new one, never a torn one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def jsonable(value: Any) -> Any:
    """`value` with every container made JSON-ready: dict keys as strings, tuples and sets as lists, and
    anything else not JSON-native as its `str`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    return str(value)


STAGING_MARK = ".building-"
BACKUP_MARK = ".old-"


def is_transient_dir(path: str | os.PathLike) -> bool:
    """True for a folder named as `staging_dir` or `replace_dir` name theirs (`.NAME.building-...`,
    `.NAME.old-...`): a build a kill interrupted or a backup not yet removed, never a finished folder."""
    name = Path(path).name
    return name.startswith(".") and (STAGING_MARK in name or BACKUP_MARK in name)


def staging_dir(final: str | os.PathLike) -> Path:
    """A fresh, empty sibling folder of `final` to build into; `replace_dir` moves it into place (`discard_dir`
    drops it). This process holds a lock on it until then (`in_use`): its PID in the name says nothing to a
    process in another PID namespace (a second container sharing the folder), which removed a live build's."""
    final = Path(final)
    made = [folder for folder in (final.parent, *final.parent.parents) if not folder.exists()]  # deepest first
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}{STAGING_MARK}{os.getpid()}-{time.time_ns()}-",
                                    dir=final.parent))
    os.chmod(staging, dir_mode())
    _hold(staging)
    if made:
        _MADE_FOR[str(staging)] = made
    return staging


_HELD: dict[str, int] = {}  # staging folder -> the descriptor whose lock says a build is writing it
_MADE_FOR: dict[str, list[Path]] = {}  # staging folder -> the folders made to hold it: a discarded build removes them


def _hold(path: Path) -> None:
    import fcntl

    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return  # a folder that cannot be opened cannot be locked: the PID in its name is all there is
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return
    _HELD[str(path)] = descriptor


def _let_go(path: str | os.PathLike) -> None:
    descriptor = _HELD.pop(str(path), None)
    if descriptor is not None:
        os.close(descriptor)


# Other descriptors whose locks say "being written" (a run's, `ragzoo.runs._run_lock`): a process forked while they
# are open (a cell's --processes workers, while other --parallel cells run) would share those locks until it exits,
# so a run's lock would outlive its writer
_NOT_FOR_CHILDREN: set[int] = set()


def keep_lock_from_children(descriptor: int) -> None:
    """`descriptor` holds a lock of this process's: a forked child closes its copy (`forget_lock` once closed)."""
    _NOT_FOR_CHILDREN.add(descriptor)


def forget_lock(descriptor: int) -> None:
    _NOT_FOR_CHILDREN.discard(descriptor)


def _forget_held() -> None:  # a forked child: the parent's builds and runs are the parent's to hold
    for descriptor in [*_HELD.values(), *_NOT_FOR_CHILDREN]:
        try:
            os.close(descriptor)
        except OSError:
            pass
    _HELD.clear()
    _NOT_FOR_CHILDREN.clear()
    _MADE_FOR.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held)


def lock_while_open(handle) -> None:
    """Lock the file `handle` writes (a partial download) until it is closed, for `in_use` (best effort: a file
    system without locks leaves the PID in its name as all there is)."""
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass


def in_use(path: str | os.PathLike, *, writable: bool = False) -> bool | None:
    """Whether a live process holds the lock of `path` (a staging folder, a partial download, a run's lock file):
    True, False, or None where that cannot be told (no such lock on this file system, or the path cannot be
    opened). The kernel drops the lock when its process dies, in whatever namespace it ran. `writable`: open the
    file for writing, as NFS's emulated flock needs for an exclusive lock."""
    import fcntl

    try:
        descriptor = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return False
    finally:
        os.close(descriptor)


def replace_dir(staging: str | os.PathLike, final: str | os.PathLike,
                keep: list[str] | tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Move the finished folder `staging` to `final`. An existing `final` is renamed to a backup first and
    removed only after the new folder is in place; if the swap fails, the old folder is put back.

    `keep`: names of entries in the old `final` to carry over into the new one (what ragzoo did not write
    there; see `ragzoo.ownership`). An entry whose name the new folder also uses comes over as `NAME.kept`
    (`NAME.kept-2`, ...). If any cannot be moved, the backup is left in place rather than removed. Returns
    (old name, new name) of each entry carried over."""
    staging, final = Path(staging), Path(final)
    backup = None
    if final.exists() or final.is_symlink():
        backup = final.with_name(f".{final.name}{BACKUP_MARK}{os.getpid()}-{time.time_ns()}")
        os.replace(final, backup)
    try:
        os.replace(staging, final)
    except BaseException:
        if backup is not None:
            os.replace(backup, final)
        raise
    _let_go(staging)
    _MADE_FOR.pop(str(staging), None)  # published: the folders that hold it are the user's now
    carried: list[tuple[str, str]] = []
    intact = True
    if backup is not None and keep and backup.is_dir() and not backup.is_symlink():
        for name in keep:
            target, suffix = name, 1
            while os.path.lexists(final / target):  # never over a file of the new folder, nor over another kept one
                target = f"{name}.kept" if suffix == 1 else f"{name}.kept-{suffix}"
                suffix += 1
            try:
                os.rename(backup / name, final / target)
                carried.append((name, target))
            except FileNotFoundError:
                continue
            except OSError:
                intact = False  # what could not be moved stays in the backup, which is then not removed
    fsync_dir(final.parent)
    if backup is not None and intact:
        if backup.is_dir() and not backup.is_symlink():
            shutil.rmtree(backup, ignore_errors=True)
        else:
            backup.unlink(missing_ok=True)
    return carried


def discard_dir(staging: str | os.PathLike) -> None:
    """Drop a `staging_dir` build, and the folders made to hold it that are still empty (a failed build leaves
    nothing of its own behind)."""
    _let_go(staging)
    shutil.rmtree(staging, ignore_errors=True)
    for folder in _MADE_FOR.pop(str(staging), ()):
        try:
            folder.rmdir()
        except OSError:  # something else is in it now: not ours to remove
            break

