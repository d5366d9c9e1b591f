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


def _run_all(claims, disk: dict) -> list[str]:
    """A worker runs every cell it still gets (each done on disk as it ends); the keys in the order it ran them."""
    ran = []
    while True:
        key, trial = claims.next()
        if key is None:
            return ran
        ran.append(key)
        disk[key] = True
        claims.done(trial, ok=True)


def _dead_pid() -> int:
    import subprocess
    import sys

    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


def _claim_of_a_worker_that_died_before_tell(url, key, how):
    """A first worker claims `key`, runs its cell to the end on disk, and dies before it tells the study: a process
    of this machine that is gone, or a worker of another machine whose heartbeat stopped."""
    import time

    from ragzoo.grid.runner import _process_space

    first = OptunaClaims(url, "race", ["x", "y"])
    while True:
        got, trial = first.next()
        if got == key:
            if how == "its process is gone":
                trial.set_user_attr("worker", f"{_process_space()}:{_dead_pid()}")
            else:
                trial.set_user_attr("worker", "another-machine:4242")
                first.heartbeat(trial)
                # until the storage holds the heartbeat stale (its clock: whole seconds on SQLite), not a fixed wait
                deadline = time.monotonic() + first.GRACE + 30
                while trial._trial_id not in first.storage._get_stale_trial_ids(first.study._study_id):
                    assert time.monotonic() < deadline, "the heartbeat never went stale"
                    time.sleep(0.05)
            return trial.number
        first.done(trial, ok=False, requeue=True)


def _states(url):
    from optuna.trial import TrialState

    study = optuna.load_study(study_name="race", storage=url)
    return sorted((OptunaClaims._key_of(t), t.state.name) for t in study.get_trials(deepcopy=False)
                  if t.state != TrialState.WAITING)


@pytest.mark.parametrize("how", ["its process is gone", "its heartbeat stopped"])
@pytest.mark.parametrize("found_by", ["a worker that joins", "a worker already running"])
def test_a_dead_workers_claim_on_a_cell_complete_on_disk_is_told_complete_not_run_again(tmp_path, monkeypatch,
                                                                                         found_by, how):
    """The second worker read the disk while x ran (x not done then), then x's worker finished x on disk and died
    before `tell`: x is done (told complete, once), not requeued to be run again as an empty resume."""
    monkeypatch.setenv("RAGZOO_GRID_HEARTBEAT", "1")
    monkeypatch.setenv("RAGZOO_GRID_GRACE", "1")
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    disk = {"x": False, "y": False}
    read_at = datetime.datetime.now()
    if found_by == "a worker already running":  # it read the disk and joined before x's worker died
        second = OptunaClaims(url, "race", ["x", "y"], keys_as_of=read_at, done_on_disk=disk.get)
    number = _claim_of_a_worker_that_died_before_tell(url, "x", how)
    disk["x"] = True  # the dead worker's cell is complete on disk
    if found_by == "a worker that joins":
        second = OptunaClaims(url, "race", ["x", "y"], keys_as_of=read_at, done_on_disk=disk.get)
    assert _run_all(second, disk) == ["y"]
    study = optuna.load_study(study_name="race", storage=url)
    assert study.trials[number].state.name == "COMPLETE"  # the dead worker's claim: its cell is done
    assert [state for key, state in _states(url) if key == "x"].count("COMPLETE") == 1
    assert [state for key, state in _states(url) if key == "y"].count("COMPLETE") == 1


def test_a_claim_from_another_pid_namespace_is_not_judged_by_a_pid_of_this_one(tmp_path):
    """PostgreSQL review: two containers on one host network share a host name, not their PIDs: a live worker's
    claim was failed at once by the other, whose namespace has no such PID; and the owner, ending its claim later,
    crashed on "Cannot tell a FAIL trial"."""
    import socket

    from optuna.trial import TrialState

    from ragzoo.grid.runner import _process_space

    import os

    assert _process_space() == f"{socket.gethostname()}/pidns-{os.stat('/proc/self/ns/pid').st_ino}"
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    first = OptunaClaims(url, "race", ["x", "y"])
    key, trial = first.next()
    trial.set_user_attr("worker", f"{socket.gethostname()}/pidns-1:{_dead_pid()}")  # another namespace's PID
    second = OptunaClaims(url, "race", ["x", "y"])
    second._fail_dead_claims()
    assert optuna.load_study(study_name="race", storage=url).trials[trial.number].state == TrialState.RUNNING
    trial.set_user_attr("worker", f"{_process_space()}:{_dead_pid()}")  # this namespace's, gone: failed at once
    second._fail_dead_claims()
    assert optuna.load_study(study_name="race", storage=url).trials[trial.number].state != TrialState.RUNNING
    first.done(trial, ok=True)  # its owner ends it after all: no crash, the claim keeps the state it was given


def test_a_cell_queued_twice_is_run_by_its_earlier_claim_only(tmp_path, monkeypatch):
    """PostgreSQL review: workers rerunning a grid at the same moment each enqueued the unfinished cells, and both
    ran both cells (6 claims for 2 cells; one refused by the run lock, both exit 1)."""
    import threading
    import time

    from optuna.trial import TrialState

    monkeypatch.setenv("RAGZOO_GRID_HEARTBEAT", "1")
    monkeypatch.setenv("RAGZOO_GRID_GRACE", "30")
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    disk = {"x": False, "y": False}
    first = OptunaClaims(url, "race", ["x", "y"], done_on_disk=disk.get)
    first.study.enqueue_trial({"cell": "x"})  # the second worker's copy of an unfinished cell
    second = OptunaClaims(url, "race", ["x", "y"], done_on_disk=disk.get)
    key, running = first.next()
    assert key == "x"

    def finish_x():  # once the second worker has met the copy (not after a fixed sleep: CI under load was slower)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ("x", TrialState.PRUNED) not in [
                (second._key_of(t), t.state) for t in optuna.load_study(study_name="race", storage=url).trials]:
            time.sleep(0.1)
        disk["x"] = True
        first.done(running, ok=True)

    threading.Thread(target=finish_x, daemon=True).start()
    assert _run_all(second, disk) == ["y"]
    states = [(second._key_of(t), t.state) for t in optuna.load_study(study_name="race", storage=url).trials]
    assert states.count(("x", TrialState.COMPLETE)) == 1 and ("x", TrialState.PRUNED) in states


def test_a_worker_waiting_on_other_workers_cells_stops_when_told(tmp_path):
    """Grid review: a --parallel worker waiting on a cell another worker ran slept in one-second turns until that
    cell ended (half a minute, or hours), Ctrl-C notwithstanding: its thread sees the stop only through `stop`."""
    import threading
    import time

    url = f"sqlite:///{tmp_path / 'grid.db'}"
    first = OptunaClaims(url, "race", ["x"])
    key, _running = first.next()  # another worker's cell, running, heartbeats on: nothing for the second
    assert key == "x"
    second = OptunaClaims(url, "race", ["x"])
    stop, got = threading.Event(), []
    waiter = threading.Thread(target=lambda: got.append(second.next(stop)), daemon=True)
    waiter.start()
    time.sleep(1.5)
    assert waiter.is_alive()  # waiting: the cell may come back if its worker dies
    stop.set()
    waiter.join(10)
    assert got == [(None, None)]


def test_a_storage_lost_mid_grid_is_one_line_that_says_what_is_kept(tmp_path, monkeypatch):
    """Grid review: PostgreSQL stopped mid-grid gave "internal error: StorageInternalError: ... e.g. exceeding max
    length", exit 1, and no word of resuming."""
    from sqlalchemy.exc import OperationalError

    from ragzoo.errors import RunError

    url = f"sqlite:///{tmp_path / 'grid.db'}"
    claims = OptunaClaims(url, "race", ["x", "y"])
    key, trial = claims.next()

    def lost(*args, **kwargs):
        raise OperationalError("SELECT ...", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(claims.study, "get_trials", lost)
    monkeypatch.setattr(claims.study, "tell", lost)
    from ragzoo.grid.runner import _storage_lost

    silent = OperationalError("SELECT ...", {}, ConnectionError())  # a cause with no message (diff review: IndexError)
    assert "storage failed (OperationalError: ConnectionError)" in str(_storage_lost(silent))
    for step in (claims.next, lambda: claims.done(trial, ok=True)):
        with pytest.raises(RunError) as refused:
            step()
        said = str(refused.value)
        assert "storage failed (OperationalError:" in said and "server closed the connection" in said
        assert "the same command resumes the grid" in said and "\n" not in said


def test_ctrl_c_between_the_pop_and_the_run_puts_the_cell_back_for_the_others(tmp_path, monkeypatch):
    """Grid review: Ctrl-C inside `next` after the storage popped a waiting claim failed it without putting its cell
    back: the workers still running never got the cell, and their table was partial."""
    from optuna.trial import Trial

    url = f"sqlite:///{tmp_path / 'grid.db'}"
    stopped = OptunaClaims(url, "race", ["x"])
    other = OptunaClaims(url, "race", ["x"])

    def interrupted(self, key, value):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Trial, "set_user_attr", interrupted)
        with pytest.raises(KeyboardInterrupt):
            stopped.next()
    key, trial = other.next()
    assert key == "x" and trial is not None
