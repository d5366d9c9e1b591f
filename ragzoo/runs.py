"""Run directories: evaluate a program on examples, writing each finished example at once, so an interrupted
run (Ctrl-C, SIGKILL, a crash) resumes without losing or repeating an example.

A run directory holds:
- `config.json`: the resolved configuration (written atomically before the first example);
- `predictions.jsonl`: one line per finished example (id, question, gold, prediction, every metric, passages
  used, LM calls, tokens, cost, latency, error kind and message), appended and flushed by a single
  thread-safe writer as examples finish, in completion order;
- `summary.json`: metric means over every example (failures score 0), counts, failures by kind, usage
  (written atomically at the end, from the whole predictions file, so a resumed run's summary covers all).

`resume=True` reads predictions.jsonl, drops a torn last line (a write cut by SIGKILL) by rewriting the file
with only complete lines, and skips every id already there. Examples run inside
`ragzoo.tracing.trace_example()`; an exception of one example (parse error, LM error, retriever error) is
recorded and scored 0 and the run goes on. `threads > 1` uses DSPy's `ParallelExecutor`, which copies the
caller's DSPy settings (`dspy.context(lm=...)`, adapter, callbacks) into each worker thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ragzoo.errors import BudgetExceeded, RunError
from ragzoo.files import atomic_write_bytes, atomic_write_json, fsync_dir, jsonable

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILES = (CONFIG_FILE, PREDICTIONS_FILE, SUMMARY_FILE)
LOCK_FILE = ".ragzoo-run.lock"
# What must match to resume a run: the same questions, program, retriever, LM and metrics (the LM's cache
# and retry options may change).
RESUME_KEYS = ("method", "program", "knobs", "dataset", "split", "n", "seed", "data", "field_map", "retriever",
               "metrics")
RESUME_LM_KEYS = ("model", "api_base", "priced_model", "dry_run")


def example_id(example, position: int) -> str:
    for key in ("id", "_id", "qid"):
        value = example.get(key) if hasattr(example, "get") else None
        if value not in (None, ""):
            return str(value)
    return str(position)


def _gold(example) -> Any:
    for key in ("answers", "answer"):
        value = example.get(key)
        if value not in (None, ""):
            return list(value) if isinstance(value, (list, tuple)) else value
    return None


def _error_chain(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def classify_error(error: BaseException) -> str:
    """A short kind for the summary's failure counts: parse, lm, retriever, timeout, budget, metric, other.
    The whole cause chain counts: DSPy 3.4 wraps provider errors (a read timeout arrives as its own LM error
    caused by the transport's TimeoutError)."""
    from dspy.utils.exceptions import LMError as DSPyLMError

    from ragzoo.errors import LMError, RetrieverError

    chain = _error_chain(error)
    names = {cls.__name__ for link in chain for cls in type(link).__mro__}
    modules = [type(link).__module__ or "" for link in chain]
    if any(isinstance(link, BudgetExceeded) for link in chain):
        return "budget"
    if "AdapterParseError" in names or isinstance(error, json.JSONDecodeError):
        return "parse"
    if any(isinstance(link, RetrieverError) for link in chain):
        return "retriever"
    if any(isinstance(link, TimeoutError) for link in chain) or any("Timeout" in name for name in names):
        return "timeout"
    if any(isinstance(link, (LMError, DSPyLMError)) for link in chain) \
            or any(module.startswith(("litellm", "openai", "httpx", "dspy.clients", "dspy._vendor.lm15"))
                   for module in modules) \
            or any(name.endswith(("APIError", "RateLimitError", "ConnectionError", "ServiceUnavailableError"))
                   for name in names):
        return "lm"
    return "other"


def _passages(prediction) -> list[dict]:
    passages = prediction.get("passages") if prediction is not None else None
    result = []
    for passage in passages or []:
        pid = getattr(passage, "pid", None)
        title = getattr(passage, "title", None)
        if pid is None and isinstance(passage, str):
            title = passage.partition(" | ")[0]
        result.append({"pid": pid, "title": title})
    return result


class PredictionWriter:
    """Appends one JSON line per example, flushed at once; thread-safe; never writes an id twice."""

    def __init__(self, path: Path, done_ids: Iterable[str] = ()):
        self.path = path
        self._ids = set(done_ids)
        self._lock = threading.Lock()
        self._handle = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> bool:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if record["id"] in self._ids:
                return False  # a straggler re-run of an example already written
            self._handle.write(line)
            self._handle.flush()  # in the OS page cache now: survives a SIGKILL of this process
            self._ids.add(record["id"])
            return True

    def close(self) -> None:
        with self._lock:
            if not self._handle.closed:
                self._handle.flush()
                os.fsync(self._handle.fileno())
                self._handle.close()


def read_predictions(path: Path, repair: bool = False) -> list[dict]:
    """Complete records of a predictions file; with `repair`, rewrite it without a torn/invalid line."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    records, seen, dropped = [], set(), 0
    lines = raw.split(b"\n")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        complete = index < len(lines) - 1  # the last piece has no newline: a write cut short
        try:
            record = json.loads(line.decode("utf-8")) if complete else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict) or "id" not in record or record["id"] in seen:
            dropped += 1
            continue
        seen.add(record["id"])
        records.append(record)
    if repair and (dropped or (raw and not raw.endswith(b"\n"))):
        text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
        atomic_write_bytes(path, text.encode("utf-8"))
        logger.warning("%s: dropped %d incomplete line(s) left by an interrupted run", path, dropped)
    return records


def _resume_view(config: dict) -> dict:
    view = {key: jsonable(config[key]) for key in RESUME_KEYS if key in config}
    lm = config.get("lm")
    if isinstance(lm, dict):
        view.update({f"lm.{key}": jsonable(lm.get(key)) for key in RESUME_LM_KEYS if key in lm})
    return view


def check_same_questions(records: list[dict], examples: list, ids: list[str], out: Path) -> None:
    """Every finished record of a resumed run must be one of `examples`, with the same question and gold answer
    (an edited data file, or another sample, would mix two sets of questions in one run)."""
    by_id = dict(zip(ids, examples))
    for record in records:
        example = by_id.get(record["id"])
        if example is None:
            raise RunError(f"cannot resume {out}: question {record['id']!r} of the interrupted run is not among "
                           f"these questions; use the same data or another --out")
        if record.get("question") != example.get("question") or record.get("gold") != jsonable(_gold(example)):
            raise RunError(f"cannot resume {out}: question {record['id']!r} changed since the interrupted run (an "
                           f"edited data file?); use the same data or another --out")


def _check_run_dir(out: Path, config: dict, resume: bool, force: bool) -> bool:
    """Refusals that need no write. Returns whether `out` already holds a run."""
    if out.exists() and not out.is_dir():
        raise RunError(f"{out} exists and is not a directory; choose another --out")
    entries = {entry.name for entry in out.iterdir()} - {LOCK_FILE} if out.is_dir() else set()
    is_run = CONFIG_FILE in entries
    if entries and not is_run:  # not ours: never write into it, never delete anything in it
        raise RunError(f"{out} exists and is not a ragzoo run directory; choose another --out")
    if is_run and not resume and not force:
        raise RunError(f"{out} already holds a run; pass --resume to continue it or --force to start over")
    if is_run and resume:
        try:
            previous = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise RunError(f"{out / CONFIG_FILE} is unreadable; start a new run with another --out") from None
        if not isinstance(previous, dict):
            raise RunError(f"{out / CONFIG_FILE} is not a run configuration; start a new run with another --out")
        before, now = _resume_view(previous), _resume_view(config)
        differing = [key for key in now if key in before and before[key] != now[key]]
        if differing:
            raise RunError(f"cannot resume {out}: {', '.join(differing)} differ from the interrupted run; use the "
                           f"same flags or another --out")
    return is_run


@contextlib.contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    """Hold `out` for this process. The lock is the kernel's (flock): a crash or kill releases it."""
    import fcntl

    handle = open(out / LOCK_FILE, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            raise RunError(f"{out} is being written by another ragzoo process (pid {owner}); wait for it to finish "
                           f"or choose another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


@contextlib.contextmanager
def open_run_dir(out_dir: str | os.PathLike, config: dict, *, resume: bool = False,
                 force: bool = False) -> Iterator[Path]:
    """Create or reopen a run directory and own it while the block runs (the caller writes its config). Refuses an existing directory that is
    not a run (ragzoo never writes into, or deletes from, what it did not write), a run without
    `resume`/`force`, a resume whose configuration differs (other questions, program, retriever, LM or
    metrics), and a run another process is writing."""
    out = Path(out_dir)
    _check_run_dir(out, config, resume, force)
    out.mkdir(parents=True, exist_ok=True)
    with _run_lock(out):
        is_run = _check_run_dir(out, config, resume, force)  # again, now that no one else can change it
        if force and not resume:
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
        yield out  # the caller writes config.json once it has checked what it resumes


def summarize(records: list[dict], metric_names: list[str], *, total: int | None = None,
              extra: dict | None = None) -> dict:
    """Summary of prediction records: metric means (failures count 0), counts, failures by kind, usage."""
    n = len(records)
    failures: dict[str, int] = {}
    for record in records:
        if record.get("error"):
            kind = record["error"].get("kind", "other")
            failures[kind] = failures.get(kind, 0) + 1

    def total_of(key: str) -> float:
        return sum(float(r.get(key) or 0) for r in records)

    summary = {
        "n": n,
        "n_expected": total if total is not None else n,
        "complete": total is None or n >= total,
        "metrics": {name: (sum(float(r.get("metrics", {}).get(name) or 0) for r in records) / n if n else 0.0)
                    for name in metric_names},
        "failures": sum(failures.values()),
        "failures_by_kind": dict(sorted(failures.items())),
        "usage": {
            "lm_calls": int(total_of("lm_calls")),
            "prompt_tokens": int(total_of("prompt_tokens")),
            "completion_tokens": int(total_of("completion_tokens")),
            "cost": round(total_of("cost"), 6),
            "retrievals": int(total_of("retrievals")),
            "lm_calls_per_question": total_of("lm_calls") / n if n else 0.0,
            "tokens_per_question": (total_of("prompt_tokens") + total_of("completion_tokens")) / n if n else 0.0,
            "latency_mean": total_of("latency") / n if n else 0.0,
        },
    }
    summary.update(extra or {})
    return summary


def run_example(program, example, position: int, metrics: list[tuple[str, Callable]]) -> dict:
    """Run one example inside a trace and return its prediction record (exceptions recorded, scored 0).
    `BudgetExceeded` propagates: the example was not run and must not be recorded."""
    from ragzoo.tracing import trace_example

    prediction, error = None, None
    started = time.perf_counter()
    with trace_example() as trace:
        try:
            prediction = program(**example.inputs())
        except BudgetExceeded:
            raise
        except Exception as exc:  # one example's failure is data, not the end of the run
            error = {"kind": classify_error(exc), "type": type(exc).__name__, "message": str(exc)[:2000]}
    latency = time.perf_counter() - started
    scores = {}
    for name, metric in metrics:
        scores[name] = metric(example, prediction) if prediction is not None else 0.0
    usage = {"lm_calls": len(trace.lm_calls), "prompt_tokens": trace.prompt_tokens,
             "completion_tokens": trace.completion_tokens, "cost": round(trace.cost, 8)}
    answer = prediction.get("answer") if prediction is not None else None
    return {
        "id": example_id(example, position),
        "question": example.get("question"),
        "gold": jsonable(_gold(example)),
        "prediction": jsonable(answer),
        "metrics": scores,
        "passages": _passages(prediction),
        **usage,
        "retrievals": len(trace.retrievals),
        "lm_trace": [{"predictor": c.signature, "prompt_tokens": c.prompt_tokens,
                      "completion_tokens": c.completion_tokens, "cached": c.cached} for c in trace.lm_calls],
        "latency": round(latency, 4),
        "error": error,
    }


def evaluate(program, examples: list, metrics: str | Callable | list = "em", out_dir: str | os.PathLike | None = None,
             *, threads: int = 1, resume: bool = False, force: bool = False, config: dict | None = None,
             progress: bool | None = None, max_calls: int | None = None, max_cost: float | None = None) -> dict:
    """Evaluate `program` on `examples` with the active DSPy LM; write a run directory at `out_dir` (or keep
    everything in memory when None). Returns the summary (also in summary.json); the records of this call
    are in `summary["records"]` when `out_dir` is None."""
    from dspy.utils.parallelizer import ParallelExecutor

    from ragzoo.metrics.scoring import resolve_metrics, safe_metric
    from ragzoo.usage import Budget, metering

    Budget(max_calls, max_cost)  # a bad budget fails before the run directory is touched
    resolved = [(name, safe_metric(fn)) for name, fn in resolve_metrics(metrics)]
    metric_names = [name for name, _ in resolved]
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise RunError(f"--threads must be a positive integer, got {threads!r}")
    ids = [example_id(example, i) for i, example in enumerate(examples)]
    if len(set(ids)) != len(ids):
        raise RunError("the examples have duplicate ids; give each question a unique id (--field-map id=...)")

    run_config = dict(config or {})
    run_config.setdefault("n", len(examples))
    run_config["metrics"] = metric_names
    with contextlib.ExitStack() as stack:  # a run directory is owned by this process until the summary is written
        previous: list[dict] = []
        writer = None
        out = None
        if out_dir is not None:
            out = stack.enter_context(open_run_dir(out_dir, run_config, resume=resume, force=force))
            previous = read_predictions(out / PREDICTIONS_FILE, repair=True) if resume else []
            check_same_questions(previous, examples, ids, out)
            atomic_write_json(out / CONFIG_FILE, jsonable(run_config))
            fsync_dir(out)
            writer = PredictionWriter(out / PREDICTIONS_FILE, (r["id"] for r in previous))
        done = {r["id"] for r in previous}
        todo = [(i, example) for i, example in enumerate(examples) if ids[i] not in done]
        new_records: list[dict] = []
        lock = threading.Lock()
        stop: list[str] = []
        bar = _progress(len(examples), len(done), progress)
        running = [sum(r.get("metrics", {}).get(metric_names[0], 0) or 0 for r in previous), len(previous)]

        def work(item):
            position, example = item
            if stop:
                return None
            try:
                record = run_example(program, example, position, resolved)
            except BudgetExceeded as error:
                with lock:
                    if not stop:
                        stop.append(str(error))
                return None
            written = writer.write(record) if writer is not None else True
            with lock:
                if written:
                    new_records.append(record)
                    running[0] += record["metrics"].get(metric_names[0], 0) or 0
                    running[1] += 1
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix({metric_names[0]: f"{running[0] / running[1]:.3f}"})
            return True

        started = time.perf_counter()
        try:
            with metering(max_calls, max_cost):
                executor = ParallelExecutor(num_threads=threads, max_errors=len(todo) + 1, disable_progress_bar=True,
                                            timeout=0)
                if todo:
                    executor.execute(work, todo)
        finally:
            if writer is not None:
                writer.close()
            if bar is not None:
                bar.close()
        records = previous + new_records
        order = {identifier: i for i, identifier in enumerate(ids)}
        records.sort(key=lambda r: order.get(r["id"], len(order)))
        extra = {"wall_seconds": round(time.perf_counter() - started, 3), "threads": threads,
                 "stopped": stop[0] if stop else None, "resumed_from": len(previous)}
        summary = summarize(records, metric_names, total=len(examples), extra=extra)
        for key in ("method", "program", "dataset", "split", "lm"):
            if key in run_config:
                summary[key] = run_config[key]
        if out is not None:
            atomic_write_json(out / SUMMARY_FILE, summary)
        else:
            summary["records"] = records
    return summary


def _progress(total: int, initial: int, enabled: bool | None):
    if enabled is False:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="evaluate", unit="q", file=sys.stderr,
                disable=None if enabled is None else not enabled, dynamic_ncols=True)


def load_run(run_dir: str | os.PathLike) -> tuple[dict, dict, list[dict]]:
    """(config, summary, records) of a run directory; the summary is recomputed if missing."""
    run = Path(run_dir)
    if not (run / CONFIG_FILE).is_file():
        raise RunError(f"{run} is not a ragzoo run directory (no {CONFIG_FILE}); pass the --out of an evaluate")
    try:
        config = json.loads((run / CONFIG_FILE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RunError(f"{run / CONFIG_FILE} is corrupt; rerun the evaluation") from None
    records = read_predictions(run / PREDICTIONS_FILE)
    summary = None
    if (run / SUMMARY_FILE).is_file():
        try:
            summary = json.loads((run / SUMMARY_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            summary = None
    if summary is None:
        summary = summarize(records, list(config.get("metrics") or ["em"]), total=config.get("n"))
    return config, summary, records
