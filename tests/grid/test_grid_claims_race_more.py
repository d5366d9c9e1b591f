"""More of the one rule of `OptunaClaims._to_run` (test_grid_claims_race.py): a cell this worker read as not done
but complete on disk by the time it is popped or requeued is never run again, whoever put its claim in the queue;
and `sweep --storage` gives the claims the disk's state as it is now."""

from __future__ import annotations

import pytest

from ragzoo.grid.runner import OptunaClaims
from tests.grid.test_grid_claims_race import _run_all

optuna = pytest.importorskip("optuna")


def test_a_waiting_claim_on_a_cell_done_on_disk_since_the_worker_read_it_is_not_run(tmp_path):
    """x was not done when this worker read the disk (so it is one of its keys), a claim for x waits in the queue
    (put there by another worker), and x is complete on disk when it is popped: told, not run as an empty resume."""
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    OptunaClaims(url, "race", ["x", "y"])  # another worker: a claim on x and one on y wait
    disk = {"x": False, "y": False}
    second = OptunaClaims(url, "race", ["x", "y"], done_on_disk=disk.get)
    disk["x"] = True  # x finished on disk by a worker that died before telling the study
    assert _run_all(second, disk) == ["y"]


def test_a_rerun_does_not_requeue_a_cell_done_on_disk_since_it_was_read(tmp_path):
    """A claim on x ended without being told done (its worker failed it); x is complete on disk when the rerun
    joins, though not when it read the disk: no new claim on x."""
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'grid.db'}"
    first = OptunaClaims(url, "race", ["x", "y"])
    while True:
        key, trial = first.next()
        first.done(trial, ok=False)  # failed, not requeued: each cell's last claim ended without the cell done
        if key == "y":
            break
    disk = {"x": True, "y": False}
    second = OptunaClaims(url, "race", ["x", "y"], done_on_disk=disk.get)
    waiting = [second._key_of(t) for t in second.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    assert waiting == ["y"]


def test_sweep_gives_the_claims_the_disks_state_now(tmp_path, monkeypatch, capsys):
    """The runner's done_on_disk answers from the cells' folders when asked, not from what it read at start."""
    from ragzoo.cli import main
    from ragzoo.grid import runner

    seen = {}

    class Recording(OptunaClaims):
        def __init__(self, *args, **kwargs):
            seen["done_on_disk"] = kwargs.get("done_on_disk")
            seen["keys"] = list(args[2])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runner, "OptunaClaims", Recording)
    grid = tmp_path / "g.toml"
    grid.write_text('[grid]\nname = "tiny"\nn = 1\nlms = ["dry-run"]\nmain = "direct"\n\n[[datasets]]\n'
                    'name = "hotpotqa"\nsplit = "dev_first500"\nmetrics = ["em"]\n\n[[methods]]\nid = "direct"\n',
                    encoding="utf-8")
    code = main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--storage",
                 f"sqlite:///{tmp_path / 'grid.db'}", "--quiet"])
    assert code == 0, capsys.readouterr().err
    done_on_disk = seen["done_on_disk"]
    assert seen["keys"] and callable(done_on_disk)
    assert all(done_on_disk(key) for key in seen["keys"])  # every cell finished on disk by now
    assert not done_on_disk("no-such-cell")
    import shutil

    shutil.rmtree(tmp_path / "out")  # the cells' runs gone (removed by the user): not done, whatever was read
    assert not any(done_on_disk(key) for key in seen["keys"])
