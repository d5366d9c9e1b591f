"""Running a grid: every cell is an ordinary `ragzoo compile` (when the grid compiles) + `ragzoo evaluate` run
directory under `OUT/cells/<cell key>/` (`artifact/` and `run/`), written by the very commands a user types, so
`ask` and `report` work on any cell.

- Resumable at every level: a cell whose run is complete is never touched; a half-finished run resumes from
  its predictions.jsonl (`evaluate --resume`: an example already written is never run again); a compile cut
  short left no artifact (artifacts are swapped in atomically) and is redone; one its budget stopped saved what
  it had, marked stopped, and is continued from its checkpoint (`compile --resume`), never evaluated as whole.
- `--parallel N`: N cells at a time in threads of this process (each command's output goes to the cell's
  `log.txt`; the terminal shows one progress view). `--processes P`: each cell's evaluation runs in P worker
  processes (`evaluate --processes`), forked from the cell's thread: one interpreter spends ~3-6 ms of CPU per
  LM call, so past ~32 requests in flight the requests need more than one.
- `--max-concurrency N`: one limit per endpoint for the whole grid on this machine: the requests in flight to
  an endpoint, summed over every cell running and every process of theirs (and `--storage` workers sharing OUT
  on this machine), never pass N, and stay near N while cells have questions left (`endpoints.share_limits`:
  N slot files under `OUT/.ragzoo-slots/<host>/`, locked with flock, so a killed process leaks no slot).
  Workers on several machines each keep N: the limit is per machine.
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
from dataclasses import dataclass, field
from pathlib import Path

from ragzoo.errors import ConfigError, RagzooError
from ragzoo.grid.spec import Cell, Grid
from ragzoo.storage import schema_lock

GRID_FILE = "grid.json"
CELLS_DIR = "cells"
SLOTS_DIR = ".ragzoo-slots"  # the machine's shared endpoint limits (`endpoints.share_limits`): empty lock files
GRID_ID_FILE = ".ragzoo-grid-id"  # this OUT's identity in a shared storage (`grid_identity`)
GRID_OUTPUTS = (GRID_FILE, CELLS_DIR, "results.md", "results.csv", "results.json", SLOTS_DIR,
                GRID_ID_FILE)  # all a grid writes


def cell_dir(out: Path, cell: Cell) -> Path:
    cells = Path(out) / CELLS_DIR
    path = cells / cell.key
    if path.is_symlink():  # a folder made when n was part of a cell's key, adopted by `adopt_legacy_dir`
        target = os.readlink(path)
        # the links ragzoo makes name this cell's folder of an earlier version: a sibling of its name's form, a
        # folder itself (not another link); any other leads out of the grid's folders
        if os.sep in target or not target.startswith(cell.key.rpartition("__")[0] + "__") \
                or (cells / target).is_symlink() or not (cells / target).is_dir():
            raise ConfigError(f"{path} is a symbolic link to {target}, not to this cell's own folder; ragzoo writes "
                              f"only into folders it made: remove the link")
        return cells / target
    if not path.exists():
        return _legacy_dir(cells, cell) or path
    return path


def _legacy_dir(cells: Path, cell: Cell) -> Path | None:
    """The folder of this cell made when n was part of its key (named with the n its run was started with)."""
    prefix = cell.key.rpartition("__")[0] + "__"
    try:
        entries = [entry for entry in cells.iterdir() if entry.name.startswith(prefix) and not entry.is_symlink()]
    except OSError:
        return None
    for entry in entries:
        try:
            n = json.loads((entry / "run" / "config.json").read_text(encoding="utf-8")).get("n")
        except (OSError, ValueError, AttributeError):
            n = cell.n
        if entry.name in (cell.legacy_key(n), cell.legacy_key(cell.n)):
            return entry
    return None


def adopt_legacy_dir(out: Path, cell: Cell) -> None:
    """Resume a cell folder made when n was part of a cell's key in place (its config.json names its artifact
    by that path): its current key becomes a link to it, before the run's n changes as it is extended."""
    cells = Path(out) / CELLS_DIR
    path = cells / cell.key
    if path.exists() or path.is_symlink():
        return
    legacy = _legacy_dir(cells, cell)
    if legacy is not None:
        with contextlib.suppress(FileExistsError):  # another worker adopted it first
            os.symlink(legacy.name, path)


def runnable(cell: Cell) -> str | None:
    """None when the cell can run, else why not (a method id ragzoo does not have yet)."""
    from ragzoo import programs

    if cell.method.id not in programs.methods():
        return f"not yet runnable: method {cell.method.id!r} is not in ragzoo (see ragzoo methods)"
    return None


def check_cells(cells: list[Cell]) -> None:
    """What each runnable cell will need, checked before any cell runs or the grid folder is written (ConfigError
    or DataError, one line): its knobs, optimizer, metrics, retriever spec, and its dataset split with at least
    the grid's n questions. A cell found wrong by its own run had failed after the cells before it were paid for."""
    from ragzoo import data, programs
    from ragzoo.metrics.scoring import resolve_metrics
    from ragzoo.optimizers import get_preset
    from ragzoo.retrieval.specs import check_spec

    sizes: dict[tuple, int] = {}
    for cell in cells:
        if runnable(cell):
            continue
        where = f"cell {cell.describe()}: "
        try:
            programs.resolve_knobs(cell.method.id, cell.knobs)
            get_preset(cell.optimizer)
            if cell.dataset.metrics:
                resolve_metrics(list(cell.dataset.metrics))
            if cell.retriever:
                check_spec(cell.retriever)
            split = (cell.dataset.name, cell.dataset.split)
            if split not in sizes:
                sizes[split] = data.split_size(*split)
        except RagzooError as error:
            raise ConfigError(f"{where}{error}") from None
        if cell.n is not None and cell.n > sizes[split]:
            raise ConfigError(f"{where}n = {cell.n}, but {cell.dataset.name}/{cell.dataset.split or 'default'} has "
                              f"{sizes[split]} questions; lower -n (or n under [grid])")


def needs_run(state: dict, retry_failed: bool = False) -> bool:
    """Whether a cell (its `cell_state`) is to be run: not done, or done with failed questions under
    `--retry-failed`. The one rule a sweep's queue, a shared storage's claims and `run_cell` all follow."""
    return state["status"] != "done" or (retry_failed and bool(state.get("failures")))


def cell_state(out: Path, cell: Cell) -> dict:
    """What is on disk for a cell: done / partial / absent, examples written (`done`) of `total` asked, spend."""
    from ragzoo.runs import CONFIG_FILE, PREDICTIONS_FILE, SUMMARY_FILE, extra_usage, read_predictions, usage_totals

    base = cell_dir(out, cell)
    run = base / "run"
    state = {"key": cell.key, "status": "absent", "done": 0, "total": cell.n, "cost": 0.0, "lm_calls": 0,
             "cached_calls": 0}
    artifact = base / "artifact" / "manifest.json"
    if artifact.is_file():
        try:
            manifest = json.loads(artifact.read_text(encoding="utf-8"))
            state["cost"] += float(manifest.get("cost") or 0.0)
            state["lm_calls"] += int((manifest.get("usage") or {}).get("lm_calls") or 0)
            state["cached_calls"] += int((manifest.get("usage") or {}).get("cached_calls") or 0)
        except (OSError, ValueError):
            pass
    if (run / CONFIG_FILE).is_file():
        records = read_predictions(run / PREDICTIONS_FILE)
        state["done"] = len(records)
        state["failures"] = sum(1 for r in records if r.get("error"))  # scored 0; `--retry-failed` asks them again
        # and what no record holds (retried, late and budget-cut calls, a rented server's time): paid all the same,
        # so the grid's budget counts it as each cell's evaluate --resume does
        unrecorded = extra_usage(run)
        paid = usage_totals(records, unrecorded)
        state["cost"] += paid["cost"] + float(unrecorded.get("server_cost") or 0)
        state["lm_calls"] += int(paid["lm_calls"])
        state["cached_calls"] += int(paid["cached_calls"])
        state["status"] = "partial"
        if (run / SUMMARY_FILE).is_file():
            try:
                summary = json.loads((run / SUMMARY_FILE).read_text(encoding="utf-8"))
                config = json.loads((run / CONFIG_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                summary, config = {}, {}
            if cell.n is None and config.get("n") is None and summary.get("n_expected"):
                state["total"] = summary["n_expected"]  # the whole split
            # n is not part of the cell: a run of fewer questions than the grid asks now is extended (--resume -n)
            asked = len(records) >= cell.n if cell.n is not None else config.get("n") is None
            if summary.get("complete") and not summary.get("stopped") and summary.get("n") == len(records) \
                    and asked:
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
    from ragzoo.secrets import RedactingStream

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as raw:
        # the log is a file: what reaches it is redacted here, whichever thread's stdout/stderr swap is current
        log = RedactingStream(raw)
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
        # one limit per endpoint: every cell of this sweep and every process of theirs share it (`sweep`)
        args += ["--max-concurrency", str(cell.grid.max_concurrency)]
    if cell.retriever:
        args += ["--retriever", cell.retriever]
    if cell.grid.timeout is not None:
        args += ["--timeout", f"{cell.grid.timeout:g}"]
    return args


def _knob_args(cell: Cell) -> list[str]:
    args = []
    for name, value in sorted(cell.knobs.items()):
        text = json.dumps(value) if isinstance(value, bool) else str(value)
        args += ["--knob", f"{name}={text}"]
    return args


def _spend_args(max_cost: float | None, max_calls: int | None, price: str | None,
                price_per_hour: float | None) -> list[str]:
    """A cell's budget and prices, as `evaluate`/`compile` take them: exact (repr), never rounded."""
    args = []
    if max_calls is not None:
        args += ["--max-calls", str(int(max_calls))]
    if max_cost is not None:
        args += ["--max-cost", repr(float(max_cost))]
    if price:
        args += ["--price", str(price)]
    if price_per_hour is not None:
        args += ["--price-per-hour", repr(float(price_per_hour))]
    return args


def compile_argv(cell: Cell, out: Path, max_cost: float | None = None, *, max_calls: int | None = None,
                 price: str | None = None, price_per_hour: float | None = None, resume: bool = False) -> list[str]:
    dataset = cell.dataset
    argv = ["compile", "--method", cell.method.id, "--dataset", dataset.name, "--optimizer", cell.optimizer,
            "--train-n", str(cell.grid.train_n), "--dev-n", str(cell.grid.dev_n), "--out", str(out), "--force",
            *_knob_args(cell), *_common_args(cell, cell.lm.spec, cell.lm.api_base)]
    if dataset.metrics:
        argv += ["--metric", dataset.metrics[0]]
    if resume:
        argv.append("--resume")
    return argv + _spend_args(max_cost, max_calls, price, price_per_hour)


def evaluate_argv(cell: Cell, run: Path, artifact: Path | None, n: int | None, resume: bool,
                  max_cost: float | None = None, *, max_calls: int | None = None, price: str | None = None,
                  price_per_hour: float | None = None, retry_failed: bool = False) -> list[str]:
    dataset = cell.dataset
    argv = ["evaluate", "--dataset", dataset.name, "--out", str(run), "--threads", str(cell.grid.threads),
            *_common_args(cell, cell.lm.spec, cell.lm.api_base)]
    if cell.grid.processes > 1:
        argv += ["--processes", str(cell.grid.processes)]
    if cell.grid.deadline is not None:
        argv += ["--deadline", f"{cell.grid.deadline:g}"]
    # a grid never scores a program on questions it was compiled on
    # absolute (as a resume compares it, `config.answer_view`; symbolic links kept as given, as the earlier runs
    # recorded them): a worker in another folder (a takeover, a rerun) resumes the same program
    argv += ["--program", os.path.abspath(artifact), "--refuse-leakage"] if artifact is not None \
        else ["--method", cell.method.id, *_knob_args(cell)]
    if dataset.split:
        argv += ["--split", dataset.split]
    if n is not None:
        argv += ["-n", str(n)]
    if dataset.metrics:
        argv += ["--metric", ",".join(dataset.metrics)]
    if resume:
        argv.append("--retry-failed" if retry_failed else "--resume")
    return argv + _spend_args(max_cost, max_calls, price, price_per_hour)


def _stopped_compile(artifact: Path) -> dict | None:
    """The spend of a compile its budget stopped ({"lm_calls": paid calls, "cost"}), from the artifact it saved,
    or None: no artifact, or a whole one."""
    try:
        manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not manifest.get("stopped"):
        return None
    usage = manifest.get("usage") or {}
    return {"lm_calls": int(usage.get("lm_calls") or 0) - int(usage.get("cached_calls") or 0),
            "cost": float(manifest.get("cost") or 0.0)}


def run_cell(cell: Cell, out: Path, *, max_cost: float | None = None, max_calls: int | None = None,
             price: str | None = None, price_per_hour: float | None = None, meter=None,
             retry_failed: bool = False) -> dict:
    """Compile (if the grid compiles and no artifact is there) and evaluate (resuming, extending to a larger n)
    one cell, in process, through the same code paths as `ragzoo compile` / `ragzoo evaluate`. `meter` (a
    `ragzoo.usage.Meter` the caller opened around this call) counts the compile's spend, which the evaluation's
    budget then leaves out. Returns the cell's state ("elsewhere": another live process runs the cell)."""
    base = cell_dir(out, cell)
    base.mkdir(parents=True, exist_ok=True)
    with _cell_held(base) as held:
        if not held:  # another live process runs this cell (another sweep into this OUT): never paid twice
            return {**cell_state(out, cell), "exit": 0, "stage": "compile", "elsewhere": True}
        return _run_held_cell(cell, out, base, max_cost=max_cost, max_calls=max_calls, price=price,
                              price_per_hour=price_per_hour, meter=meter, retry_failed=retry_failed)


@contextlib.contextmanager
def _cell_held(base: Path):
    """Hold a cell's folder for this process while its compile and evaluation run: yields False when another live
    process holds it (two sweeps into one OUT each compiled the cell, paid twice, and swapped the artifact under
    the other's evaluation). The kernel's lock (flock) on the folder: a crash or kill releases it; a filesystem
    that cannot lock a folder yields True (the run folder's own lock still guards the evaluation)."""
    import errno
    import fcntl

    from ragzoo.files import forget_lock, keep_lock_from_children

    descriptor = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                yield False
                return
        keep_lock_from_children(descriptor)  # a cell's --processes workers, forked, must not keep it
        yield True
    finally:
        forget_lock(descriptor)
        os.close(descriptor)


def _run_held_cell(cell: Cell, out: Path, base: Path, *, max_cost: float | None, max_calls: int | None,
                   price: str | None, price_per_hour: float | None, meter, retry_failed: bool) -> dict:
    from ragzoo.cli import main as ragzoo_main
    from ragzoo.runs import CONFIG_FILE

    state = cell_state(out, cell)
    if not needs_run(state, retry_failed):
        return {**state, "exit": 0, "skipped": True}
    prices = {"price": price, "price_per_hour": price_per_hour}
    artifact = None
    if cell.optimizer != "none":
        artifact = base / "artifact"
        stopped = _stopped_compile(artifact)
        if stopped is not None or not (artifact / "manifest.json").is_file():
            before = meter.usage.snapshot() if meter is not None else None
            # a compile a budget stopped saved what it had: it is continued from its checkpoint, never evaluated as
            # if whole; `compile --resume` counts its earlier runs against the budget it is given, and the grid's
            # budget left already counted them (cell_state reads the manifest)
            resume = stopped is not None and artifact.with_name(artifact.name + ".checkpoint").is_dir()
            calls, cost = max_calls, max_cost
            if resume:
                calls = None if calls is None else calls + stopped["lm_calls"]
                cost = None if cost is None else cost + stopped["cost"]
            code = ragzoo_main(compile_argv(cell, artifact, cost, max_calls=calls, resume=resume, **prices))
            if code != 0 or not (artifact / "manifest.json").is_file():  # a stopped compile exits 3 (EXIT_STOPPED)
                return {**cell_state(out, cell), "exit": code or 1, "stage": "compile"}
            if before is not None:
                used = meter.usage.minus(before)
                if max_cost is not None:
                    max_cost = max_cost - used.total_cost
                if max_calls is not None:
                    max_calls = max_calls - used.lm_calls + used.cached_calls
            if (max_cost is not None and max_cost <= 0) or (max_calls is not None and max_calls <= 0):
                return {**cell_state(out, cell), "exit": 3, "stage": "compile"}  # the compile used the budget
    run = base / "run"
    resume = (run / CONFIG_FILE).is_file()
    from ragzoo.runs import run_held

    if run.is_dir() and run_held(run):  # a live process writes it: another sweep, or a worker whose claim was
        return {**cell_state(out, cell), "exit": 0, "stage": "evaluate", "elsewhere": True}  # taken for stale
    if resume and (max_calls is not None or max_cost is not None):
        # what is left of the grid's budget (counted from every cell on disk, this one's run too) as the cell's
        # own, which `evaluate --resume` counts from its run folder's earlier calls: not counted twice
        from ragzoo.runs import PREDICTIONS_FILE, extra_usage, read_predictions, usage_totals

        unrecorded = extra_usage(run)
        earlier = usage_totals(read_predictions(run / PREDICTIONS_FILE), unrecorded)
        if max_calls is not None:
            max_calls += int(earlier["lm_calls"] - earlier["cached_calls"])
        if max_cost is not None:  # the rented server's time too, as cell_state and evaluate --resume count it
            max_cost += earlier["cost"] + float(unrecorded.get("server_cost") or 0)
    code = ragzoo_main(evaluate_argv(cell, run, artifact, cell.n, resume, max_cost, max_calls=max_calls,
                                     retry_failed=retry_failed, **prices))
    return {**cell_state(out, cell), "exit": code, "stage": "evaluate"}


# ---------------------------------------------------------------------------------------------------------
# claiming cells: local (this process) or through an Optuna storage shared by workers

class LocalClaims:
    def __init__(self, keys: list[str]):
        self._keys = list(keys)
        self._lock = threading.Lock()

    def next(self, stop: threading.Event | None = None):
        with self._lock:
            return (self._keys.pop(0), None) if self._keys else (None, None)

    def done(self, token, ok: bool, requeue: bool = False) -> None:
        pass

    def heartbeat(self, token) -> None:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _whole_seconds(variable: str, default: int) -> int:
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:  # Optuna's RDBStorage takes whole positive seconds
        raise ConfigError(f"{variable} must be a whole number of seconds, at least 1; got {value!r}")
    return int(value)


class OptunaClaims:
    """Each cell is an enqueued Optuna trial; `study.ask()` pops a waiting trial atomically in the storage, so
    each cell is claimed by exactly one worker. Heartbeats mark the running claims; a claim whose worker died
    goes stale and `RetryFailedTrialCallback` enqueues it again."""

    HEARTBEAT = 5
    GRACE = 30

    def __init__(self, url: str, study_name: str, keys: list[str], *, wait: float = 60.0,
                 choices: list[str] | None = None, say=None, keys_as_of=None, done_on_disk=None):
        import warnings

        # `keys` are the cells not done on disk when the caller read them (`keys_as_of`, a naive local datetime as
        # Optuna records): a claim another worker completed since then is a cell done, never one to enqueue again
        self._keys_as_of = keys_as_of
        # whether a cell is complete on disk now (the caller's cell state): a worker may finish a cell on disk and
        # die before its `tell`, after `keys` were read
        self._done_on_disk = done_on_disk or (lambda key: False)

        # the several-machines test waits out a dead worker's heartbeat in seconds rather than half a minute
        self.HEARTBEAT = _whole_seconds("RAGZOO_GRID_HEARTBEAT", self.HEARTBEAT)
        self.GRACE = _whole_seconds("RAGZOO_GRID_GRACE", self.GRACE)

        import optuna
        from optuna.distributions import CategoricalDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # heartbeats and their retry callback are marked experimental by Optuna; they are what we rely on
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # we drive heartbeats ourselves (record_heartbeat while a cell runs), not through Study.optimize
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        self._optuna = optuna
        self._keys = list(keys)
        self._say = say  # one line when this worker waits on cells other workers run (never a silent wait)
        self._waiting_said = False
        # the choices of a trial's "cell" are every cell of the grid, the same on every run and worker (the study
        # is named after them): Optuna refuses a second run whose choices differ ("dynamic value space")
        self._distributions = {"cell": CategoricalDistribution(sorted(choices or self._keys) or ["-"])}
        self._lock = threading.Lock()
        self.storage = self._storage(url)
        try:
            with schema_lock(url):
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
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        from ragzoo.storage import open_storage

        return open_storage(url, heartbeat_interval=self.HEARTBEAT, grace_period=self.GRACE,
                            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback())

    def _requeue_unfinished(self) -> None:
        """A rerun of the command: enqueue again the cells whose last claim ended (done/failed) while the cell is
        not done on disk (the caller passes only those keys) and no claim waits or runs for them."""
        from optuna.trial import TrialState

        self._fail_dead_claims()
        live = set()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
            live.add(self._key_of(trial))
        if self._keys_as_of is not None:  # two workers started together: the first may finish a cell meanwhile
            for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                if trial.datetime_complete is not None and trial.datetime_complete >= self._keys_as_of:
                    live.add(self._key_of(trial))
        for key in self._keys:
            if key not in live and self._to_run(key):
                self.study.enqueue_trial({"cell": key})

    def _to_run(self, key) -> bool:
        """The one rule of what a claim that ended without its cell done may put back in the queue (a rerun, a dead
        worker's claim) and what a popped claim may run: a cell of this worker's (not done on disk when it read
        them) that is still not complete on disk."""
        return key in self._keys and not self._done_on_disk(key)

    @staticmethod
    def _key_of(trial):
        return trial.params.get("cell") or (trial.system_attrs.get("fixed_params") or {}).get("cell")

    def _fail_dead_claims(self) -> None:
        """Claims whose worker is known dead go back to the queue now, not after the heartbeat grace: a worker of
        this machine whose process is gone (a SIGKILL, a crash), and a claim that never got a worker or a
        heartbeat (a worker that died inside `ask`) once the grace has passed."""
        import datetime

        from optuna.trial import TrialState

        host = _process_space()
        now = datetime.datetime.now()
        stale: set = set()  # claims whose heartbeat stopped (a worker of any machine): settled here by the same
        # rule, before Optuna's fail_stale_trials would fail them and enqueue a copy whatever the disk says
        if getattr(self.storage, "get_heartbeat_interval", lambda: None)():
            with contextlib.suppress(Exception):
                stale = set(self.storage._get_stale_trial_ids(self.study._study_id))
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker = str(trial.user_attrs.get("worker") or "")
            name, _, pid = worker.rpartition(":")
            if trial._trial_id in stale:
                pass
            elif worker:
                if name != host or not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                    continue
            elif trial.datetime_start is None or (now - trial.datetime_start).total_seconds() < self.GRACE:
                continue
            key = self._key_of(trial)
            with contextlib.suppress(Exception):  # another worker ended it first
                if self._done_on_disk(key):  # it died after its cell was complete, before its `tell`: done
                    self.storage.set_trial_state_values(trial._trial_id, state=TrialState.COMPLETE, values=[0.0])
                    continue
                self.storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
                if self._to_run(key) and trial._trial_id in stale:
                    self._enqueue_retry(key, trial)
                elif self._to_run(key):
                    self.study.enqueue_trial({"cell": key})

    def _enqueue_retry(self, key, dead) -> None:
        """The cell of a claim whose heartbeat stopped back in the queue, marked as Optuna's
        RetryFailedTrialCallback marks it (system attribute "failed_trial"): the claim came back by its heartbeat's
        expiry, not because its worker was seen dead on this machine."""
        from optuna.trial import TrialState, create_trial

        self.study.add_trial(create_trial(state=TrialState.WAITING, system_attrs={
            "fixed_params": {"cell": key}, "failed_trial": dead.number,
            "retry_history": [*dead.system_attrs.get("retry_history", []), dead.number]}))

    def next(self, stop: threading.Event | None = None):
        """The next cell to run and its claim, or (None, None): none is left, or `stop` was set (Ctrl-C) while this
        worker waited on cells other workers run. A storage lost meanwhile (its server stopped, its file gone) is
        one line (`RunError`), not an internal error."""
        try:
            return self._next(stop)
        except RagzooError:
            raise
        except Exception as error:  # noqa: BLE001 - SQLAlchemy's and Optuna's many kinds of a lost database
            raise _storage_lost(error) from None

    def _next(self, stop: threading.Event | None):
        from optuna.storages import fail_stale_trials
        from optuna.trial import TrialState

        while True:
            if stop is not None and stop.is_set():
                return None, None
            with self._lock:
                with contextlib.suppress(Exception):
                    self._fail_dead_claims()  # a dead worker's cell goes back to the queue, unless done on disk
                    fail_stale_trials(self.study)
                if not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                    beats = getattr(self.storage, "get_heartbeat_interval", lambda: None)()
                    # without heartbeats (journal storage) a dead worker's claim would never come back: stop; and
                    # a claim on a cell this worker has nothing left of (done on disk) is nothing to wait for
                    running = [trial for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                               if self._key_of(trial) in self._keys]
                    if running and not beats and self._say is not None and not self._waiting_said:
                        self._waiting_said = True  # said, not left to a table that looks final
                        self._say(f"grid: {len(running)} cell(s) are still run by other workers; a journal storage "
                                  f"keeps no heartbeats, so this worker cannot wait for them: the table it writes "
                                  f"is partial (rerun the command once they finish for the whole table)")
                    if not beats or not running:
                        return None, None
                    waiting = True
                else:
                    waiting = False
            if waiting:  # other workers still run cells: wait, in case one dies and its cell comes back
                mine = f"{_process_space()}:{os.getpid()}"  # this worker's other --parallel cells are not others'
                others = [trial for trial in running if trial.user_attrs.get("worker") != mine]
                if others and self._say is not None and not self._waiting_said:
                    self._waiting_said = True
                    self._say(f"grid: waiting for {len(others)} cell(s) other workers are running (a dead worker's "
                              f"cell comes back after {self.GRACE} s without its heartbeat)")
                if stop is not None:
                    stop.wait(1.0)  # a --parallel worker's thread: Ctrl-C reaches it only through `stop`
                else:
                    time.sleep(1.0)
                continue
            with self._lock:
                trial = self.study.ask(self._distributions)
                try:
                    attrs = self.storage.get_trial_system_attrs(trial._trial_id)
                    if "fixed_params" not in attrs:  # another worker popped the last waiting claim
                        self.study.tell(trial, state=TrialState.PRUNED)
                        continue
                    key = trial.params["cell"]
                    with contextlib.suppress(Exception):  # who ran which cell: the record, and a dead worker found
                        trial.set_user_attr("worker", f"{_process_space()}:{os.getpid()}")
                except BaseException:
                    with contextlib.suppress(Exception):  # never leave a claim running with no one behind it
                        self.study.tell(trial, state=TrialState.FAIL)
                        # and never lose its cell: back in the queue for the workers still running (Ctrl-C between
                        # the pop and the run left it failed, and their table partial)
                        cell = (self.storage.get_trial_system_attrs(trial._trial_id).get("fixed_params")
                                or {}).get("cell")
                        if cell is not None:
                            self.study.enqueue_trial({"cell": cell})
                    raise
                if not self._to_run(key):  # a cell this worker does not know, or one done on disk
                    self.study.tell(trial, state=TrialState.FAIL)
                    continue
                if self._claimed_before(key, trial):  # queued twice (workers rerunning at once): the earlier runs it
                    self.study.tell(trial, state=TrialState.PRUNED)
                    continue
                return key, trial

    def _claimed_before(self, key, trial) -> bool:
        """Whether an earlier claim on `key` still waits or runs: the one that runs the cell, not this copy."""
        from optuna.trial import TrialState

        return any(other.number < trial.number and self._key_of(other) == key
                   for other in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)))

    def heartbeat(self, trial) -> None:
        if trial is not None and hasattr(self.storage, "record_heartbeat"):
            with contextlib.suppress(Exception):
                self.storage.record_heartbeat(trial._trial_id)

    def done(self, trial, ok: bool, requeue: bool = False) -> None:
        """End a claim; `requeue`: the cell was cut short (Ctrl-C), not failed: back to the queue, so another
        worker still running takes it at once (a rerun of this one finds it waiting, and does not add another)."""
        if trial is None:
            return
        try:
            self._done(trial, ok, requeue)
        except RagzooError:
            raise
        except Exception as error:  # noqa: BLE001
            raise _storage_lost(error) from None

    def _done(self, trial, ok: bool, requeue: bool) -> None:
        from optuna.trial import TrialState

        with self._lock:  # skip_if_finished: another worker may have ended a claim it took for stale (a paused VM)
            if ok:
                self.study.tell(trial, 0.0, skip_if_finished=True)
            else:
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                if requeue:
                    with contextlib.suppress(Exception):
                        self.study.enqueue_trial({"cell": trial.params["cell"]})


def _storage_lost(error: BaseException) -> "RunError":
    from ragzoo.errors import RunError
    from ragzoo.storage import database_error

    return RunError(f"the grid's storage failed ({type(error).__name__}: {database_error(error)}): this worker "
                    f"stops; the cells finished are kept in OUT, and the same command resumes the grid once the "
                    f"storage answers")


def _process_space() -> str:
    """Where this process's PID means this process: the host name and the PID namespace (two containers on one host
    network share a host name but not their PIDs: one's worker is not judged dead by a PID absent from the other)."""
    import socket

    try:
        space = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}/pidns-{space}"


def study_name(grid: Grid, cells: list[Cell], identity: str = "") -> str:
    """The grid's study in a shared storage: its name, its cells and the OUT it fills (`grid_identity`), so two
    OUT folders of one grid in one database are two grids, each with its whole table."""
    import hashlib

    digest = hashlib.sha256("\n".join(sorted(c.key for c in cells)).encode()).hexdigest()[:12]
    return f"ragzoo-grid:{grid.name}:{digest}" + (f":{identity}" if identity else "")


def grid_identity(out: Path) -> str:
    """OUT's identity, made once by whichever worker comes first (an exclusive create, which a shared filesystem
    keeps atomic too) and read by every other."""
    import uuid

    path = Path(out) / GRID_ID_FILE
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        deadline = time.monotonic() + 10
        while True:  # the first worker may be between its create and its write
            text = path.read_text(encoding="utf-8").strip()
            if text or time.monotonic() > deadline:
                return text
            time.sleep(0.05)
    identity = uuid.uuid4().hex[:16]
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(identity + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return identity


# ---------------------------------------------------------------------------------------------------------
# the sweep

@dataclass
class SweepResult:
    states: dict[str, dict] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None
    interrupted: bool = False  # Ctrl-C: the grid stopped; finished questions are kept
    terminated: bool = False  # ... by SIGTERM rather than Ctrl-C


def _inside(name: str | None, folder: Path) -> bool:
    """Whether the file `name` lies in `folder` (or below), symbolic links resolved."""
    if not name:
        return False
    return Path(name).expanduser().resolve().is_relative_to(Path(folder).expanduser().resolve())


def write_grid_file(grid: Grid, out: Path, cells: list[Cell], *, shared: bool = False) -> None:
    from ragzoo.files import atomic_write_json
    from ragzoo.secrets import scrub, strip_url
    from ragzoo.ownership import claim, mark

    found = claim(out, "grid")  # a grid writes only into a folder ragzoo made for a grid (or a new/empty one)
    out = found.path
    out.mkdir(parents=True, exist_ok=True)
    # the grid file as a path from anywhere: `ragzoo report OUT` is run from other folders than the sweep
    source = str(Path(grid.source).resolve()) if grid.source and Path(grid.source).is_file() else grid.source
    record = {"name": grid.name, "title": grid.title, "source": source, "paper": grid.paper,
              "n": grid.n, "seed": grid.seed, "optimizers": grid.optimizers,
              "lms": [{"spec": lm.spec, "api_base": strip_url(lm.api_base)} for lm in grid.lms],
              "cells": [{"key": c.key, "method": c.method.id, "label": c.method.label, "knobs": c.knobs,
                         "dataset": c.dataset.name, "split": c.dataset.split, "optimizer": c.optimizer,
                         "lm": c.lm.spec} for c in cells]}
    record = scrub(record)  # the endpoint without credentials (registered: hidden wherever echoed), no known key
    path = out / GRID_FILE
    if path.is_file():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        if previous.get("name") != grid.name:
            raise ConfigError(f"{out} holds grid {previous.get('name')!r}, not {grid.name!r}; choose another --out")
        theirs = {c.get("key") for c in previous.get("cells") or [] if isinstance(c, dict)}
        ours = {c.key for c in cells}
        if shared and theirs and theirs != ours:
            # workers sharing OUT that resolved the grid apart (a corpus found on one machine and not another, a
            # --methods subset) would each run their cells in a study of their own, uncoordinated, into one folder
            differ = sorted(theirs ^ ours)
            raise ConfigError(f"{out} holds grid {grid.name!r} with other cells than this worker's ({len(differ)} "
                              f"differ, e.g. {differ[0]}): every worker of a --storage grid must resolve the same "
                              f"grid (the same file and flags, for reproduce the same corpora on every machine); a "
                              f"grid run before with --methods/--datasets is extended without --storage, or into "
                              f"another --out")
        if previous == record:
            mark(out, "grid", GRID_OUTPUTS)
            return
    mark(out, "grid", GRID_OUTPUTS)
    atomic_write_json(path, record)


def check_budget_options(grid: Grid, *, max_cost: float | None, max_calls: int | None, price: str | None,
                         price_per_hour: float | None) -> None:
    """A grid's budget and prices fail here, once, in one line, before any cell (not once per cell)."""
    from ragzoo.lm import parse_price
    from ragzoo.usage import Budget

    # the budget's own checks of --max-calls, --max-cost and --price-per-hour, on the values as given
    rate = Budget(max_calls, max_cost, price_per_hour=price_per_hour).price_per_hour
    priced = parse_price(price) is not None or bool(rate)
    if not max_cost or priced:  # None: no budget; 0: nothing is sent, price or not
        return
    from ragzoo.engines import is_dry_run_spec
    from ragzoo.usage import _price_lookup

    for lm in grid.lms:
        if not is_dry_run_spec(lm.spec.strip()) and _price_lookup(lm.spec) is None:
            raise ConfigError(f"--max-cost cannot bind: model {lm.spec!r} has no known price (not in LiteLLM's bundled "
                              f"price table); pass --price IN,OUT (USD per million prompt, completion tokens) or "
                              f"--price-per-hour USD (a server rented by the hour)")


_FORK_LOCKS: list = []  # locks other cells' threads may hold while a cell forks its workers (`_fresh_locks`)


def _fresh_locks() -> None:
    """In a worker forked from a cell's thread (`--processes`) while other cells' threads run: the locks those
    threads share with it (the grid's budget, DSPy's response cache, the price tables) start unlocked, as
    `threading` and `logging` do for theirs; a lock copied while another thread held it would never be released
    in the child, whose first LM call would wait on it for ever."""
    for lock in _FORK_LOCKS:
        reinit = getattr(lock, "_at_fork_reinit", None)
        if reinit is not None:
            reinit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks)


def _stop_cell_workers() -> None:
    """Ctrl-C: end the worker processes of the cells running (`--processes`), whose calls the grid's budget stop
    does not reach (they run in processes of their own); their questions in flight are dropped, as the threads'
    are, and each cell's evaluate keeps what its workers sent."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.name.startswith("ragzoo-evaluate-"):  # `runs._run_in_processes` names its workers so
            child.terminate()


def _shared_locks(budget) -> list:
    import dspy

    from ragzoo import usage

    cache = getattr(dspy, "cache", None)
    found = [getattr(budget, "_lock", None), getattr(cache, "_lock", None), getattr(usage, "_PRICE_LOCK", None),
             getattr(usage, "_PRICE_MEMO_LOCK", None)]
    return [lock for lock in found if lock is not None]


def _lines_of(path: Path, seen: dict, *, sums: bool = False) -> int:
    """Lines of a growing file, reading only what was appended since the last call (`seen` keeps the place);
    `sums`: also the LM calls and cost of its complete records (`seen["calls"]`, `seen["cost"]`)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(seen.get("offset", 0))
            chunk = handle.read()
    except OSError:
        return seen.get("lines", 0)
    seen["offset"] = seen.get("offset", 0) + len(chunk)
    seen["lines"] = seen.get("lines", 0) + chunk.count(b"\n")
    if sums:
        *complete, seen["tail"] = (seen.get("tail", b"") + chunk).split(b"\n")
        for line in complete:
            try:
                record = json.loads(line)
                seen["calls"] = seen.get("calls", 0) + int(record.get("lm_calls") or 0)
                seen["cost"] = seen.get("cost", 0.0) + float(record.get("cost") or 0.0)
            except (ValueError, TypeError, AttributeError):
                continue  # a torn line: a killed worker's last write
    return seen["lines"]


def sweep(grid: Grid, out: str | os.PathLike, *, parallel: int = 1, max_cost: float | None = None,
          storage: str | None = None, progress=None, quiet_cells: bool = True, max_calls: int | None = None,
          price: str | None = None, price_per_hour: float | None = None, say=None,
          tick: float = 0.5, track=None, retry_failed: bool = False) -> SweepResult:
    """Run the grid's cells (see the module docstring). `progress(snapshot)` is called at the start, every
    `tick` seconds while cells run (the running cells' questions done / total, calls, spend; the grid's ETA) and
    after each cell; `say(line)` gets one-line notices (where a resume starts). Ctrl-C (SIGINT, when run from the
    main thread) stops the grid: no new cell or question starts, the questions in flight are dropped (their
    calls stay in DSPy's cache where it is on), and the result says `interrupted`."""
    import signal

    from ragzoo import runs
    from ragzoo.usage import Budget, metering

    out = Path(out)
    if parallel < 1:
        raise ConfigError("--parallel must be at least 1")
    if not grid.lms:
        raise ConfigError("the grid names no LM; pass --lm SPEC (or add lms = [...] under [grid])")
    check_budget_options(grid, max_cost=max_cost, max_calls=max_calls, price=price, price_per_hour=price_per_hour)
    if grid.processes > 1 and (max_cost is not None or max_calls is not None):
        # the grid's budget is reserved call by call in this process; a worker process's calls are not seen here
        raise ConfigError("a grid's --max-cost/--max-calls is counted call by call in this process and cannot see its "
                          "cells' worker processes: drop --processes, or the budget")
    if storage and (max_cost is not None or max_calls is not None):
        # each worker counts the cells on disk when it starts and its own calls after: W workers spent W budgets
        raise ConfigError("a grid's --max-cost/--max-calls is counted in one process: with --storage every worker "
                          "would spend it whole; give the workers no budget, or run the budgeted grid in one worker "
                          "without --storage (it resumes from OUT all the same)")
    if grid.processes > 1 and grid.max_concurrency and grid.processes > grid.max_concurrency:
        raise ConfigError(f"--processes {grid.processes} is more than --max-concurrency {grid.max_concurrency}: each "
                          f"process needs a request slot of its own; lower --processes or raise --max-concurrency")
    cells = grid.cells()
    check_cells(cells)  # a mistake of the grid file is said now, not by a cell after others were paid for
    from ragzoo.secrets import carries_credentials

    for lm in grid.lms:  # an endpoint URL carrying credentials: once, before the grid folder is written (each cell
        if lm.api_base and carries_credentials(lm.api_base):  # refused it in turn, after the folder was made)
            raise ConfigError(f"the api_base of the grid's LM {lm.spec!r} (--api-base, or the grid file's lms) "
                              f"carries credentials; give the bare server URL and set the key in the environment")
    if storage:
        from ragzoo.ownership import storage_file
        from ragzoo.secrets import register_url
        from ragzoo.storage import open_storage

        register_url(storage, paths=False)  # a database password is hidden from every output and record too
        # a storage that cannot be opened is refused before the grid folder is written, unless it lives in that
        # folder (`--storage sqlite:///OUT/grid.db`): then OUT is the grid's first
        if _inside(storage_file(storage), out):
            write_grid_file(grid, out, cells, shared=True)
            open_storage(storage)
        else:
            open_storage(storage)
            write_grid_file(grid, out, cells, shared=True)
    else:
        write_grid_file(grid, out, cells)
    identity = grid_identity(out) if storage else ""
    from ragzoo import tracking

    track = track or tracking.Tracker(None, "sweep")  # MLflow: the grid's run, one nested run per cell ran
    if track.enabled:
        track.start(track.name_of(out), tags={"ragzoo.grid": grid.name})
    result = SweepResult()
    todo = []
    # when the cells' states were read from disk: a cell another worker completes after this is done, not to requeue
    import datetime

    states_read_at = datetime.datetime.now()
    for cell in cells:
        reason = runnable(cell)
        if reason:
            result.skipped[cell.key] = reason
            continue
        adopt_legacy_dir(out, cell)
        state = cell_state(out, cell)
        result.states[cell.key] = state
        if needs_run(state, retry_failed):
            todo.append(cell)
    by_key = {cell.key: cell for cell in cells}
    counted = [cell for cell in cells if cell.key not in result.skipped]
    # a cell run before at a larger -n counts as its n now (progress said "resuming from 24/18")
    resumed = sum(min(result.states[c.key]["done"], result.states[c.key].get("total") or result.states[c.key]["done"])
                  for c in counted)
    if say is not None and resumed and todo:
        asked = [result.states[c.key].get("total") for c in counted]
        of = f"/{sum(asked)}" if None not in asked else ""
        say(f"grid: resuming from {resumed}{of} questions ({len(counted) - len(todo)} of {len(counted)} cells "
            f"done)")
    # one budget for every cell of this process, what is left of the grid's after what its cells on disk used:
    # each call reserves on it before it is sent, so cells running at once never pass it together
    used_cost = sum(result.states[c.key]["cost"] for c in counted)
    # calls answered from the cache were sent to no one: they count for no budget (as in `ragzoo.usage.Budget`)
    used_calls = sum(result.states[c.key]["lm_calls"] - result.states[c.key]["cached_calls"] for c in counted)
    budget = Budget(None if max_calls is None else max(0, max_calls - used_calls),
                    None if max_cost is None else max(0.0, max_cost - used_cost), price_per_hour=price_per_hour)

    def done_on_disk(key: str) -> bool:  # now, not when the states above were read
        if key not in by_key:
            return False
        return not needs_run(cell_state(out, by_key[key]), retry_failed)

    claims = (OptunaClaims(storage, study_name(grid, cells, identity), [c.key for c in todo],
                           choices=[c.key for c in cells], say=say, keys_as_of=states_read_at,
                           done_on_disk=done_on_disk) if storage
              else LocalClaims([c.key for c in todo]))
    lock = threading.Lock()
    running: dict[str, dict] = {}  # key -> the cell's meter, what it had on disk, its predictions' line count
    stop = threading.Event()
    interrupted = threading.Event()
    started_at = time.monotonic()

    def left() -> dict:
        """What is left of the grid's budget now, as a cell's `max_calls` / `max_cost` (None: no such bound)."""
        return {"max_calls": None if max_calls is None else budget.max_calls - budget.started,
                "max_cost": None if max_cost is None else budget.max_cost - budget.spent - budget.server_cost()}

    def budget_left() -> str | None:
        now = left()
        if now["max_calls"] is not None and now["max_calls"] <= 0:
            return f"grid budget --max-calls {max_calls} reached"
        if now["max_cost"] is not None and now["max_cost"] <= 0:
            return f"grid budget --max-cost {max_cost!r} reached"
        return budget.exceeded

    def snapshot(event: str) -> dict:
        with lock:
            live = dict(running)
            states = dict(result.states)
        rows, done_q, calls, spent, totals = [], 0, 0, 0.0, []
        for cell in counted:
            state = states.get(cell.key, {})
            entry = live.get(cell.key)
            if entry is not None:
                usage = entry["meter"].usage
                seen, workers = entry["seen"], grid.processes > 1
                done = _lines_of(cell_dir(out, cell) / "run" / "predictions.jsonl", seen, sums=workers)
                # worker processes' calls reach no meter here: their records' calls since the cell started
                extra_calls = seen.get("calls", 0) - entry["base"][0] if workers else 0
                extra_cost = seen.get("cost", 0.0) - entry["base"][1] if workers else 0.0
                row = {"label": f"{cell.method.label} {cell.dataset.label}", "done": done,
                       "total": entry["prior"].get("total"),
                       "calls": entry["prior"]["lm_calls"] + usage.lm_calls + extra_calls,
                       "cost": entry["prior"]["cost"] + usage.total_cost + extra_cost}
                rows.append(row)
                done_q, calls, spent = done_q + done, calls + row["calls"], spent + row["cost"]
            else:
                done_q += state.get("done", 0)
                calls += state.get("lm_calls", 0)
                spent += state.get("cost", 0.0)
            totals.append(state.get("total"))
        total_q = sum(totals) if None not in totals else None
        elapsed = time.monotonic() - started_at
        eta = None
        if total_q is not None and done_q > resumed and elapsed > 0:
            eta = (total_q - done_q) * elapsed / (done_q - resumed)
        cells_done = sum(1 for c in counted if states.get(c.key, {}).get("status") == "done")
        return {"event": event, "cells": len(counted), "cells_done": cells_done, "running": rows,
                "left": len(counted) - cells_done - len(rows), "questions": done_q, "questions_total": total_q,
                "calls": calls, "spent": spent, "eta": eta, "elapsed": elapsed}

    def report(event: str = "cell"):
        if progress is not None:
            progress(snapshot(event))

    def worker(routers):
        while not stop.is_set():
            key, token = claims.next(stop)
            if key is None:
                return
            cell = by_key[key]
            reason = budget_left() if (max_cost is not None or max_calls is not None) else None
            if reason or stop.is_set():
                with lock:
                    result.stopped = result.stopped or (None if interrupted.is_set() else reason)
                claims.done(token, False, requeue=True)  # not started: another worker may take it
                stop.set()
                return
            cell_budget = left()
            beat = threading.Event()

            def heartbeat():
                while not beat.wait(getattr(claims, "HEARTBEAT", OptunaClaims.HEARTBEAT)):
                    claims.heartbeat(token)

            beater = threading.Thread(target=heartbeat, daemon=True)
            beater.start()
            cell_track = track.cell(cell_dir(out, cell))
            try:
                with _cell_log(routers, cell_dir(out, cell) / "log.txt"), metering(budget=budget) as meter, \
                        tracking.grid_cells(track), cell_track.working(cell_dir(out, cell)), \
                        runs.stop_when(interrupted):  # Ctrl-C reaches no --parallel cell's thread: this does
                    seen: dict = {}
                    _lines_of(cell_dir(out, cell) / "run" / "predictions.jsonl", seen, sums=grid.processes > 1)
                    with lock:
                        running[key] = {"meter": meter, "prior": cell_state(out, cell), "seen": seen,
                                        "base": (seen.get("calls", 0), seen.get("cost", 0.0))}
                    claims.heartbeat(token)
                    state = run_cell(cell, out, price=price, price_per_hour=price_per_hour, meter=meter,
                                     retry_failed=retry_failed, **cell_budget)
            except KeyboardInterrupt:
                state = {**cell_state(out, cell), "exit": 130, "stage": "interrupted"}
            except Exception as error:  # noqa: BLE001 - one cell's failure must not end the grid
                state = {**cell_state(out, cell), "exit": 1, "error": f"{type(error).__name__}: {error}"}
            finally:
                beat.set()
            ok = state.get("status") == "done"
            if not state.get("elsewhere"):  # another process's cell: its writer logs it
                cell_track.finish(cell_dir(out, cell), name=cell.key, status="FINISHED" if ok else "FAILED")
            with lock:
                running.pop(key, None)
                result.states[key] = state
                if not state.get("skipped"):
                    result.ran.append(key)
                if state.get("elsewhere"):  # not this worker's to run, nor a failure: left to its writer
                    if say is not None:
                        say(f"grid: cell {key} is held by another live ragzoo process (another sweep into this "
                            f"OUT, or a worker whose claim was taken for stale): left to it; the table shows the "
                            f"cell as it is on disk now")
                elif not ok and not interrupted.is_set():
                    if state.get("exit") == 3:
                        result.stopped = result.stopped or budget_left() or "budget reached inside a cell"
                        stop.set()
                    result.failed[key] = state.get("error") or f"exit {state.get('exit')} in {state.get('stage')}"
            claims.done(token, ok, requeue=interrupted.is_set() and not ok)
            if not interrupted.is_set():  # a stopped grid says one line, not a last progress view
                report()

    def on_sigint(signum, frame):  # Ctrl-C, and SIGTERM alike (raised as `Terminated`: the CLI exits 143)
        from ragzoo.errors import Terminated

        stopping = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        if interrupted.is_set():  # a second Ctrl-C: leave now
            raise stopping
        interrupted.set()
        stop.set()
        result.terminated = stopping is Terminated
        budget.stop("interrupted (Ctrl-C)" if stopping is KeyboardInterrupt else "stopped (SIGTERM)")
        raise stopping  # the cell running in this thread stops as its command does on Ctrl-C

    ticking = threading.Event()

    def ticker():
        while not ticking.wait(tick):
            if running:
                report("tick")

    report("start")
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        from ragzoo.errors import raise_terminated

        # SIGTERM too where the CLI made it a stop (not in a library caller's process, where it still kills)
        taken = [signal.SIGINT] + ([signal.SIGTERM] if signal.getsignal(signal.SIGTERM) is raise_terminated else [])
        previous_handlers = {signum: signal.signal(signum, on_sigint) for signum in taken}
    beats = threading.Thread(target=ticker, daemon=True)
    beats.start()
    from ragzoo import endpoints

    # one limit per endpoint for every cell and process of the grid on this machine (module docstring)
    sharing = endpoints.shared_limits(out / SLOTS_DIR)
    sharing.__enter__()
    if grid.processes > 1:
        _FORK_LOCKS[:] = _shared_locks(budget)
    try:
        with (_routed() if quiet_cells else contextlib.nullcontext()) as routers:
            if parallel == 1:
                try:
                    worker(routers)
                except KeyboardInterrupt:  # between two cells
                    if not interrupted.is_set():
                        raise
            else:
                failed: list[BaseException] = []

                def guarded() -> None:
                    try:
                        worker(routers)
                    except BaseException as error:  # noqa: BLE001 - raised in this thread, below
                        failed.append(error)

                # daemon threads: a second Ctrl-C leaves at once, with no cell thread for the interpreter to join
                pool = [threading.Thread(target=guarded, name=f"ragzoo-cells-{index}", daemon=True)
                        for index in range(parallel)]
                for thread in pool:
                    thread.start()
                try:
                    for thread in pool:
                        while thread.is_alive():
                            thread.join(0.5)  # a timed wait: Ctrl-C is raised here
                    if failed:
                        raise failed[0]
                except KeyboardInterrupt:
                    if not interrupted.is_set():
                        raise
                    _stop_cell_workers()
                    waited, told = time.monotonic(), False
                    for thread in pool:  # each cell's run stops within half a second (`runs.stop_when`)
                        while thread.is_alive():
                            thread.join(0.05)
                            if not told and say is not None and time.monotonic() - waited > 2:
                                # a cell's compile waits on its LM call, which only the LM or its timeout ends
                                told = True
                                say("grid: stopping; a cell is still waiting on its LM call: press Ctrl-C again "
                                    "to leave now (what finished is kept)")
    finally:
        ticking.set()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        _FORK_LOCKS.clear()
        sharing.__exit__(None, None, None)
    result.interrupted = interrupted.is_set()
    for cell in cells:  # cells done by other workers (shared storage) count too
        if cell.key not in result.skipped:
            result.states[cell.key] = cell_state(out, cell)
    return result
