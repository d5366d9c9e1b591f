"""Running a grid: every cell is an ordinary `ragzoo compile` (when the grid compiles) + `ragzoo evaluate` run
directory under `OUT/cells/<cell key>/` (`artifact/` and `run/`), written by the very commands a user types, so
`ask` and `report` work on any cell.

- Resumable at every level: a cell whose run is complete is never touched; a half-finished run resumes from
  its predictions.jsonl (`evaluate --resume`: an example already written is never run again); a compile cut
  short left no artifact (artifacts are swapped in atomically) and is redone.
- `--parallel N`: N cells at a time in threads of this process (each command's output goes to the cell's
  `log.txt`; the terminal shows one progress view).
- `--max-cost`: a budget for the whole grid: each cell gets what is left (split between the cells running),
  counted from what the cells on disk have spent.
- `--storage URL`: an Optuna storage (sqlite:///grid.db, postgresql://..., or journal:PATH) shared by N workers
  started with the same command: each cell is an enqueued trial, popped by exactly one worker (Optuna's
  storage does the claiming); a worker that dies stops sending heartbeats and its cell is re-enqueued.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ragzoo.errors import ConfigError
from ragzoo.grid.spec import Cell, Grid

GRID_FILE = "grid.json"
CELLS_DIR = "cells"


def cell_dir(out: Path, cell: Cell) -> Path:
    return Path(out) / CELLS_DIR / cell.key


def runnable(cell: Cell) -> str | None:
    """None when the cell can run, else why not (a method id ragzoo does not have yet)."""
    from ragzoo import programs

    if cell.method.id not in programs.methods():
        return f"not yet runnable: method {cell.method.id!r} is not in ragzoo (see ragzoo methods)"
    return None


def cell_state(out: Path, cell: Cell) -> dict:
    """What is on disk for a cell: done / partial / absent, examples written, spend."""
    from ragzoo.runs import CONFIG_FILE, PREDICTIONS_FILE, SUMMARY_FILE, read_predictions

    base = cell_dir(out, cell)
    run = base / "run"
    state = {"key": cell.key, "status": "absent", "done": 0, "cost": 0.0, "lm_calls": 0}
    artifact = base / "artifact" / "manifest.json"
    if artifact.is_file():
        try:
            manifest = json.loads(artifact.read_text(encoding="utf-8"))
            state["cost"] += float(manifest.get("cost") or 0.0)
            state["lm_calls"] += int((manifest.get("usage") or {}).get("lm_calls") or 0)
        except (OSError, ValueError):
            pass
    if (run / CONFIG_FILE).is_file():
        records = read_predictions(run / PREDICTIONS_FILE)
        state["done"] = len(records)
        state["cost"] += sum(float(r.get("cost") or 0) for r in records)
        state["lm_calls"] += sum(int(r.get("lm_calls") or 0) for r in records)
        state["status"] = "partial"
        if (run / SUMMARY_FILE).is_file():
            try:
                summary = json.loads((run / SUMMARY_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                summary = {}
            if summary.get("complete") and not summary.get("stopped") and summary.get("n") == len(records):
                state["status"] = "done"
    return state


# ---------------------------------------------------------------------------------------------------------
# output routing: each cell's commands print into its log; the main thread keeps the terminal

_CELL_LOG_KEY = "ragzoo_cell_log"


class _Router(io.TextIOBase):
    def __init__(self, default):
        self.default = default
        self.targets: dict[int, io.TextIOBase] = {}

    def _target(self):
        target = self.targets.get(threading.get_ident())
        if target is None:
            # a worker thread a cell started (its evaluate's threads): DSPy's executor hands them the cell
            # thread's settings, which name the cell's log
            import dspy

            target = dspy.settings.get(_CELL_LOG_KEY, None)
        return target if target is not None else self.default

    def write(self, text):
        return self._target().write(text)

    def flush(self):
        self._target().flush()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return getattr(self.default, "encoding", "utf-8")


@contextlib.contextmanager
def _routed():
    out, err = sys.stdout, sys.stderr
    router_out, router_err = _Router(out), _Router(err)
    sys.stdout, sys.stderr = router_out, router_err
    try:
        yield router_out, router_err
    finally:
        sys.stdout, sys.stderr = out, err


@contextlib.contextmanager
def _cell_log(routers, path: Path):
    if routers is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as log:
        ident = threading.get_ident()
        for router in routers:
            router.targets[ident] = log
        try:
            import dspy

            with dspy.context(**{_CELL_LOG_KEY: log}):
                yield
        finally:
            for router in routers:
                router.targets.pop(ident, None)


# ---------------------------------------------------------------------------------------------------------
# the commands of one cell

def _common_args(cell: Cell, lm_spec: str, api_base: str | None) -> list[str]:
    args = ["--lm", lm_spec, "--seed", str(cell.grid.seed)]
    if api_base:
        args += ["--api-base", api_base]
    if not cell.lm.cache:
        args.append("--no-cache")
    if cell.grid.max_concurrency:
        # the limiter is per endpoint and per process: every cell of this sweep shares it
        args += ["--max-concurrency", str(cell.grid.max_concurrency)]
    if cell.retriever:
        args += ["--retriever", cell.retriever]
    return args


def _knob_args(cell: Cell) -> list[str]:
    args = []
    for name, value in sorted(cell.knobs.items()):
        text = json.dumps(value) if isinstance(value, bool) else str(value)
        args += ["--knob", f"{name}={text}"]
    return args


def compile_argv(cell: Cell, out: Path, max_cost: float | None = None) -> list[str]:
    dataset = cell.dataset
    argv = ["compile", "--method", cell.method.id, "--dataset", dataset.name, "--optimizer", cell.optimizer,
            "--train-n", str(cell.grid.train_n), "--dev-n", str(cell.grid.dev_n), "--out", str(out), "--force",
            *_knob_args(cell), *_common_args(cell, cell.lm.spec, cell.lm.api_base)]
    if dataset.metrics:
        argv += ["--metric", dataset.metrics[0]]
    if max_cost is not None:
        argv += ["--max-cost", f"{max_cost:.6f}"]
    return argv


def evaluate_argv(cell: Cell, run: Path, artifact: Path | None, n: int | None, resume: bool,
                  max_cost: float | None = None) -> list[str]:
    dataset = cell.dataset
    argv = ["evaluate", "--dataset", dataset.name, "--out", str(run), "--threads", str(cell.grid.threads),
            *_common_args(cell, cell.lm.spec, cell.lm.api_base)]
    # a grid never scores a program on questions it was compiled on
    argv += ["--program", str(artifact), "--refuse-leakage"] if artifact is not None \
        else ["--method", cell.method.id, *_knob_args(cell)]
    if dataset.split:
        argv += ["--split", dataset.split]
    if n is not None:
        argv += ["-n", str(n)]
    if dataset.metrics:
        argv += ["--metric", ",".join(dataset.metrics)]
    if resume:
        argv.append("--resume")
    if max_cost is not None:
        argv += ["--max-cost", f"{max_cost:.6f}"]
    return argv


def run_cell(cell: Cell, out: Path, *, max_cost: float | None = None) -> dict:
    """Compile (if the grid compiles and no artifact is there) and evaluate (resuming) one cell, in process,
    through the same code paths as `ragzoo compile` / `ragzoo evaluate`. Returns the cell's state."""
    from ragzoo.cli import main as ragzoo_main
    from ragzoo.runs import CONFIG_FILE

    base = cell_dir(out, cell)
    base.mkdir(parents=True, exist_ok=True)
    state = cell_state(out, cell)
    if state["status"] == "done":
        return {**state, "exit": 0, "skipped": True}
    artifact = None
    if cell.optimizer != "none":
        artifact = base / "artifact"
        if not (artifact / "manifest.json").is_file():
            code = ragzoo_main(compile_argv(cell, artifact, max_cost))
            if code != 0 or not (artifact / "manifest.json").is_file():
                return {**cell_state(out, cell), "exit": code or 1, "stage": "compile"}
            if max_cost is not None:
                max_cost = max(0.0, max_cost - cell_state(out, cell)["cost"])
    run = base / "run"
    resume = (run / CONFIG_FILE).is_file()
    code = ragzoo_main(evaluate_argv(cell, run, artifact, cell.n, resume, max_cost))
    return {**cell_state(out, cell), "exit": code, "stage": "evaluate"}


# ---------------------------------------------------------------------------------------------------------
# claiming cells: local (this process) or through an Optuna storage shared by workers

class LocalClaims:
    def __init__(self, keys: list[str]):
        self._keys = list(keys)
        self._lock = threading.Lock()

    def next(self):
        with self._lock:
            return (self._keys.pop(0), None) if self._keys else (None, None)

    def done(self, token, ok: bool) -> None:
        pass

    def heartbeat(self, token) -> None:
        pass


@contextlib.contextmanager
def _file_lock(url: str):
    """For a SQLite storage, workers on this machine create its schema and the grid's study one at a time (a
    kernel lock beside the database file); other databases handle that themselves (we retry)."""
    if not url.startswith("sqlite:///"):
        yield
        return
    import fcntl

    path = Path(url[len("sqlite:///"):].partition("?")[0] + ".ragzoo-lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class OptunaClaims:
    """Each cell is an enqueued Optuna trial; `study.ask()` pops a waiting trial atomically in the storage, so
    each cell is claimed by exactly one worker. Heartbeats mark the running claims; a claim whose worker died
    goes stale and `RetryFailedTrialCallback` enqueues it again."""

    HEARTBEAT = 5
    GRACE = 30

    def __init__(self, url: str, study_name: str, keys: list[str], *, wait: float = 60.0):
        import warnings

        import optuna
        from optuna.distributions import CategoricalDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # heartbeats and their retry callback are marked experimental by Optuna; they are what we rely on
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # we drive heartbeats ourselves (record_heartbeat while a cell runs), not through Study.optimize
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        self._optuna = optuna
        self._keys = list(keys)
        self._distributions = {"cell": CategoricalDistribution(self._keys or ["-"])}
        self._lock = threading.Lock()
        self.storage = self._storage(url)
        try:
            with _file_lock(url):
                self.study = optuna.create_study(storage=self.storage, study_name=study_name)
                for key in self._keys:
                    self.study.enqueue_trial({"cell": key})
                self.study.set_user_attr("seeded", len(self._keys))
        except optuna.exceptions.DuplicatedStudyError:
            self.study = optuna.load_study(storage=self.storage, study_name=study_name)
            deadline = time.monotonic() + wait
            while "seeded" not in self.study.user_attrs:
                if time.monotonic() > deadline:
                    raise ConfigError(f"the grid's study {study_name!r} in the storage was never filled (did its "
                                      f"first worker die while enqueueing?); delete the study or use a new storage")
                time.sleep(0.2)
            self._requeue_unfinished()

    def _storage(self, url: str):
        from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback

        if url.startswith("journal:"):
            from optuna.storages.journal import JournalFileBackend

            return JournalStorage(JournalFileBackend(url[len("journal:"):]))
        transient = ("already exists", "locked", "UNIQUE constraint", "Duplicate", "duplicate key")
        for attempt in range(20):  # workers started together race to create the tables: the loser retries
            try:
                with _file_lock(url):
                    return RDBStorage(url, heartbeat_interval=self.HEARTBEAT, grace_period=self.GRACE,
                                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback())
            except Exception as error:  # noqa: BLE001 - sqlalchemy's errors of a schema created twice at once
                if attempt == 19 or not any(text in str(error) for text in transient):
                    raise
                time.sleep(0.1 + 0.05 * attempt)

    def _requeue_unfinished(self) -> None:
        """A rerun of the command: enqueue again the cells whose last claim ended (done/failed) while the cell is
        not done on disk (the caller passes only those keys) and no claim waits or runs for them."""
        from optuna.trial import TrialState

        live = set()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
            key = trial.params.get("cell") or (trial.system_attrs.get("fixed_params") or {}).get("cell")
            live.add(key)
        for key in self._keys:
            if key not in live:
                self.study.enqueue_trial({"cell": key})

    def next(self):
        from optuna.storages import fail_stale_trials
        from optuna.trial import TrialState

        while True:
            with self._lock:
                with contextlib.suppress(Exception):
                    fail_stale_trials(self.study)  # a dead worker's cell goes back to the queue
                if not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                    beats = getattr(self.storage, "get_heartbeat_interval", lambda: None)()
                    # without heartbeats (journal storage) a dead worker's claim would never come back: stop
                    if not beats or not self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                        return None, None
                    running = True
                else:
                    running = False
            if running:  # other workers still run cells: wait, in case one dies and its cell comes back
                time.sleep(1.0)
                continue
            with self._lock:
                trial = self.study.ask(self._distributions)
                attrs = self.storage.get_trial_system_attrs(trial._trial_id)
                if "fixed_params" not in attrs:  # another worker popped the last waiting claim
                    self.study.tell(trial, state=TrialState.PRUNED)
                    continue
                key = trial.params["cell"]
                with contextlib.suppress(Exception):  # who ran which cell, for the record
                    import socket

                    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
                if key not in self._keys:  # a cell this worker does not know (another grid file?)
                    self.study.tell(trial, state=TrialState.FAIL)
                    continue
                return key, trial

    def heartbeat(self, trial) -> None:
        if trial is not None and hasattr(self.storage, "record_heartbeat"):
            with contextlib.suppress(Exception):
                self.storage.record_heartbeat(trial._trial_id)

    def done(self, trial, ok: bool) -> None:
        from optuna.trial import TrialState

        if trial is None:
            return
        with self._lock:
            if ok:
                self.study.tell(trial, 0.0)
            else:
                self.study.tell(trial, state=TrialState.FAIL)


def study_name(grid: Grid, cells: list[Cell]) -> str:
    import hashlib

    digest = hashlib.sha256("\n".join(sorted(c.key for c in cells)).encode()).hexdigest()[:12]
    return f"ragzoo-grid:{grid.name}:{digest}"


# ---------------------------------------------------------------------------------------------------------
# the sweep

@dataclass
class SweepResult:
    states: dict[str, dict] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None


def write_grid_file(grid: Grid, out: Path, cells: list[Cell]) -> None:
    from ragzoo.files import atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    record = {"name": grid.name, "title": grid.title, "source": grid.source, "paper": grid.paper,
              "n": grid.n, "seed": grid.seed, "optimizers": grid.optimizers,
              "lms": [{"spec": lm.spec, "api_base": lm.api_base} for lm in grid.lms],
              "cells": [{"key": c.key, "method": c.method.id, "label": c.method.label, "knobs": c.knobs,
                         "dataset": c.dataset.name, "split": c.dataset.split, "optimizer": c.optimizer,
                         "lm": c.lm.spec} for c in cells]}
    path = out / GRID_FILE
    if path.is_file():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        if previous.get("name") not in (None, grid.name):
            raise ConfigError(f"{out} holds grid {previous.get('name')!r}, not {grid.name!r}; choose another --out")
        if previous == record:
            return
    atomic_write_json(path, record)


def sweep(grid: Grid, out: str | os.PathLike, *, parallel: int = 1, max_cost: float | None = None,
          storage: str | None = None, progress=None, quiet_cells: bool = True) -> SweepResult:
    out = Path(out)
    if parallel < 1:
        raise ConfigError("--parallel must be at least 1")
    if max_cost is not None and max_cost < 0:
        raise ConfigError("--max-cost must be positive")
    if not grid.lms:
        raise ConfigError("the grid names no LM; pass --lm SPEC (or add lms = [...] under [grid])")
    cells = grid.cells()
    write_grid_file(grid, out, cells)
    result = SweepResult()
    todo = []
    for cell in cells:
        reason = runnable(cell)
        if reason:
            result.skipped[cell.key] = reason
            continue
        state = cell_state(out, cell)
        result.states[cell.key] = state
        if state["status"] != "done":
            todo.append(cell)
    by_key = {cell.key: cell for cell in todo}
    claims = (OptunaClaims(storage, study_name(grid, cells), [c.key for c in todo]) if storage
              else LocalClaims([c.key for c in todo]))
    lock = threading.Lock()
    running: set[str] = set()
    stop = threading.Event()

    def spent() -> float:
        return sum(cell_state(out, cell)["cost"] for cell in cells if cell.key not in result.skipped)

    def report():
        if progress is not None:
            with lock:
                states = {key: result.states.get(key, {}) for key in result.states}
                progress(states, set(running), len(cells) - len(result.skipped), spent())

    def worker(routers):
        while not stop.is_set():
            key, token = claims.next()
            if key is None:
                return
            cell = by_key[key]
            budget = None
            if max_cost is not None:
                left = max_cost - spent()
                if left <= 0:
                    result.stopped = f"grid budget --max-cost {max_cost} reached"
                    claims.done(token, False)
                    stop.set()
                    return
                budget = left / max(1, parallel)
            with lock:
                running.add(key)
            beat = threading.Event()

            def heartbeat():
                while not beat.wait(OptunaClaims.HEARTBEAT):
                    claims.heartbeat(token)

            beater = threading.Thread(target=heartbeat, daemon=True)
            beater.start()
            try:
                with _cell_log(routers, cell_dir(out, cell) / "log.txt"):
                    claims.heartbeat(token)
                    state = run_cell(cell, out, max_cost=budget)
            except Exception as error:  # noqa: BLE001 - one cell's failure must not end the grid
                state = {**cell_state(out, cell), "exit": 1, "error": f"{type(error).__name__}: {error}"}
            finally:
                beat.set()
            ok = state.get("status") == "done"
            with lock:
                running.discard(key)
                result.states[key] = state
                if not state.get("skipped"):
                    result.ran.append(key)
                if not ok:
                    if state.get("exit") == 3:
                        result.stopped = result.stopped or "budget reached inside a cell"
                        stop.set()
                    result.failed[key] = state.get("error") or f"exit {state.get('exit')} in {state.get('stage')}"
            claims.done(token, ok)
            report()

    report()
    routers = None
    with (_routed() if quiet_cells else contextlib.nullcontext()) as routers:
        if parallel == 1:
            worker(routers)
        else:
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                for future in [pool.submit(worker, routers) for _ in range(parallel)]:
                    future.result()
    for cell in cells:  # cells done by other workers (shared storage) count too
        if cell.key not in result.skipped:
            result.states[cell.key] = cell_state(out, cell)
    return result
