"""What a process in another PID namespace looks like from here (a second container sharing the folder): a PID
that is no process, and a lock it holds on a file or folder (`ragzoo.files.in_use`)."""

from __future__ import annotations

import contextlib
import subprocess
import sys


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@contextlib.contextmanager
def held_elsewhere(path):
    """`path` (a file or a folder) locked by another process until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()
