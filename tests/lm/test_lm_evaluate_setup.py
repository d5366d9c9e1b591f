"""A run's set-up is CPU the throughput benchmark counts whatever the run's size (~0.1 ms an fsync, ~3 ms of wall time
on this machine's disk): the run folder is synced by each atomic write into it, not once more."""

from __future__ import annotations

import dspy

from ragzoo.runs import evaluate
from ragzoo.testing import AnswerQuestion as Answer
from ragzoo.testing import ScriptedLM
from ragzoo.testing import make_examples as _examples


def test_a_run_folder_is_fsynced_once_per_file_written_into_it(tmp_path, monkeypatch):
    """Marker, config, summary: three atomic writes, three syncs of the folder (a fourth followed the config's)."""
    from ragzoo import files, runs

    synced = []
    real = files.fsync_dir
    monkeypatch.setattr(files, "fsync_dir", lambda path: synced.append(str(path)) or real(path))
    monkeypatch.setattr(runs, "fsync_dir", lambda path: synced.append(str(path)) or real(path), raising=False)
    out = tmp_path / "run"
    with dspy.context(lm=ScriptedLM(default={"answer": "y"})):
        summary = evaluate(Answer(), _examples(3), "em", out, progress=False)
    assert summary["n"] == 3 and (out / "summary.json").exists() and (out / "config.json").exists()
    assert synced.count(str(out)) == 3, synced
