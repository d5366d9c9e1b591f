"""Two storage workers started together: the second reads the cells' states from disk, then joins the study; a
cell the first worker completes in between is done, and must not be enqueued again (it was: a second claim on a
finished cell, run as an empty resume and counted complete twice, seen in CI under load)."""

import datetime

import pytest

from ragzoo.grid.runner import OptunaClaims

optuna = pytest.importorskip("optuna")


def _waiting_keys(claims):
    from optuna.trial import TrialState

    return sorted(claims._key_of(t) for t in claims.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _first_worker_completes(url, key):
    first = OptunaClaims(url, "race", ["x", "y"])
    while True:
        got, trial = first.next()
        if got == key:
            first.done(trial, ok=True)
            return first
        first.done(trial, ok=False, requeue=True)


def test_a_cell_completed_after_the_second_worker_read_the_disk_is_not_enqueued_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    read_at = datetime.datetime.now()  # the second worker reads the disk: x and y not done yet
    _first_worker_completes(url, "x")
    second = OptunaClaims(url, "race", ["x", "y"], keys_as_of=read_at)
    assert _waiting_keys(second) == ["y"]


def test_a_cell_completed_before_the_disk_was_read_and_not_done_there_is_enqueued_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    _first_worker_completes(url, "x")
    read_at = datetime.datetime.now()  # x's claim completed, yet its run is not done on disk (removed): run it again
    second = OptunaClaims(url, "race", ["x", "y"], keys_as_of=read_at)
    assert _waiting_keys(second) == ["x", "y"]
