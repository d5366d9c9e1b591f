"""Run directories and artifacts follow the user's umask (a shared filesystem needs group-readable runs);
nothing secret is ever written to them, so there is no reason to shut colleagues out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(commands: list[list[str]], umask: int) -> None:
    """Run ragzoo commands one after the other in one process started under `umask`."""
    code = (f"import os, sys; os.umask({umask:#o}); from ragzoo.cli import main\n"
            f"for argv in {commands!r}:\n    assert main(argv) == 0, argv")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True, text=True,
                   env={**os.environ, "RAGZOO_DEBUG": "1"})


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("umask, folder, file", [(0o002, 0o775, 0o664)])  # group-writable: not what tempfile gives
def test_evaluate_and_compile_write_with_the_umask(tmp_path, umask, folder, file):
    run, artifact = tmp_path / "run", tmp_path / "artifact"
    _cli([["evaluate", "--method", "direct", "--lm", "dry-run", "--dataset", "hotpotqa", "--split", "dev_first500",
           "-n", "2", "--metric", "em", "--out", str(run)],
          ["compile", "--method", "direct", "--lm", "dry-run", "--dataset", "hotpotqa", "--optimizer", "labeled",
           "--train-n", "3", "--dev-n", "0", "--out", str(artifact)]], umask)
    assert _mode(run) == folder and _mode(artifact) == folder
    written = [run / "config.json", run / "predictions.jsonl", run / "summary.json",
               artifact / "manifest.json", artifact / "program.json"]
    assert {path.name: _mode(path) for path in written} == {path.name: file for path in written}
