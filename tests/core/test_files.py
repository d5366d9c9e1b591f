"""The one atomic-write routine: whole files or none, folders swapped with no gap, modes that follow the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ragzoo import files

REPO = Path(__file__).resolve().parents[2]


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a.json"
    files.atomic_write_json(target, {"x": 1})
    files.atomic_write_json(target, {"x": 2})
    assert target.read_text() == '{\n  "x": 2\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_replace_dir_swaps_in_the_new_folder_and_drops_the_old(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    staging = files.staging_dir(final)
    (staging / "new.txt").write_text("new")
    files.replace_dir(staging, final)
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, no backup left behind


def test_replace_dir_puts_the_old_folder_back_when_the_swap_fails(tmp_path, monkeypatch):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    staging = files.staging_dir(final)
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(src) == staging:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        files.replace_dir(staging, final)
    assert (final / "old.txt").read_text() == "old"
    files.discard_dir(staging)  # as a failed build's caller does: its lock is let go
    assert str(staging) not in files._HELD


def _modes_under_umask(umask: int, tmp_path: Path) -> tuple[int, int]:
    code = (f"import os; os.umask({umask:#o})\n"
            "from pathlib import Path\nfrom ragzoo import files\n"
            f"target = Path({str(tmp_path)!r}) / 'run'\n"
            "staging = files.staging_dir(target)\n"
            "files.atomic_write_json(staging / 'config.json', {})\n"
            "files.replace_dir(staging, target)\n"
            "print(oct(target.stat().st_mode & 0o777), oct((target / 'config.json').stat().st_mode & 0o777))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    folder, file = out.stdout.split()
    return int(folder, 8), int(file, 8)


@pytest.mark.parametrize("umask, expected", [(0o022, (0o755, 0o644)), (0o002, (0o775, 0o664)),
                                             (0o077, (0o700, 0o600))])
def test_modes_follow_the_umask(tmp_path, umask, expected):
    assert _modes_under_umask(umask, tmp_path) == expected
