"""What this machine lets ragzoo use: the one place that counts the CPUs a process may run on.

`os.cpu_count()` counts the host's CPUs. A process may be given fewer: an affinity mask (`taskset`, a
cpuset) or a CPU quota (`docker --cpus 2`, a Kubernetes CPU limit: the cgroup's `cpu.max`, or `cpu.cfs_quota_us`
under cgroup v1). A quota does not show in the affinity mask: on a 64-core host a container limited to 2 CPUs
sees 64, and a pool sized by that count (processes, onnxruntime or torch threads) runs 32 times oversubscribed,
throttled by the kernel at each period. `usable_cpus` is the smaller of the two, rounded up (a quota of 1.5 CPUs
keeps 2 busy, as the JVM counts it), and never less than one.
"""

from __future__ import annotations

import math
import os
import re
import threading
from pathlib import Path

__all__ = ["usable_cpus", "cpu_quota"]


def usable_cpus(root: str | Path = "/") -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota (see the module doc).
    `root`: where /proc and /sys are read (tests give a folder laid out as they are)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks on this OS
        allowed = os.cpu_count() or 1
    quota = cpu_quota(root)
    if quota is not None:
        allowed = min(allowed, max(1, math.ceil(quota)))
    return max(1, allowed)


def cpu_quota(root: str | Path = "/") -> float | None:
    """The CPU quota of this process's cgroup and its parents, in CPUs (the smallest one set), or None where
    none is set or it cannot be read (no cgroup file system, another OS): never an error."""
    try:
        return _cpu_quota(Path(root))
    except (OSError, UnicodeDecodeError, ValueError, OverflowError):  # an unsearchable folder, a torn file
        return None


def _read(path: Path) -> str | None:
    """A small kernel file's text, None where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_quota(root: Path) -> float | None:
    text = _read(root / "proc/self/cgroup")
    if text is None:
        return None
    lines = text.splitlines()
    mounts = _cgroup_mounts(root)
    found: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified hierarchy
            places = mounts.get("cgroup2") or [("/", root / "sys/fs/cgroup"), ("/", root / "sys/fs/cgroup/unified")]
            read = _v2_quota
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's hierarchy
            places = mounts.get("cpu") or [("/", root / "sys/fs/cgroup" / controllers),
                                           ("/", root / "sys/fs/cgroup/cpu")]
            read = _v1_quota
        else:
            continue
        for mount_root, mount in places:  # each place there (v1's "cpu" is often a link to "cpu,cpuacct")
            relative = _below(path, mount_root)
            if relative is None:  # a mount of another group (a bind mount of a sibling, of a child of ours)
                if len(places) > 1:
                    continue
                relative = "/"  # the only mount there is: its own limit is the one readable
            if os.path.isdir(mount):  # never raises (a folder this process may not search is no limit)
                found += _quotas(mount, relative, read)
    return min(found) if found else None


def _cgroup_mounts(root: Path) -> dict[str, list[tuple[str, Path]]]:
    """{"cgroup2" or "cpu": [(the hierarchy's folder the mount shows, where it is mounted)]} from
    /proc/self/mountinfo; empty where it cannot be read (then the standard mount points are tried)."""
    text = _read(root / "proc/self/mountinfo")
    if text is None:
        return {}
    lines = text.splitlines()
    mounts: dict[str, list[tuple[str, Path]]] = {}
    for line in lines:
        fields, _, tail = line.partition(" - ")
        fields, tail = fields.split(), tail.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        kind = "cgroup2" if tail[0] == "cgroup2" else "cpu" if tail[0] == "cgroup" and \
            "cpu" in tail[2].split(",") else None
        if kind:
            mounts.setdefault(kind, []).append((_unescape(fields[3]), root / _unescape(fields[4]).lstrip("/")))
    return mounts


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def _below(path: str, mount_root: str) -> str | None:
    """The cgroup `path` (as /proc/self/cgroup gives it) relative to the folder of the hierarchy a mount shows,
    or None where the mount shows no ancestor of it. A container that sees the host's path of its group
    (`/docker/<id>`) has that group mounted as the mount's top, and the folders above it are not the mount's
    (`/docker` there may be another daemon's group inside it)."""
    path, mount_root = "/" + path.strip().strip("/"), "/" + mount_root.strip("/")
    if mount_root == "/":
        return path
    if path == mount_root or path.startswith(mount_root + "/"):
        return path[len(mount_root):] or "/"
    return None


def _quotas(mount: Path, path: str, read) -> list[float]:
    """Every quota set on the cgroup at `path` under `mount` and on its parents up to the mount. Inside a
    container the cgroup namespace shows its own group as "/", so the mount's top holds the container's limit."""
    quotas = []
    parts = [part for part in path.strip().split("/") if part and part != ".."]
    for depth in range(len(parts), -1, -1):
        quota = read(mount.joinpath(*parts[:depth]))
        if quota is not None:
            quotas.append(quota)
    return quotas


def _v2_quota(group: Path) -> float | None:
    fields = (_read(group / "cpu.max") or "").split()
    return _ratio(*fields) if len(fields) == 2 else None


def _v1_quota(group: Path) -> float | None:
    limit, period = _read(group / "cpu.cfs_quota_us"), _read(group / "cpu.cfs_period_us")
    return None if limit is None or period is None else _ratio(limit.strip(), period.strip())


def _ratio(limit: str, period: str) -> float | None:
    """limit / period in CPUs; None for no limit ("max", -1) or what is not a pair of positive numbers."""
    try:
        limit_us, period_us = int(limit), int(period)
    except ValueError:
        return None
    if limit_us <= 0 or period_us <= 0:
        return None
    return limit_us / period_us


def cap_native_threads() -> int:
    """Size torch's intra-op pool (one for the process) and the calling thread's faiss pool to `usable_cpus`
    where they are larger: both count the host's cores, not a container's quota. Left as they are where
    OMP_NUM_THREADS is set (the user chose). Returns the CPUs counted. faiss's count is per thread (OpenMP's):
    a thread that searches caps its own with `cap_faiss_in_this_thread`."""
    import sys

    cpus = usable_cpus()
    if os.environ.get("OMP_NUM_THREADS"):
        return cpus
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() > cpus:
        torch.set_num_threads(cpus)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        _cap_faiss(faiss, cpus)
    return cpus


_THREAD = threading.local()


def cap_faiss_in_this_thread(faiss) -> None:
    """Cap the calling thread's faiss (OpenMP) pool to `usable_cpus`, once per thread. OpenMP keeps the count
    per thread: a thread started after `cap_native_threads` (evaluate's and the server's workers) starts from the
    process default, the host's cores."""
    if getattr(_THREAD, "faiss_capped", False):
        return
    _THREAD.faiss_capped = True
    if not os.environ.get("OMP_NUM_THREADS"):
        _cap_faiss(faiss, usable_cpus())


def _cap_faiss(faiss, cpus: int) -> None:
    if faiss.omp_get_max_threads() > cpus:
        faiss.omp_set_num_threads(cpus)
