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
from pathlib import Path

__all__ = ["usable_cpus", "cpu_quota"]


def usable_cpus(root: str | Path = "/") -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota (see the module doc).
    `root`: where /proc and /sys are read (tests give a folder laid out as they are)."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(root)
    if quota is not None:
        allowed = min(allowed, max(1, math.ceil(quota)))
    return max(1, allowed)


def cpu_quota(root: str | Path = "/") -> float | None:
    """The CPU quota of this process's cgroup and its parents, in CPUs (the smallest one set), or None where
    none is set or it cannot be read (no cgroup file system, another OS): never an error."""
    root = Path(root)
    try:
        lines = (root / "proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified hierarchy (under "unified" on a
            for mount in ("sys/fs/cgroup", "sys/fs/cgroup/unified"):  # host that mounts v1 beside it)
                found += _quotas(root / mount, path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's hierarchy
            mount = root / "sys/fs/cgroup" / controllers
            if not mount.is_dir():
                mount = root / "sys/fs/cgroup/cpu"
            found += _quotas(mount, path, _v1_quota)
    return min(found) if found else None


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
    try:
        fields = (group / "cpu.max").read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return None
    return _ratio(*fields) if len(fields) == 2 else None


def _v1_quota(group: Path) -> float | None:
    try:
        limit = (group / "cpu.cfs_quota_us").read_text(encoding="utf-8").strip()
        period = (group / "cpu.cfs_period_us").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return _ratio(limit, period)


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
    """Size the native thread pools ragzoo's retrievers run (torch's intra-op pool, faiss's OpenMP pool, those
    imported) to `usable_cpus` where they are larger: both count the host's cores, not a container's quota. Left
    as they are where OMP_NUM_THREADS is set (the user chose). Returns the CPUs counted."""
    import sys

    cpus = usable_cpus()
    if os.environ.get("OMP_NUM_THREADS"):
        return cpus
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() > cpus:
        torch.set_num_threads(cpus)
    faiss = sys.modules.get("faiss")
    if faiss is not None and faiss.omp_get_max_threads() > cpus:
        faiss.omp_set_num_threads(cpus)
    return cpus
