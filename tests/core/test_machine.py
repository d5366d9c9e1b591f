"""`ragzoo.machine.usable_cpus`: the affinity mask capped by the cgroup's CPU quota, read from a folder laid out as
/proc and /sys are (cgroup v2, v1, the hybrid layout with v2 under "unified"), and the pools sized by it."""

from __future__ import annotations

import sys
import types

import pytest

from ragzoo import machine


def _layout(root, cgroup: str, files: dict[str, str]):
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    for path, text in files.items():
        target = root / "sys/fs/cgroup" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


@pytest.fixture
def eight_cpus(monkeypatch):
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


@pytest.mark.parametrize("cgroup, files, quota, cpus", [
    # cgroup v2 inside a container: its own group shows as "/", its limit at the mount's top
    ("0::/\n", {"cpu.max": "200000 100000\n"}, 2.0, 2),
    ("0::/\n", {"cpu.max": "150000 100000\n"}, 1.5, 2),  # rounded up: 1.5 CPUs keep two busy
    ("0::/\n", {"cpu.max": "50000 100000\n"}, 0.5, 1),  # never fewer than one
    ("0::/\n", {"cpu.max": "max 100000\n"}, None, 8),  # no limit: the affinity mask
    # a limit on a parent group binds its children: the smallest on the way up
    ("0::/kubepods/pod1/c1\n", {"cpu.max": "max 100000", "kubepods/cpu.max": "max 100000",
                                 "kubepods/pod1/cpu.max": "300000 100000", "kubepods/pod1/c1/cpu.max": "max 100000"},
     3.0, 3),
    ("0::/a/b\n", {"a/cpu.max": "100000 100000", "a/b/cpu.max": "400000 100000"}, 1.0, 1),
    # a quota above the affinity mask: the mask
    ("0::/\n", {"cpu.max": "1600000 100000"}, 16.0, 8),
    # cgroup v1 (hybrid: v2 mounted under "unified" without the cpu controller)
    ("12:cpu,cpuacct:/docker/abc\n0::/\n", {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000\n",
                                           "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
                                           "unified/cgroup.procs": ""}, 2.5, 3),
    ("1:cpu:/\n2:cpuacct:/\n0::/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None, 8),
    # v1 controllers mounted apart from their joint name
    ("4:cpuacct,cpu:/\n", {"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "50000"}, 2.0, 2),
    # v2 under "unified" with a limit
    ("0::/x\n", {"unified/x/cpu.max": "100000 100000"}, 1.0, 1),
])
def test_the_quota_caps_the_affinity_mask(tmp_path, eight_cpus, cgroup, files, quota, cpus):
    root = _layout(tmp_path, cgroup, files)
    assert machine.cpu_quota(root) == quota
    assert machine.usable_cpus(root) == cpus


@pytest.mark.parametrize("cgroup, files", [
    (None, {}),  # no /proc (another OS)
    ("0::/\n", {}),  # no cpu.max (the cpu controller not enabled)
    ("0::/\n", {"cpu.max": "garbage\n"}),
    ("0::/\n", {"cpu.max": "0 100000\n"}),
    ("0::/\n", {"cpu.max": "100000 0\n"}),
    ("0::/\n", {"cpu.max": ""}),
    ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "100000"}),  # no period
    ("not a cgroup file", {}),
    ("0::/../../etc\n", {"cpu.max": "max 100000", "../../etc/cpu.max": "100000 100000"}),  # not out of the mount
])
def test_an_unreadable_or_absent_quota_is_no_limit(tmp_path, eight_cpus, cgroup, files):
    if cgroup is not None:
        _layout(tmp_path, cgroup, files)
    assert machine.cpu_quota(tmp_path) is None
    assert machine.usable_cpus(tmp_path) == 8


def test_undecodable_files_are_no_limit(tmp_path, eight_cpus):
    root = _layout(tmp_path, "0::/\n", {"cpu.max": ""})
    (root / "sys/fs/cgroup/cpu.max").write_bytes(b"\xff\xfe 100000")
    assert machine.usable_cpus(root) == 8
    (root / "proc/self/cgroup").write_bytes(b"\xff")
    assert machine.usable_cpus(root) == 8


@pytest.mark.parametrize("cgroup, mountinfo, files, cpus", [
    # docker in docker (cgroup v1): /proc shows the host's path of the group, the mount shows that group as its top;
    # "docker/" inside it is the inner daemon's group, not a parent of this process's
    ("4:cpu,cpuacct:/docker/outer\n",
     "30 25 0:27 /docker/outer /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n",
     {"cpu,cpuacct/cpu.cfs_quota_us": "400000", "cpu,cpuacct/cpu.cfs_period_us": "100000",
      "cpu,cpuacct/docker/cpu.cfs_quota_us": "100000", "cpu,cpuacct/docker/cpu.cfs_period_us": "100000"}, 4),
    # the same for cgroup v2, one level below the mount's top
    ("0::/kubepods/pod7/c1\n", "40 1 0:30 /kubepods/pod7 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
     {"cpu.max": "300000 100000", "c1/cpu.max": "max 100000", "kubepods/cpu.max": "100000 100000"}, 3),
    # v2 mounted where no standard path is, its mount point written with an escaped space
    ("0::/\n", "40 1 0:30 / /my\\040cgroup rw - cgroup2 cgroup2 rw\n", {}, 2),
    # a group outside what the mount shows: the mount's own limit only
    ("0::/elsewhere/x\n", "40 1 0:30 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
     {"cpu.max": "500000 100000", "elsewhere/x/cpu.max": "100000 100000"}, 5),
    # lines that are not mounts of interest, or torn
    ("0::/\n", "garbage\n41 1 0:31 / /proc rw - proc proc rw\n40 1 0:30 / /sys/fs/cgroup rw - cgroup2 c rw\n",
     {"cpu.max": "200000 100000"}, 2),
    # optional fields before " - " (nearly every real line has some), v1 co-mounted with cpuset
    ("5:cpuset,cpu,cpuacct:/k/p\n",
     "31 25 0:28 / /sys/fs/cgroup/cpuset,cpu,cpuacct rw,nosuid shared:12 master:3 - cgroup cgroup "
     "rw,cpuset,cpu,cpuacct\n",
     {"cpuset,cpu,cpuacct/k/cpu.cfs_quota_us": "300000", "cpuset,cpu,cpuacct/k/cpu.cfs_period_us": "100000"}, 3),
    # several mounts of the hierarchy: a bind mount of a sibling group and one of our own child group are not ours
    ("0::/user.slice/u.scope\n",
     "40 1 0:30 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw\n"
     "50 40 0:30 /system.slice/other.service /sibling rw - cgroup2 cgroup2 rw\n"
     "51 40 0:30 /user.slice/u.scope/inner /child rw - cgroup2 cgroup2 rw\n",
     {"user.slice/cpu.max": "200000 100000", "../../../sibling/cpu.max": "100000 100000",
      "../../../child/cpu.max": "100000 100000"}, 2),
    # escapes: a tab and a backslash in the mount point
    ("0::/\n", "40 1 0:30 / /a\\011b\\134c rw - cgroup2 cgroup2 rw\n",
     {"../../../a\tb\\c/cpu.max": "300000 100000"}, 3),
])
def test_mountinfo_places_the_group_under_its_mount(tmp_path, eight_cpus, cgroup, mountinfo, files, cpus):
    root = _layout(tmp_path, cgroup, files)
    (root / "proc/self/mountinfo").write_text(mountinfo)
    if "my\\040cgroup" in mountinfo:
        (root / "my cgroup").mkdir()
        (root / "my cgroup/cpu.max").write_text("200000 100000")
    assert machine.usable_cpus(root) == cpus


def test_a_quota_too_large_for_a_float_is_no_limit(tmp_path, eight_cpus):
    root = _layout(tmp_path, "0::/\n", {"cpu.max": "9" * 400 + " 1"})
    assert machine.cpu_quota(root) is None and machine.usable_cpus(root) == 8


def test_an_unsearchable_folder_or_no_affinity_is_no_error(tmp_path, monkeypatch):
    root = _layout(tmp_path, "0::/\n", {"cpu.max": "100000 100000"})

    def denied(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(machine, "_quotas", denied)
    assert machine.cpu_quota(root) is None
    monkeypatch.setattr(machine.os, "sched_getaffinity", denied, raising=False)
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 6)
    assert machine.usable_cpus(root) == 6


def test_this_machine_counts_at_least_one_and_at_most_its_mask():
    assert 1 <= machine.usable_cpus() <= len(machine.os.sched_getaffinity(0))


def test_evaluate_splits_over_the_quota_not_the_host(monkeypatch):
    """`auto_processes` asks the machine module: a container limited to 2 CPUs on a 64-core host forks 2."""
    import ragzoo.runs

    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(machine, "cpu_quota", lambda root="/": 2.0)
    monkeypatch.setattr(ragzoo.runs, "_endpoint_limits", lambda: {})
    assert ragzoo.runs.auto_processes(1024, 1024) == (512, 2)
    monkeypatch.setattr(machine, "cpu_quota", lambda root="/": None)
    assert ragzoo.runs.auto_processes(1024, 1024) == (64, 16)


class _Pool:
    def __init__(self, threads):
        self.threads = threads


def _fake_pools(monkeypatch, torch_threads: int, faiss_threads: int):
    torch, faiss = _Pool(torch_threads), _Pool(faiss_threads)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        get_num_threads=lambda: torch.threads, set_num_threads=lambda n: setattr(torch, "threads", n)))
    monkeypatch.setitem(sys.modules, "faiss", types.SimpleNamespace(
        omp_get_max_threads=lambda: faiss.threads, omp_set_num_threads=lambda n: setattr(faiss, "threads", n)))
    return torch, faiss


def test_native_pools_are_cut_to_the_usable_cpus_never_raised(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(machine, "usable_cpus", lambda root="/": 2)
    torch, faiss = _fake_pools(monkeypatch, 64, 64)
    assert machine.cap_native_threads() == 2
    assert (torch.threads, faiss.threads) == (2, 2)
    torch, faiss = _fake_pools(monkeypatch, 1, 1)  # fewer than the CPUs (the suite's OMP_NUM_THREADS=1): kept
    machine.cap_native_threads()
    assert (torch.threads, faiss.threads) == (1, 1)


def test_omp_num_threads_set_by_the_user_is_left_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "48")
    monkeypatch.setattr(machine, "usable_cpus", lambda root="/": 2)
    torch, faiss = _fake_pools(monkeypatch, 48, 48)
    machine.cap_native_threads()
    assert (torch.threads, faiss.threads) == (48, 48)


def _per_thread_faiss(default: int):
    """A faiss whose OpenMP count is per thread, as OpenMP's is: a new thread starts from `default`."""
    import threading

    local = threading.local()
    return types.SimpleNamespace(omp_get_max_threads=lambda: getattr(local, "n", default),
                                 omp_set_num_threads=lambda n: setattr(local, "n", n))


def test_each_searching_thread_caps_its_own_faiss_pool_once(monkeypatch):
    import threading

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    counted = []
    monkeypatch.setattr(machine, "usable_cpus", lambda root="/": counted.append(1) or 2)
    faiss = _per_thread_faiss(64)
    seen = {}

    def search(name):
        machine.cap_faiss_in_this_thread(faiss)
        machine.cap_faiss_in_this_thread(faiss)  # once per thread: the quota is not read again
        seen[name] = faiss.omp_get_max_threads()

    threads = [threading.Thread(target=search, args=(f"t{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
        thread.join()
    assert seen == {"t0": 2, "t1": 2, "t2": 2} and len(counted) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # the user's choice: left alone
    thread = threading.Thread(target=search, args=("user",))
    thread.start()
    thread.join()
    assert seen["user"] == 64


def test_onnx_sessions_use_the_usable_cpus(monkeypatch, tmp_path):
    """The onnxruntime encoder's intra-op pool: the usable CPUs, not the host's `os.cpu_count()`; a count given
    is kept."""
    from ragzoo.retrieval import onnx_embed

    made = []

    class Options:
        pass

    class Session:
        def __init__(self, path, options, providers):
            made.append(options)

        def get_inputs(self):
            return []

    fake = types.SimpleNamespace(SessionOptions=Options, InferenceSession=Session,
                                 GraphOptimizationLevel=types.SimpleNamespace(ORT_ENABLE_ALL=99))
    monkeypatch.setattr(onnx_embed, "_require_onnx", lambda: fake)
    monkeypatch.setattr(onnx_embed, "_check_pipeline", lambda model: None)
    monkeypatch.setattr(onnx_embed, "export_files", lambda model, identity: (tmp_path / "a", tmp_path / "b"))
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(machine, "usable_cpus", lambda root="/": 3)
    model = types.SimpleNamespace(tokenizer=None, max_seq_length=128)
    onnx_embed.OnnxEncoder(model, "m", "onnx")
    onnx_embed.OnnxEncoder(model, "m", "onnx", threads=5)
    assert [options.intra_op_num_threads for options in made] == [3, 5]
