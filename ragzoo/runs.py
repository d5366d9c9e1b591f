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
`ragzoo.tracing.trace_example()`; an exception of one example (parse error, LM error, retriever error, a
missed `deadline`) is recorded in one line and scored 0 and the run goes on; re-asks, lenient reads and
degradations are counted per example (`reasks`, `lenient_reads`, `degradations` + `degraded`) and in the
summary. `retry_failed=True` runs again exactly the failed examples; a run whose first examples fail for
the setup (LM, timeout, retriever) stops early (`summary["aborted"]`). `threads > 1` runs examples on threads (`run_threads`), each under the
caller's DSPy settings (`dspy.context(lm=...)`, adapter, callbacks), as DSPy's `ParallelExecutor` copies them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ragzoo.config import answer_differences, answer_view
from ragzoo.errors import BudgetExceeded, RunError, Stopping, one_line
from ragzoo.files import atomic_write_bytes, atomic_write_json, jsonable
from ragzoo.machine import usable_cpus

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
# spend no record of predictions.jsonl holds, one line each ("why"): a failed attempt `--retry-failed` ran again
# ("retried"; its record was replaced) and LM calls that returned after their question's deadline ("late"; its
# timeout record was written at the deadline)
EXTRA_USAGE_FILE = "extra_usage.jsonl"
USAGE_KEYS = ("lm_calls", "prompt_tokens", "completion_tokens", "cost", "cached_calls", "cached_prompt_tokens",
              "cached_completion_tokens", "cached_cost")
RUN_FILES = (CONFIG_FILE, PREDICTIONS_FILE, SUMMARY_FILE, EXTRA_USAGE_FILE)
LOCK_FILE = ".ragzoo-run.lock"
SLOTS_DIR = ".ragzoo-slots"  # `evaluate --processes`: the workers' shared endpoint limits, empty lock files
DEFAULT_DEADLINE = 600.0  # seconds one example may take before it is recorded as a timeout failure


class ExampleTimeout(TimeoutError):
    """An example that did not finish within its deadline (its calls may still be running; it is recorded)."""


class SetupBroken(RunError):
    """A run stopped early because so many examples failed that the setup (server, key, model) looks broken."""

    exit_code = 5


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
    if any(isinstance(link, ValueError) and str(link).startswith("No LM is loaded") for link in chain):
        return "lm"  # DSPy's word for no LM configured: a setup failure, which stops the run early
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


def _candidates(prediction) -> dict:
    """{"candidates": [...]} when the method produced candidate answers (samples, agents' answers, votes: the
    pool the oracle metrics choose from, kept so a run can be rescored), else nothing."""
    candidates = prediction.get("candidates") if prediction is not None else None
    return {"candidates": jsonable(list(candidates))} if isinstance(candidates, (list, tuple)) else {}


def storable_record(record: dict) -> dict:
    """A run record as it may be written: every text `ragzoo.secrets.scrub`bed (an upstream that echoes the key
    in its answer, its error or a re-ask must not get it stored), the id kept as is (it is the record's
    identity: resume and report match it with the data's). A record with nothing to hide (nearly all) is
    returned as it is, to be serialized: copying it string by string cost ~5% of a question's CPU."""
    from ragzoo.secrets import holds_secret, scrub

    if not holds_secret(record):
        return record
    return {**scrub(record), "id": record["id"]} if "id" in record else scrub(record)


def _write_record_json(path: Path, value: dict) -> None:
    from ragzoo.secrets import scrub

    atomic_write_json(path, scrub(value))


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(record_line(r) for r in records)


def record_line(record: dict) -> bytes:
    """A run record as its line of predictions.jsonl (`storable_record`: no secret)."""
    return _line(storable_record(record))


def _line(stored: dict) -> bytes:
    return (json.dumps(stored, ensure_ascii=False, default=str) + "\n").encode()


class PredictionWriter:
    """Appends one JSON line per example (`record_line`: no secret), flushed at once; thread-safe; never
    writes an id twice."""

    def __init__(self, path: Path, done_ids: Iterable[str] = ()):
        self.path = path
        self._ids = set(done_ids)
        self._lock = threading.Lock()
        self._handle = open(path, "ab")

    def write(self, record: dict) -> bool:
        return self.write_line(record["id"], record_line(record))

    def write_line(self, identifier: str, line: bytes) -> bool:
        """Append `line`, the record `identifier` as `record_line` made it (in an `evaluate --processes` worker)."""
        with self._lock:
            if self._handle.closed:
                return False  # the run was interrupted and closed: a straggler's result is not kept
            if identifier in self._ids:
                return False  # a straggler re-run of an example already written
            self._handle.write(line)
            self._handle.flush()  # in the OS page cache now: survives a SIGKILL of this process
            self._ids.add(identifier)
            return True

    def close(self) -> None:
        with self._lock:
            if not self._handle.closed:
                self._handle.flush()
                os.fsync(self._handle.fileno())
                self._handle.close()


def keep_retried(out: Path, failed: list[dict]) -> None:
    """Before `--retry-failed` drops the failed records from predictions.jsonl: their spend, appended (and synced)
    to EXTRA_USAGE_FILE, so the run's usage still counts what they cost. A record already kept (a retry killed
    between the two writes) is not kept twice: each line carries the digest of the record it came from."""
    import hashlib

    path = out / EXTRA_USAGE_FILE
    kept = {line.get("digest") for line in _extra_usage_lines(path)}
    lines = []
    for record in failed:
        digest = hashlib.sha256(record_line(record)).hexdigest()
        if digest not in kept:
            lines.append({"why": "retried", "id": record["id"], "error": (record.get("error") or {}).get("kind"),
                          **{key: record.get(key) or 0 for key in USAGE_KEYS}, "digest": digest})
    _append_extra_usage(path, lines)


def calls_usage(calls: list) -> dict:
    """The usage (USAGE_KEYS) of LM calls (`ragzoo.tracing.LMCallRecord`s), as a record or a ledger line holds it."""
    return {"lm_calls": len(calls), "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "cost": round(sum(c.cost for c in calls), 8), "cached_calls": sum(1 for c in calls if c.cached),
            "cached_prompt_tokens": sum(c.cached_prompt_tokens for c in calls),
            "cached_completion_tokens": sum(c.cached_completion_tokens for c in calls),
            "cached_cost": round(sum(c.cached_cost for c in calls), 8)}


def late_usage(identifier: str, calls: list, why: str = "late") -> dict:
    """The ledger line of LM calls that returned after question `identifier`'s deadline, when its timeout record
    was already written; `why="cut"`: the calls a question made before the budget stopped it (no record holds
    them, and a resume asks it again)."""
    return {"why": why, "id": identifier, **calls_usage(calls)}


def usage_totals(records: list[dict], unrecorded: dict | None = None) -> dict[str, float]:
    """Each of USAGE_KEYS summed over `records`, plus what no record holds (`extra_usage`): what was paid for them."""
    unrecorded = unrecorded or {}
    return {key: sum(float(r.get(key) or 0) for r in records) + float(unrecorded.get(key) or 0)
            for key in USAGE_KEYS}


def _append_extra_usage(path: Path, lines: list[dict]) -> None:
    if lines:
        with open(path, "ab") as handle:
            handle.write(_jsonl(lines))
            handle.flush()
            os.fsync(handle.fileno())


def extra_usage(run_dir: str | os.PathLike | None, ids: Iterable | None = None) -> dict:
    """The summed usage (USAGE_KEYS) no record of `run_dir` holds (EXTRA_USAGE_FILE), of the questions `ids` only
    when given, with how much of it each cause spent ("retried_calls", "retried_cost", "late_calls", "late_cost");
    {} when there is none."""
    if run_dir is None:
        return {}
    wanted = None if ids is None else set(ids)
    lines = [line for line in _extra_usage_lines(Path(run_dir) / EXTRA_USAGE_FILE)
             if wanted is None or line.get("id") in wanted]
    return summed_extra_usage(lines)


def summed_extra_usage(lines: list[dict]) -> dict:
    """`extra_usage` of ledger lines already read (or of a run kept in memory)."""
    if not lines:
        return {}
    summed = {key: sum(float(line.get(key) or 0) for line in lines) for key in USAGE_KEYS}
    for key in ("server_seconds", "server_cost"):  # a server rented by the hour (`--price-per-hour`): run time
        summed[key] = sum(float(line.get(key) or 0) for line in lines)
    for why in ("retried", "late", "cut"):
        summed[f"{why}_calls"] = sum(int(line.get("lm_calls") or 0) for line in lines if line.get("why") == why)
        summed[f"{why}_cost"] = sum(float(line.get("cost") or 0) for line in lines if line.get("why") == why)
    return summed


def _extra_usage_lines(path: Path) -> list[dict]:
    lines = []
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if isinstance(line, dict):
            wrong = [key for key in (*USAGE_KEYS, "server_seconds", "server_cost")
                     if line.get(key) is not None and not is_count(line[key])]
            if wrong:  # what was paid is summed from these: a damaged figure must not become an error or a nan
                raise RunError(f"{path}:{number} is corrupt ({', '.join(wrong)} not a finite number >= 0); "
                               f"restore the line or remove the run")
            lines.append(line)
    return lines


def is_count(value) -> bool:
    """A usage figure as a run's files may hold it: a finite number, not below 0 (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def metric_failures(records: Iterable[dict], names: Iterable[str] | None = None) -> dict[str, int]:
    """How many `records` each metric raised on (their `metric_errors`: scored 0 by it), for `names` in their order
    (None: every metric that raised)."""
    counts: dict[str, int] = {}
    for record in records:
        for name in record.get("metric_errors") or {}:
            counts[name] = counts.get(name, 0) + 1
    return counts if names is None else {name: counts[name] for name in names if name in counts}


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
            if not repair:  # a whole line, newline and all, that is not JSON: not a write cut short
                raise RunError(f"{path}: line {index + 1} is not valid JSON; the run file was edited or is corrupt: "
                               f"rerun with --resume to repair it") from None
            record = None
        identifier = record.get("id") if isinstance(record, dict) else None
        if not isinstance(identifier, (str, int)) or isinstance(identifier, bool) or identifier in seen:
            if record is not None and not repair:  # a whole line that is not a record: edited or corrupt
                raise RunError(f"{path}: line {index + 1} is not a prediction record (no valid id, or a repeated "
                               f"one); the run file was edited or is corrupt: rerun with --resume to repair it")
            dropped += 1
            continue
        seen.add(record["id"])
        records.append(record)
    if repair and (dropped or (raw and not raw.endswith(b"\n"))):
        atomic_write_bytes(path, _jsonl(records))
        logger.warning("%s: dropped %d incomplete line(s) left by an interrupted run", path, dropped)
    return records


# What must match to resume a run: every option that changes answers, from the one list evaluate, compile and
# grids share (`ragzoo.config.ANSWER_OPTIONS`, `ANSWER_LM_KEYS`); the questions themselves are checked one by
# one (`check_same_questions`: `n` may grow, a resumed run extends to more questions).
def _resume_view(config: dict) -> dict:
    return answer_view(config)


def check_same_questions(records: list[dict], examples: list, ids: list[str], out: Path) -> None:
    """Every finished record of a resumed run must be one of `examples`, with the same question and gold answer
    (an edited data file, or another sample, would mix two sets of questions in one run)."""
    from ragzoo.secrets import scrub

    by_id = dict(zip(ids, examples))
    for record in records:
        example = by_id.get(record["id"])
        if example is None:
            raise RunError(f"cannot resume {out}: question {record['id']!r} of the interrupted run is not among "
                           f"these questions; use the same data or another --out")
        question, gold = example.get("question"), jsonable(_gold(example))
        # records are written scrubbed: a question holding a secret's value is still the same question
        if record.get("question") not in (question, scrub(question)) or record.get("gold") not in (gold, scrub(gold)):
            raise RunError(f"cannot resume {out}: question {record['id']!r} changed since the interrupted run (an "
                           f"edited data file?); use the same data or another --out")


def _check_run_dir(out: Path, config: dict, resume: bool, force: bool,
                   recorded_as: dict | None = None) -> tuple[Path, bool]:
    """Refusals that need no write. Returns the folder to write (a symbolic link to a run: the run folder
    itself) and whether it already holds a run. `recorded_as`: values an earlier version recorded for what this
    run's config says otherwise, which a resume takes as the same (key -> (earlier value, this run's)).

    Only a folder ragzoo made for a run (`ragzoo.ownership`) is ever written into: `--resume`/`--force` are
    weighed after that, so they never apply to a user's folder, a look-alike config.json or another kind."""
    from ragzoo.ownership import claim

    found = claim(out, "run", error=RunError)
    is_run = found.existing and (found.path / CONFIG_FILE).is_file()
    if is_run and not resume and not force:
        raise RunError(f"{out} already holds a run; pass --resume to continue it or --force to start over")
    if is_run and resume:
        try:
            previous = json.loads((found.path / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise RunError(f"{out / CONFIG_FILE} is unreadable; start a new run with another --out") from None
        if not isinstance(previous, dict) or not isinstance(previous.get("metrics"), list):
            raise RunError(f"{out / CONFIG_FILE} is not a run configuration; start a new run with another --out")
        for key, (earlier, truth) in (recorded_as or {}).items():
            if previous.get(key) == earlier:
                previous = {**previous, key: truth}
        before, now = _resume_view(previous), _resume_view(config)
        # a key the interrupted run did not record matches only an unset one: a config sharing no key with this
        # run's is another run, not this one
        differing = answer_differences(before, now)
        if differing:
            raise RunError(f"cannot resume {out}: {'; '.join(differing)} (options that change answers); rerun with "
                           f"the interrupted run's options, or use another --out")
    return found.path, is_run


@contextlib.contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    """Hold `out` for this process, for as long as the block runs. The lock is the kernel's (flock), so a crash
    or kill releases it, and it is taken on the run folder itself: deleting, renaming or replacing the lock
    file cannot let a second writer in. The lock file is still held too, for its pid (named in the refusal) and
    for ragzoo versions that lock only the file. Where a folder cannot be locked (flock emulated over NFS wants
    a file open for writing), the lock file alone guards the run, as before."""
    import errno
    import fcntl

    def refuse(handle) -> RunError:
        handle.seek(0)
        owner = handle.read().strip() or "?"
        return RunError(f"{out} is being written by another ragzoo process (pid {owner}); wait for it to finish "
                        f"or choose another --out")

    def held_elsewhere(fd: int) -> bool | None:
        """False once locked here, True if another process holds it, None if this filesystem cannot lock it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            return True if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) else None
        return False

    from ragzoo.files import forget_lock, keep_lock_from_children

    folder = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    handle = None
    keep_lock_from_children(folder)
    try:
        handle = open(out / LOCK_FILE, "a+", encoding="utf-8")
        keep_lock_from_children(handle.fileno())
        if held_elsewhere(folder) or held_elsewhere(handle.fileno()):
            raise refuse(handle)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        if handle is not None:
            forget_lock(handle.fileno())
            handle.close()
        forget_lock(folder)
        os.close(folder)  # closing the last descriptor releases the folder's lock


def run_held(out: str | os.PathLike) -> bool:
    """Whether another live process writes run folder `out` (holds `_run_lock`): the folder's lock, or where a
    filesystem cannot lock a folder (NFS), the lock file's."""
    from ragzoo import files

    held = files.in_use(out)
    if held is None:
        held = files.in_use(Path(out) / LOCK_FILE, writable=True)
    return bool(held)


@contextlib.contextmanager
def open_run_dir(out_dir: str | os.PathLike, config: dict, *, resume: bool = False,
                 force: bool = False, recorded_as: dict | None = None) -> Iterator[Path]:
    """Create or reopen a run directory and own it while the block runs (the caller writes its config). Refuses a
    folder ragzoo did not make for a run (`ragzoo.ownership.claim`: a user's folder, `.`, $HOME, a git working
    tree, a folder of another kind), a run without `resume`/`force`, a resume whose configuration differs (other
    questions, program, retriever, LM or metrics), and a run another process is writing. `force` removes only the
    run's own files; anything else in the folder stays."""
    from ragzoo.ownership import mark

    out, _ = _check_run_dir(Path(out_dir), config, resume, force, recorded_as)
    out.mkdir(parents=True, exist_ok=True)
    with _run_lock(out):
        _, is_run = _check_run_dir(out, config, resume, force, recorded_as)  # again: no one else can change it
        mark(out, "run", (*RUN_FILES, LOCK_FILE))
        if force and not resume and is_run:
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
        yield out  # the caller writes config.json once it has checked what it resumes


# Every key of a record that `summarize` and `evaluate`'s progress read: all an `evaluate --processes` worker sends
# the parent beside the line it wrote, so the parent never parses a whole record
SUMMARY_KEYS = ("id", "metrics", "error", "reasks", "lenient_reads", "degradations", "lm_calls", "prompt_tokens",
                "completion_tokens", "cost", "retrievals", "cached_calls", "cached_prompt_tokens",
                "cached_completion_tokens", "cached_cost", "latency", "metric_errors")


def summary_view(record: dict) -> dict:
    return {key: record[key] for key in SUMMARY_KEYS if key in record}


def summarize(records: list[dict], metric_names: list[str], *, total: int | None = None,
              extra: dict | None = None, unrecorded: dict | None = None) -> dict:
    """Summary of prediction records: metric means (failures count 0), counts, failures by kind, usage.
    `unrecorded`: the usage no record holds (`extra_usage`: retried attempts, calls past a deadline), counted in
    every usage figure (it was paid)."""
    n = len(records)
    failures: dict[str, int] = {}
    for record in records:
        if record.get("error"):
            kind = record["error"].get("kind", "other")
            failures[kind] = failures.get(kind, 0) + 1
    unrecorded = unrecorded or {}

    def total_of(key: str) -> float:
        return sum(float(r.get(key) or 0) for r in records) + float(unrecorded.get(key) or 0)

    reasked = sum(1 for r in records if r.get("reasks"))
    degraded = sum(1 for r in records if r.get("degradations"))
    summary = {
        "n": n,
        "n_expected": total if total is not None else n,
        "complete": total is None or n >= total,
        "metrics": {name: (sum(float(r.get("metrics", {}).get(name) or 0) for r in records) / n if n else 0.0)
                    for name in metric_names},
        "failures": sum(failures.values()),
        "failures_by_kind": dict(sorted(failures.items())),
        # questions whose metric raised (scored 0 by it): a broken custom metric is not a model scoring 0
        "metric_failures": metric_failures(records, metric_names),
        "reasks": int(total_of("reasks")),
        "examples_reasked": reasked,
        "lenient_reads": int(total_of("lenient_reads")),
        "degradations": int(total_of("degradations")),
        "examples_degraded": degraded,
        "usage": {
            "lm_calls": int(total_of("lm_calls")),
            "prompt_tokens": int(total_of("prompt_tokens")),
            "completion_tokens": int(total_of("completion_tokens")),
            "cost": round(total_of("cost"), 6),
            "retrievals": int(total_of("retrievals")),
            "lm_calls_per_question": total_of("lm_calls") / n if n else 0.0,
            "tokens_per_question": (total_of("prompt_tokens") + total_of("completion_tokens")) / n if n else 0.0,
            "cached_calls": int(total_of("cached_calls")),
            # spend above; what the same calls would have used and cost with no cache below
            "tokens_if_uncached": int(total_of("prompt_tokens") + total_of("completion_tokens")
                                      + total_of("cached_prompt_tokens") + total_of("cached_completion_tokens")),
            "tokens_per_question_if_uncached": (total_of("prompt_tokens") + total_of("completion_tokens")
                                                + total_of("cached_prompt_tokens")
                                                + total_of("cached_completion_tokens")) / n if n else 0.0,
            "cost_if_uncached": round(total_of("cost") + total_of("cached_cost"), 6),
            "latency_mean": total_of("latency") / n if n else 0.0,
            # of the figures above: failed attempts --retry-failed ran again, calls that returned past a deadline
            "retried_calls": int(unrecorded.get("retried_calls") or 0),
            "retried_cost": round(float(unrecorded.get("retried_cost") or 0), 6),
            "late_calls": int(unrecorded.get("late_calls") or 0),
            "late_cost": round(float(unrecorded.get("late_cost") or 0), 6),
            # ... and what questions cut by a budget paid before it stopped them (a resume asks them again)
            "cut_calls": int(unrecorded.get("cut_calls") or 0),
            "cut_cost": round(float(unrecorded.get("cut_cost") or 0), 6),
            # --price-per-hour: the rented server's time over the folder's runs, priced apart from the tokens
            **({"server_seconds": round(float(unrecorded["server_seconds"]), 3),
                "server_cost": round(float(unrecorded["server_cost"]), 6),
                "total_cost": round(total_of("cost") + float(unrecorded["server_cost"]), 6)}
               if unrecorded.get("server_cost") else {}),
        },
    }
    summary.update(extra or {})
    return summary


class _Runners:
    """Daemon threads that run examples under a deadline, reused from one example to the next: a thread made per
    example cost ~15% of evaluate's CPU at 256 threads. An example past its deadline keeps its thread until it
    ends (its LM requests end with their own timeout); a thread idle for `IDLE` seconds exits."""

    IDLE = 30.0

    def __init__(self) -> None:
        import queue

        self._tasks: "queue.SimpleQueue" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a task, less the tasks queued for them

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0:
                threading.Thread(target=self._loop, name="ragzoo-example", daemon=True).start()
                self._idle += 1
            self._idle -= 1
            self._tasks.put(task)  # under the lock: an idle thread deciding to exit sees it

    def _loop(self) -> None:
        import queue

        while True:
            try:
                task = self._tasks.get(timeout=self.IDLE)
            except queue.Empty:
                with self._lock:
                    if self._tasks.empty():
                        self._idle -= 1
                        return
                continue
            task()
            del task
            with self._lock:
                self._idle += 1


_RUNNERS = _Runners()
if hasattr(os, "register_at_fork"):  # a forked child has none of these threads (`evaluate --processes`)
    os.register_at_fork(after_in_child=_RUNNERS.__init__)


def call_with_deadline(fn: Callable[[], Any], deadline: float | None) -> Any:
    """`fn()` in this thread's context, or `ExampleTimeout` after `deadline` seconds (None/0: no deadline). The
    call runs in a daemon thread (`_RUNNERS`, reused) that is left behind on a timeout: its result, if it ever
    comes, is dropped (its LM requests end with their own per-call timeout)."""
    import contextvars

    from ragzoo.endpoints import start_question_deadline

    if not deadline:
        return fn()
    context = contextvars.copy_context()
    context.run(start_question_deadline, deadline)  # the example's LM calls stop retrying 429s at its deadline
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = exc
        finally:
            done.set()

    _RUNNERS.submit(target)
    if not done.wait(deadline):
        raise ExampleTimeout(f"the example did not finish within its {deadline:g} s deadline (--deadline)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class _Watchdog:
    """The one thread that ends the examples of `run_threads` pools that pass their deadline. Such an example runs
    in its pool thread itself (a second thread per example, the first waiting on it, cost ~0.4 ms of CPU per LM
    call at 64 threads): past the deadline, the watchdog hands on its timeout record and has another thread take
    the pool's next questions in place of the one left behind (`_PoolSlot.leave`)."""

    IDLE = 30.0  # seconds with nothing to watch before the thread exits

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._heap: list = []  # (monotonic deadline, sequence, entry); an ended example's entry is emptied
        self._watched = 0  # entries not emptied yet
        self._sequence = 0
        self._running = False

    def watch(self, seconds: float, expire: Callable[[], None]) -> list:
        """Call `expire()` (on the watchdog thread) `seconds` from now, unless `cancel` comes first."""
        import heapq

        entry = [expire]
        with self._changed:
            self._sequence += 1
            heapq.heappush(self._heap, (time.monotonic() + seconds, self._sequence, entry))
            self._watched += 1
            if len(self._heap) > 2 * self._watched + 64:  # ended examples' entries: dropped in one pass
                self._heap = [item for item in self._heap if item[2][0] is not None]
                heapq.heapify(self._heap)
            if not self._running:
                self._running = True
                threading.Thread(target=self._loop, name="ragzoo-deadlines", daemon=True).start()
            elif self._heap[0][2] is entry:
                self._changed.notify()
        return entry

    def cancel(self, entry: list) -> None:
        with self._changed:
            if entry[0] is not None:
                entry[0] = None
                self._watched -= 1

    def _loop(self) -> None:
        import heapq

        while True:
            with self._changed:
                while self._heap and self._heap[0][2][0] is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    if not self._changed.wait(self.IDLE) and not self._heap:
                        self._running = False
                        return
                    continue
                due = self._heap[0][0] - time.monotonic()
                if due > 0:
                    self._changed.wait(due)
                    continue
                entry = heapq.heappop(self._heap)[2]
                expire, entry[0] = entry[0], None
                self._watched -= 1
            try:
                expire()
            except Exception:  # noqa: BLE001 - one example's hand-over must not end the watch of the others
                logger.exception("evaluate: handing on a timed-out example failed")


_WATCHDOG = _Watchdog()
_POOL = threading.local()  # .slot: this thread's `_PoolSlot` while it is a `run_threads` pool thread
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG.__init__)


class _PoolSlot:
    """A `run_threads` pool thread's place in its pool. `leave()` (the watchdog, once the thread's example passed
    its deadline) starts a thread to take the pool's next items in its place; the thread stops after that
    example, whenever it ends."""

    def __init__(self, replace: Callable[[], None]) -> None:
        self.left = False
        self._replace = replace

    def leave(self) -> None:
        if not self.left:
            self._replace()
            self.left = True


def program_inputs(program, example) -> dict:
    """The example's inputs, plus the gold fields a program in an oracle setting declares it needs at test
    time (`program.oracle_inputs`: FILCO's SILVER, Post-Fusion's "with gold passage"); such runs are upper
    bounds by construction, and their config records the knob that made them so."""
    inputs = dict(example.inputs())
    for name in getattr(program, "oracle_inputs", ()) or ():
        value = example.get(name)
        if value is not None:
            inputs[name] = value
    return inputs


def _error_record(exc: BaseException) -> dict:
    from ragzoo.secrets import redact  # a server that echoes the key must not get it stored

    return {"kind": classify_error(exc), "type": type(exc).__name__, "message": one_line(redact(str(exc)))}


def run_example(program, example, position: int, metrics: list[tuple[str, Callable]], *,
                deadline: float | None = None, deliver: Callable[[dict], Any] | None = None,
                late: Callable[[dict], Any] | None = None) -> dict | None:
    """Run one example inside a trace and return its prediction record (exceptions recorded, scored 0).
    `BudgetExceeded` propagates: the example was not run and must not be recorded. With `deadline`, an example
    still running after that many seconds is recorded as a `timeout` failure.

    In a `run_threads` pool thread, with `deliver`, the example runs in this thread: past its deadline the
    watchdog hands its timeout record to `deliver` and another thread takes the pool's next questions; this
    call then returns None whenever the example ends (its late result is dropped), and the LM calls that
    returned after the deadline, paid but in no record, go to `late` (`late_usage`: the run's EXTRA_USAGE_FILE)."""
    import contextvars

    from ragzoo.tracing import trace_example

    prediction, error = None, None
    started = time.perf_counter()
    slot = getattr(_POOL, "slot", None) if deadline and deliver is not None else None
    with trace_example() as trace:
        if slot is None:
            try:
                prediction = call_with_deadline(lambda: program(**program_inputs(program, example)), deadline)
            except BudgetExceeded:
                _cut_calls(example_id(example, position), trace, late)
                raise
            except Exception as exc:  # one example's failure is data, not the end of the run
                error = _error_record(exc)
            return _example_record(program, example, position, metrics, prediction, error, trace, started)

        from ragzoo.endpoints import start_question_deadline

        ended = threading.Lock()  # held by whichever comes first: the example's end or its deadline
        recorded: list[int] = []  # the LM calls its timeout record counted

        def expire() -> None:
            if not ended.acquire(blocking=False):
                return
            try:
                timeout = ExampleTimeout(f"the example did not finish within its {deadline:g} s deadline "
                                         f"(--deadline)")
                record = _example_record(program, example, position, metrics, None, _error_record(timeout), trace,
                                         started)
                recorded.append(record["lm_calls"])
                deliver(record)
            finally:
                slot.leave()

        context = contextvars.copy_context()  # the question's deadline is its own (it is not reset)
        context.run(start_question_deadline, deadline)  # its LM calls stop retrying 429s at its deadline
        watched = _WATCHDOG.watch(deadline, expire)
        try:
            prediction = context.run(program, **program_inputs(program, example))
        except Exception as exc:  # one example's failure is data, not the end of the run
            if isinstance(exc, BudgetExceeded):  # not run: not recorded (unless its deadline came first)
                if ended.acquire(blocking=False):
                    _cut_calls(example_id(example, position), trace, late)
                    raise
                _late_calls(example_id(example, position), trace, recorded, late)
                return None
            error = _error_record(exc)
        except BaseException:  # not a failure of the example: no record, as without a deadline
            if ended.acquire(blocking=False):
                raise
            _late_calls(example_id(example, position), trace, recorded, late)
            return None
        finally:
            _WATCHDOG.cancel(watched)
        if not ended.acquire(blocking=False):  # past its deadline: the watchdog recorded it
            _late_calls(example_id(example, position), trace, recorded, late)
            return None
        return _example_record(program, example, position, metrics, prediction, error, trace, started)


def _cut_calls(identifier: str, trace, late: Callable[[dict], Any] | None) -> None:
    """The calls a question paid before the budget refused its next one, to `late` (the run's ledger)."""
    calls = list(trace.lm_calls)
    if late is not None and calls:
        late(late_usage(identifier, calls, why="cut"))


def _late_calls(identifier: str, trace, recorded: list[int], late: Callable[[dict], Any] | None) -> None:
    """The calls of a question that ended past its deadline, beyond those its timeout record counted, to `late`."""
    calls = list(trace.lm_calls)
    if late is not None and recorded and len(calls) > recorded[0]:
        late(late_usage(identifier, calls[recorded[0]:]))


def _example_record(program, example, position: int, metrics, prediction, error: dict | None, trace,
                    started: float) -> dict:
    latency = time.perf_counter() - started
    calls = list(trace.lm_calls)  # a timed-out example's calls may still be landing
    scores, metric_errors = {}, {}
    for name, metric in metrics:
        if prediction is None:
            scores[name] = 0.0
        elif hasattr(metric, "scored"):  # `SafeMetric`: a metric that raised scores 0, and the record says so
            scores[name], failed = metric.scored(example, prediction)
            if failed:
                from ragzoo.secrets import redact

                metric_errors[name] = one_line(redact(failed), 200)
        else:
            scores[name] = metric(example, prediction)
    usage = calls_usage(calls)
    degradations = list(trace.degradations)
    if prediction is not None:  # a method may also return what it degraded on its prediction
        for item in prediction.get("degradations") or []:
            if item not in degradations:
                degradations.append(item if isinstance(item, dict) else {"where": "?", "what": str(item)})
    answer = prediction.get("answer") if prediction is not None else None
    lm_trace = [{"predictor": c.signature, "prompt_tokens": c.prompt_tokens,
                 "completion_tokens": c.completion_tokens, "cached": c.cached,
                 # `evaluate --keep-prompts`: what the call sent and got back
                 **({"prompt": c.prompt, "reply": c.reply} if c.prompt is not None else {})} for c in calls]
    from ragzoo.diagnostics import attribute, stage_records

    record = {
        "id": example_id(example, position),
        "question": example.get("question"),
        "gold": jsonable(_gold(example)),
        "prediction": jsonable(answer),
        "metrics": scores,
        "passages": _passages(prediction),
        **_candidates(prediction),
        **usage,
        "retrievals": len(trace.retrievals),
        "lm_trace": lm_trace,
        # issue 23: each declared stage's outputs, the evidence pids, and the error's class (ragzoo.diagnostics)
        **stage_records(prediction, program, lm_trace, example),
        "reasks": len(trace.reasks),
        "lenient_reads": len(trace.lenient),
        "degradations": len(degradations),
        "degraded": degradations,
        "reasked": list(trace.reasks),
        "latency": round(latency, 4),
        "error": error,
        **({"metric_errors": metric_errors} if metric_errors else {}),
    }
    record["attribution"] = attribute(record)
    return record


SETUP_FAILURE_KINDS = ("lm", "timeout", "retriever")


def evaluate(program, examples: list, metrics: str | Callable | list = "em", out_dir: str | os.PathLike | None = None,
             *, threads: int = 1, resume: bool = False, force: bool = False, config: dict | None = None,
             progress: bool | None = None, max_calls: int | None = None, max_cost: float | None = None,
             deadline: float | None = DEFAULT_DEADLINE, retry_failed: bool = False, adapter=None,
             abort_failure_rate: float | None = 0.5, abort_min_examples: int = 10,
             refuse_leakage: bool = False, processes: int | None = 1) -> dict:
    """Evaluate `program` on `examples` with the active DSPy LM; write a run directory at `out_dir` (or keep
    everything in memory when None). Returns the summary (also in summary.json); the records of this call
    are in `summary["records"]` when `out_dir` is None.

    Real models: `adapter` ("chat", "json", "xml": ragzoo's lenient adapters with bounded re-asks, see
    `ragzoo.adapters`; or an adapter object; default the active one, else DSPy's ChatAdapter) is recorded in the run config; `deadline`
    seconds per example (None: none) records a stalled example as a `timeout` failure and goes on;
    `retry_failed` (implies `resume`) runs again exactly the examples of the run that failed; once
    `abort_min_examples` examples of this call finished and at least `abort_failure_rate` of them failed
    for the setup (LM, timeout, retriever), the run stops early (`summary["aborted"]`, nothing more is
    started; None disables).

    Leakage: a program compiled on some of `examples` (see `ragzoo.leakage`) is evaluated with a warning and
    the overlap recorded in the run config and summary (`compiled_on`); `refuse_leakage` makes it an error.

    `processes` > 1 splits the questions over that many forked worker processes of `threads` threads each
    (`_run_in_processes`: one interpreter lock per process); this process keeps the run lock and writes every
    record; the workers share each endpoint's whole --max-concurrency (a worker that ends early leaves its part to
    the others) and split the --max-calls/--max-cost budget evenly, so together they never pass them. `processes`
    None: as many as `auto_processes` picks for the questions left (one, up to 64 requests in flight)."""
    import dspy

    from ragzoo.adapters import adapter_in_force, adapter_name, make_adapter
    from ragzoo.metrics.scoring import resolve_metrics, safe_metric
    from ragzoo.usage import Budget, metering

    Budget(max_calls, max_cost)  # a bad budget fails before the run directory is touched
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))
                                 or not math.isfinite(deadline) or deadline <= 0):
        raise RunError(f"--deadline must be a positive number of seconds, got {deadline!r}")
    if abort_failure_rate is not None and (isinstance(abort_failure_rate, bool)
                                           or not isinstance(abort_failure_rate, (int, float))
                                           or not 0 < abort_failure_rate <= 1):
        raise RunError(f"--abort-failure-rate must be in (0, 1], got {abort_failure_rate!r}")
    if not callable(program) or isinstance(program, type):
        raise RunError(f"evaluate takes a program (a dspy.Module, e.g. ragzoo.programs.get(...)), got "
                       f"{program.__name__ if isinstance(program, type) else type(program).__name__}")
    resume = resume or retry_failed
    if isinstance(adapter, str):
        adapter = make_adapter(adapter)
    elif adapter is None:  # None: DSPy's default ChatAdapter (the CLI always passes --adapter); a loaded program's own
        adapter = adapter_in_force(program, dspy.settings.adapter)
    resolved = [(name, safe_metric(fn)) for name, fn in resolve_metrics(metrics)]
    metric_names = [name for name, _ in resolved]
    from ragzoo.metrics.retrieval import check_gold_titles

    check_gold_titles(metric_names, examples)  # before the run folder is touched
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise RunError(f"--threads must be a positive integer, got {threads!r}")
    if processes is not None:
        check_processes(processes)
    ids = [example_id(example, i) for i, example in enumerate(examples)]
    if len(set(ids)) != len(ids):
        raise RunError("the examples have duplicate ids; give each question a unique id (--field-map id=...)")

    from ragzoo.leakage import overlap

    leaked = overlap(program, examples)
    if leaked:
        described = " and ".join(f"{count} in its {'training' if role == 'train' else 'validation'} questions"
                                 for role, count in leaked.items())
        if refuse_leakage:
            raise RunError(f"the program was compiled on {described} of these {len(examples)} questions: scores "
                           f"on them are not held out; evaluate on another split")
        logger.warning("the program was compiled on %s of these %d questions: those scores are not held out",
                       described, len(examples))
    run_config = dict(config or {})
    if run_config.get("n") is None:  # the questions asked, without -n too: a report of a killed run says n/N
        run_config["n"] = len(examples)
    recorded = _recorded_keys(out_dir) if resume else None  # the interrupted run's config, read once
    _describe_run(run_config, program, recorded)
    run_config["metrics"] = metric_names
    from ragzoo.metrics.judge import judge_config, judge_mark, judge_summary

    judge_before = judge_mark(resolved)  # the judge is the process's: this run reports what it adds
    judged = judge_config(resolved)  # an LM-judged metric: its prompts and judge LM, no secret ({} when none)
    if judged and processes is not None and processes > 1:  # the judge's meter is this process's: workers' unseen
        raise RunError(f"an LM-judged metric runs in one process (its calls and failed verdicts are counted "
                       f"there): drop --processes {processes} or judge in a later run")
    run_config.update(judged)
    run_config["compiled_on"] = leaked
    run_config["adapter"] = adapter_name(adapter)
    run_config["adapter_in_force"] = True  # what ran, not the caller's default (a run written before said "chat")
    run_config["lenient"] = getattr(adapter, "max_reasks", None) is not None
    run_config.setdefault("deadline", deadline)
    with contextlib.ExitStack() as stack:  # a run directory is owned by this process until the summary is written
        previous: list[dict] = []
        writer = None
        out = None
        if out_dir is not None:
            # a loaded program ran under its own adapter, which versions before 2026-11-26 recorded as the caller's
            # default "chat": its run resumes (and its config is corrected)
            own = adapter is getattr(program, "ragzoo_adapter", None) and run_config["adapter"] != "chat"
            written_before = resume and "adapter_in_force" not in (recorded or set())
            recorded_as = {"adapter": ("chat", run_config["adapter"])} if own and written_before else None
            out = stack.enter_context(open_run_dir(out_dir, run_config, resume=resume, force=force,
                                                   recorded_as=recorded_as))
            previous = read_predictions(out / PREDICTIONS_FILE, repair=True) if resume else []
            check_same_questions(previous, examples, ids, out)
            if retry_failed and any(r.get("error") for r in previous):
                keep_retried(out, [r for r in previous if r.get("error")])  # first: what they cost stays counted
                previous = [r for r in previous if not r.get("error")]
                atomic_write_bytes(out / PREDICTIONS_FILE, _jsonl(previous))
            _write_record_json(out / CONFIG_FILE, jsonable(run_config))  # which syncs the folder too
            writer = PredictionWriter(out / PREDICTIONS_FILE, (r["id"] for r in previous))
        done = {r["id"] for r in previous}
        todo = [(i, example) for i, example in enumerate(examples) if ids[i] not in done]
        # a resumed run's earlier calls were paid: they count against the budget, as a resumed compile's do, so
        # the same --max-calls does not pay again (cached calls cost nothing and count for neither)
        unrecorded_before = extra_usage(out) if resume and out is not None else {}
        earlier = usage_totals(previous, unrecorded_before) if resume and out is not None else {}
        earlier_calls = int(earlier.get("lm_calls", 0) - earlier.get("cached_calls", 0))
        earlier_cost = float(earlier.get("cost", 0.0)) + float(unrecorded_before.get("server_cost") or 0.0)
        left = Budget(max_calls, max_cost, earlier=(earlier_calls, earlier_cost))  # the one rule of what is left
        run_max_calls, run_max_cost = left.max_calls, left.max_cost
        if processes is None:
            asked = threads
            budgeted = max_calls is not None or max_cost is not None
            threads, processes = auto_processes(threads, len(todo), budget=budgeted,
                                                judged=bool(judged),
                                                retriever=getattr(program, "retriever", None))
            if processes > 1:
                import sys

                print(f"evaluate: {asked} threads run as {processes} processes of {threads} threads (past "
                      f"{IN_FLIGHT_PER_PROCESS} requests in flight one interpreter spends more CPU per LM call; "
                      f"--processes 1 keeps one)", file=sys.stderr, flush=True)
        elif processes > 1 and native_threads(getattr(program, "retriever", None)):
            import sys

            print(f"evaluate: --processes {processes} with a retriever that runs native thread pools "
                  f"({getattr(program.retriever, 'spec', '?')}): in the workers faiss and torch run on one thread "
                  f"each (a pool does not survive fork; an onnx engine's is not reset: prefer one process)",
                  file=sys.stderr, flush=True)
        if previous:  # a resume says where it starts, so no one wonders whether it started over
            import sys

            print(f"evaluate: resuming from {len(done)}/{len(examples)}", file=sys.stderr, flush=True)
        new_records: list[dict] = []
        lock = threading.Lock()
        stop: list[str] = []
        bar = _progress(len(examples), len(done), progress)
        running = [sum(r.get("metrics", {}).get(metric_names[0], 0) or 0 for r in previous), len(previous)]
        aborted: list[str] = []
        tally = {"finished": 0, "setup_failures": 0, "failures": 0, "last_error": ""}
        plain = _plain_progress(len(examples), progress, bar)
        min_examples = max(1, int(abort_min_examples))

        write_failed: list[OSError] = []
        closing = threading.Event()  # set on the way out (end, Ctrl-C): workers still running keep nothing

        def work(item):
            position, example = item
            if stop or closing.is_set():
                return None
            try:
                record = run_example(program, example, position, resolved, deadline=deadline, deliver=accept,
                                     late=note_unrecorded)
            except BudgetExceeded as error:
                with lock:
                    if not stop:
                        stop.append(str(error))
                return None
            except KeyboardInterrupt:  # Ctrl-C on a one-thread run without a deadline lands here: stop the run
                closing.set()
                raise
            except BaseException as error:  # noqa: BLE001 - never let the executor log a whole example
                from ragzoo.secrets import redact  # before the cut: a key cut in two is no longer its value

                said = f"example {example_id(example, position)}: {one_line(redact(str(error)), 200)}"
                logger.warning("%s", said)
                with lock:
                    lost.append(said)
                return None
            if record is None:  # past its deadline: the watchdog handed its record to accept
                return None
            return accept(record)  # which keeps nothing once the run is closing

        late_lines: list[dict] = []
        unfinished: list[int] = []  # questions past their deadline still at the LM when the run ended
        lost: list[str] = []  # why questions ended with no record (an internal error, a worker process gone)

        def note_unrecorded(line: dict) -> None:
            """What no record holds but was paid, kept in the run's EXTRA_USAGE_FILE while the run is open: LM calls
            of a question past its deadline that returned after its timeout record (a call returning after the
            run ended is not kept), the calls of a question cut by the budget, a rented server's time."""
            if not closing.is_set():
                keep_unrecorded(line)

        def keep_unrecorded(line: dict) -> None:
            with lock:
                late_lines.append(line)
                if out is not None:
                    try:
                        _append_extra_usage(out / EXTRA_USAGE_FILE, [line])
                    except OSError as error:
                        logger.warning("evaluate: the usage of %s was not kept: %s", line.get("why"), error)

        def accept(record: dict, line: bytes | None = None) -> bool | None:
            """Keep one finished record (from this process's threads), or a worker process's `line` (as
            `record_line` made it) with its `summary_view` as `record`."""
            if closing.is_set():
                return None
            try:
                if writer is None:
                    written = True
                else:
                    written = writer.write(record) if line is None else writer.write_line(record["id"], line)
            except OSError as error:  # a full disk or a lost folder: stop paying for examples that cannot be kept
                with lock:
                    write_failed.append(error)
                    stop.append(f"cannot write {PREDICTIONS_FILE} ({error.strerror or error})")
                return None
            with lock:
                if written:
                    new_records.append(record)
                    running[0] += record["metrics"].get(metric_names[0], 0) or 0
                    running[1] += 1
                    tally["finished"] += 1
                    if record.get("error"):
                        tally["failures"] += 1
                        if record["error"].get("kind") in SETUP_FAILURE_KINDS:
                            tally["setup_failures"] += 1
                            tally["last_error"] = f"{record['error']['kind']}: {record['error'].get('message', '')}"
                    if (abort_failure_rate is not None and not stop and tally["finished"] >= min_examples
                            and tally["setup_failures"] >= float(abort_failure_rate) * tally["finished"]):
                        reason = (f"{tally['setup_failures']} of the first {tally['finished']} examples failed for the "
                                  f"setup (last: {one_line(tally['last_error'], 200)}); the LM or retriever looks "
                                  f"broken")
                        aborted.append(reason)
                        stop.append(reason)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix({metric_names[0]: f"{running[0] / running[1]:.3f}"})
                    if plain is not None:
                        plain(running[1], tally["failures"])
            return True

        started = time.perf_counter()
        run_meter = None
        try:
            with (dspy.context(adapter=adapter) if adapter is not None else contextlib.nullcontext()), \
                    metering(max_calls, max_cost, earlier=(earlier_calls, earlier_cost)) as run_meter, \
                    _collector_set_aside():
                if todo and processes > 1:
                    budget_stop = _run_in_processes(todo, processes, threads, program, resolved, deadline,
                                                    run_max_calls, run_max_cost, accept, stop, out,
                                                    late=note_unrecorded, unfinished=unfinished, lost=lost,
                                                    left=left)
                    if budget_stop and not stop:
                        stop.append(budget_stop)
                elif todo:
                    unfinished.append(run_threads(work, todo, threads, pooled=deadline is not None))
        finally:
            closing.set()
            if run_meter is not None and run_meter.price_per_hour:  # a server rented by the hour: this run's time
                run_meter.update_server_cost()  # (kept however the run ended, Ctrl-C too)
                keep_unrecorded({"why": "server", "id": None, "server_cost": run_meter.usage.server_cost,
                                 "server_seconds": round(run_meter.usage.server_seconds, 3)})
            if writer is not None:
                try:
                    writer.close()
                except OSError as error:
                    write_failed.append(error)
            if bar is not None:
                bar.close()
        if write_failed:
            error = write_failed[0]
            raise RunError(f"writing {out / PREDICTIONS_FILE} failed ({error.strerror or error}); the run stopped at "
                           f"the first failed write and keeps the {len(previous) + len(new_records)} examples written: "
                           f"free disk space (or fix the folder) and rerun with --resume")
        records = previous + new_records
        if aborted and len(records) >= len(examples):  # the rule fired on the last question: nothing was stopped
            stop.remove(aborted.pop())
        # questions that ended with no record and no stop (an internal error, a worker process killed): never a
        # clean run, and not a budget stop either (a grid stops every cell on those)
        missing = len(examples) - len(records) if not stop and not aborted else 0
        order = {identifier: i for i, identifier in enumerate(ids)}
        records.sort(key=lambda r: order.get(r["id"], len(order)))
        extra = {"wall_seconds": round(time.perf_counter() - started, 3), "threads": threads, "processes": processes,
                 "stopped": stop[0] if stop and not aborted else None, "aborted": aborted[0] if aborted else None,
                 "resumed_from": len(previous), "adapter": run_config["adapter"],
                 "lost": ({"questions": missing, "why": lost[0] if lost else "reason unknown"} if missing > 0
                          else None),
                 # their calls still in flight were paid or will be, and are in no figure here
                 "still_at_lm_at_end": sum(unfinished)}
        unrecorded = extra_usage(out) if out is not None else summed_extra_usage(late_lines)
        summary = summarize(records, metric_names, total=len(examples), extra=extra, unrecorded=unrecorded)
        summary["compiled_on"] = leaked
        summary.update(judge_summary(resolved, judge_before))  # the judge's calls, tokens, cost: apart, this run's
        for key in ("method", "program", "dataset", "split", "lm"):
            if key in run_config:
                summary[key] = run_config[key]
        if out is not None:
            _write_record_json(out / SUMMARY_FILE, summary)
        else:
            summary["records"] = records
    return summary


_FROZEN = [0]  # evaluations running in this process that froze the collector's heap (`_collector_set_aside`)
_FROZEN_LOCK = threading.Lock()


@contextlib.contextmanager
def _collector_set_aside() -> Iterator[None]:
    """While evaluations run, what was alive before the first began is left out of the cyclic collector's work
    (`gc.freeze`): a full collection walked it all (~0.1-0.3 s holding the interpreter lock, all threads stopped,
    with the bm25 sample's index loaded), about once a thousand LM calls as DSPy's call history grew. Handed back
    (`gc.unfreeze`) when the last one ends, so nothing stays uncollectable; a forked worker shares those pages."""
    import gc

    with _FROZEN_LOCK:
        _FROZEN[0] += 1
        if _FROZEN[0] == 1:
            gc.freeze()
    try:
        yield
    finally:
        with _FROZEN_LOCK:
            _FROZEN[0] -= 1
            if _FROZEN[0] == 0:
                gc.unfreeze()


_STOP_WHEN: contextvars.ContextVar = contextvars.ContextVar("ragzoo_stop_when", default=None)


@contextlib.contextmanager
def stop_when(event: threading.Event) -> Iterator[None]:
    """In this thread, a run's wait for its questions (`run_threads`) raises KeyboardInterrupt once `event` is set,
    as Ctrl-C does in the main thread: for a run in another thread (a grid's cell under `--parallel`), which no
    signal reaches, and whose questions may be stuck at a hung LM. The run then stops as on Ctrl-C (what finished
    is kept; the questions in flight are dropped in their daemon threads)."""
    token = _STOP_WHEN.set(event)
    try:
        yield
    finally:
        _STOP_WHEN.reset(token)


LATE_GRACE = 3.0  # seconds a run waits at its end for questions past their deadline, so their paid calls count


def _recorded_keys(out_dir) -> set[str] | None:
    """The keys a run folder's saved config holds (None: none saved yet)."""
    try:
        return set(json.loads((Path(out_dir) / CONFIG_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _describe_run(run_config: dict, program, recorded: set[str] | None = None) -> None:
    """What a caller's config leaves out (a library `evaluate` passes none, as the README's Python snippet), filled
    in as the CLI records it: the LM (a dry run's then reports no accuracy), and the method, knobs and optimizer the
    program was built or compiled with. A report had shown such a run as method "?" with real-looking dry-run
    scores. Only keys the caller's config does not have; on a resume (`recorded`: the saved config's keys) only
    those the run recorded when it started, so a run written before they were recorded still resumes."""
    import dspy

    from ragzoo import programs
    from ragzoo.lm import describe_lm
    from ragzoo.secrets import strip_spec

    manifest = getattr(program, "ragzoo_manifest", None) or {}
    built = programs.origin(program) or {}
    members = getattr(program, "programs", None)  # an ensemble: its members share one retriever
    retriever = getattr(program, "retriever", None) or (getattr(members[0], "retriever", None) if members else None)
    found = {"lm": describe_lm(dspy.settings.lm) if dspy.settings.lm is not None else None,
             "method": manifest.get("method") or built.get("method"),
             "knobs": manifest.get("knobs") or built.get("knobs"),
             "optimizer": getattr(program, "ragzoo_optimizer", None) or manifest.get("optimizer"),
             # so that a resume with another retriever is refused, and a report says the runs differ in it
             "retriever": strip_spec(getattr(retriever, "spec", None) or None)}
    for key, value in found.items():
        if key not in run_config and value is not None and (recorded is None or key in recorded):
            run_config[key] = value


def run_threads(work: Callable[[Any], Any], items: list, threads: int, *, pooled: bool = False) -> int:
    """`work(item)` for every item on `threads` threads, each under the caller's DSPy settings (as DSPy's
    `ParallelExecutor` copies them). Not that executor: its main thread waits on every pending future at each
    completion and scans every result, O(questions) per question, which made the CPU of a question grow with
    the run's size (~1 ms per LM call at 1,280 questions). `work` must not raise; Ctrl-C reaches the caller
    (the threads then take no new item once `work` sees the run closing). `pooled`: one thread runs in a pool
    too (not in the caller's thread), so that its questions under a deadline run in it (`run_example`). Under
    `stop_when(event)` the questions always run in the pool, and the caller's wait ends with KeyboardInterrupt
    once the event is set. At the end, it waits up to LATE_GRACE seconds for the threads left behind by questions
    past their deadline (their LM calls are paid: `run_example`'s `late`; without a deadline there are none), and
    returns how many were still running then."""
    import copy

    from dspy.dsp.utils.settings import thread_local_overrides

    stopping = _STOP_WHEN.get()
    if not items:
        return 0
    if stopping is None and not pooled and (threads <= 1 or len(items) <= 1):
        for item in items:
            work(item)
        return 0
    parent = thread_local_overrides.get().copy()
    queue = iter(items)
    take = threading.Lock()
    pool: list[tuple[threading.Thread, _PoolSlot]] = []
    pool_lock = threading.Lock()

    def loop(slot: _PoolSlot) -> None:
        overrides = {**thread_local_overrides.get(), **parent.copy()}
        if overrides.get("usage_tracker"):  # as DSPy: each thread tracks its own usage
            overrides["usage_tracker"] = copy.deepcopy(overrides["usage_tracker"])
        token = thread_local_overrides.set(overrides)
        _POOL.slot = slot  # `run_example` runs a question under a deadline in this thread (`_Watchdog`)
        try:
            while not slot.left:  # a thread left behind by a question past its deadline takes no other
                with take:
                    item = next(queue, _DONE)
                if item is _DONE:
                    return
                work(item)
        except Stopping:  # the command is stopping (its LM calls refuse): this thread ends without a word
            return
        finally:
            _POOL.slot = None
            thread_local_overrides.reset(token)

    def start() -> None:
        slot = _PoolSlot(start)
        with pool_lock:
            thread = threading.Thread(target=loop, args=(slot,), name=f"ragzoo-evaluate-{len(pool)}", daemon=True)
            pool.append((thread, slot))
        thread.start()

    for _ in range(min(threads, len(items))):
        start()
    while True:  # every thread but those left behind (their questions are recorded; they may never end)
        with pool_lock:
            running = next((thread for thread, slot in pool if not slot.left and thread.is_alive()), None)
        if running is None:
            break
        running.join(0.5)  # a timed wait: Ctrl-C is raised here, in the main thread
        if stopping is not None and stopping.is_set():
            raise KeyboardInterrupt  # a run in another thread, stopped from outside (`stop_when`)
    ends = time.monotonic() + LATE_GRACE
    while True:
        with pool_lock:
            left = [thread for thread, slot in pool if slot.left and thread.is_alive()]
        if not left or time.monotonic() >= ends:
            return len(left)
        left[0].join(min(0.5, max(0.0, ends - time.monotonic())))
        if stopping is not None and stopping.is_set():
            raise KeyboardInterrupt


_DONE = object()


IN_FLIGHT_PER_PROCESS = 64  # one interpreter's CPU per LM call stays flat up to here (benchmarks/throughput.py)


def auto_processes(threads: int, questions: int, *, budget: bool = False, judged: bool = False,
                   retriever=None) -> tuple[int, int]:
    """(threads per process, processes) for `evaluate` without --processes: past `IN_FLIGHT_PER_PROCESS` requests
    in flight (the threads, capped by the questions left and the active LM's --max-concurrency) one interpreter's
    lock is contended and its CPU per LM call grows (at 256 in flight on 2 cores: ~3.2 ms in one process, ~2.7 ms
    in two, and 1.5x the questions/s); so they are split over processes, at most one per usable CPU. One process
    is kept where the split is not free: a budget (split evenly, a worker that spent its share stops early), an
    LM-judged metric (the judge's meter is per process: summary.json would report the parent's, none of the
    workers' calls, cost and failed verdicts), a retriever that runs native thread pools (`native_threads`:
    dense, hybrid; a pool does not survive fork(), and onnxruntime's is not reset in the workers as faiss's and
    torch's are), one CPU, no fork(), or limits a grid shares (its own --processes decides)."""
    import math
    import multiprocessing

    from ragzoo import endpoints

    in_flight = min([threads, questions, *_endpoint_limits().values()])
    cpus = usable_cpus()
    if (in_flight <= IN_FLIGHT_PER_PROCESS or budget or judged or cpus < 2 or endpoints.limits_shared()
            or native_threads(retriever) or "fork" not in multiprocessing.get_all_start_methods()):
        return threads, 1
    processes = min(cpus, math.ceil(in_flight / IN_FLIGHT_PER_PROCESS))
    return math.ceil(in_flight / processes), processes


def native_threads(retriever) -> bool:
    """Whether `retriever` (or a program's `_SharedRetriever` wrapper of it) declares native thread pools."""
    return bool(getattr(getattr(retriever, "inner", retriever), "native_threads", False))


def check_processes(processes) -> None:
    """Refuse a --processes the active LM's endpoint cannot serve (or not a positive integer, or no fork()): one
    line, before any work (`ragzoo evaluate` asks before it builds the program and its index)."""
    import multiprocessing

    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise RunError(f"--processes must be a positive integer, got {processes!r}")
    if processes > 1 and "fork" not in multiprocessing.get_all_start_methods():
        raise RunError("--processes needs fork() (Linux, macOS); use --threads alone on this platform")
    for name, limit in _endpoint_limits().items():  # before the run folder is made
        if limit < processes:
            raise RunError(f"--processes {processes} is more than --max-concurrency {limit} of {name}: each process "
                           f"needs a request slot of its own; lower --processes or raise --max-concurrency")


def _endpoint_limits() -> dict:
    """{endpoint: --max-concurrency} of the active LM (other endpoints of this process are other LMs' runs)."""
    import dspy

    from ragzoo import endpoints

    name = endpoints.endpoint_of(dspy.settings.lm) if dspy.settings.lm is not None else None
    limit = endpoints.limiter(name).limit if name else None
    return {name: limit} if limit is not None else {}


def _share(total, index: int, count: int):
    """Worker `index`'s part of `total` split evenly over `count` workers (the parts sum to `total`)."""
    if total is None:
        return None
    if isinstance(total, float):
        return total / count
    return total // count + (1 if index < total % count else 0)


@contextlib.contextmanager
def _workers_share_limits(out: Path | None, limits: dict) -> Iterator[None]:
    """The endpoint limits shared by the workers about to be forked (`endpoints.share_limits`): each may use the
    whole limit and together they never pass it, so a worker that ends early leaves its part to the others (an
    even split left the run's tail below the limit). The slot files go in the run folder (`SLOTS_DIR`, named in its
    marker: a SIGKILL leaves empty files a later run reuses), or a temporary folder without one; both are removed
    at the end. Limits already shared (a grid's) stay as they are."""
    import tempfile

    from ragzoo import endpoints

    if not limits or endpoints.limits_shared():
        yield
        return
    if out is not None:
        from ragzoo.ownership import mark

        mark(out, "run", (SLOTS_DIR,))
        folder = out / SLOTS_DIR
    else:
        folder = Path(tempfile.mkdtemp(prefix="ragzoo-slots-"))
    try:
        with endpoints.shared_limits(folder):
            yield
    finally:
        _remove_slot_files(folder)


def _remove_slot_files(folder: Path) -> None:
    """Remove the slot files and the folders `endpoints.MachineSlots` made under `folder`, nothing else."""
    import re

    for parent, _, files in os.walk(folder, topdown=False):
        for name in files:
            if re.fullmatch(r"slot-\d+", name):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(parent, name))
        with contextlib.suppress(OSError):
            os.rmdir(parent)  # only once empty: anything else in it stays


def _run_in_processes(todo: list, processes: int, threads: int, program, metrics, deadline, max_calls, max_cost,
                      accept: Callable[..., Any], stop: list, out: Path | None = None,
                      late: Callable[[dict], Any] | None = None, unfinished: list | None = None,
                      lost: list | None = None, left=None) -> str | None:
    """Run `todo` in `processes` forked workers of `threads` threads each; hand every record to `accept` here.

    Fork, not spawn: a worker gets the program, retriever, LM and DSPy settings as they are (nothing to pickle or
    rebuild); it is forked before any LM call of the run. The workers share each endpoint's whole limit
    (`_workers_share_limits`) and own an even share of the budget (`_share`), so together they stay within both;
    `left`: the run's `Budget`, whose flags and earlier spend a budget stop names.
    A worker sends each record over a pipe of its own (a worker killed mid-write tears only its own pipe) as the
    line it is stored as (`record_line`: scrubbed there, by the same rule) after its `summary_view`; this process
    writes the line as it is, so the run lock, resume and the one-writer rule stay as with threads, and no
    record is parsed or serialised twice (without a run folder, `out` None, the whole record is parsed: it is the
    result). A worker exits when this process is gone (SIGKILL), ignores Ctrl-C (this process stops the workers
    on the way out). Returns why a worker's budget share stopped it, if one did."""
    import multiprocessing
    from multiprocessing.connection import wait

    limits = _endpoint_limits()
    context = multiprocessing.get_context("fork")
    halt = context.RawValue("b", 0)  # lock-free: a killed worker cannot leave it locked
    workers, pipes = [], {}
    parent = os.getpid()
    # the objects made before the run (program, retriever index, modules) are frozen out of the collector by
    # evaluate (`_collector_set_aside`): a worker's collections would otherwise write to every one of them and copy
    # the whole parent, page by page
    sharing = contextlib.ExitStack()
    try:
        sharing.enter_context(_workers_share_limits(out, limits))
        for index in range(processes):
            items = todo[index::processes]
            if not items:
                continue
            receiver, sender = context.Pipe(duplex=False)
            calls = _share(max_calls, index, processes)
            cost = _share(None if max_cost is None else float(max_cost), index, processes)
            worker = context.Process(target=_process_worker, name=f"ragzoo-evaluate-{index}", daemon=True,
                                     args=(items, threads, program, metrics, deadline, calls, cost, limits, sender,
                                           halt, parent, processes))
            worker.start()
            sender.close()  # the worker's end: EOF here once the worker is gone
            workers.append(worker)
            pipes[receiver] = worker
        budget: list[str] = []
        while pipes:
            for receiver in wait(list(pipes)):
                try:
                    head, _, line = receiver.recv_bytes().partition(b"\n")
                    message = json.loads(head)
                    record = message.get("record")
                    if record is not None and out is None:
                        record = json.loads(line)
                except (EOFError, OSError, ValueError):  # the worker is gone (its last record may be torn)
                    pipes.pop(receiver).join(5)
                    receiver.close()
                    continue
                if record is not None and out is None:
                    accept(record)
                elif record is not None:
                    accept(record, line)
                elif message.get("budget"):
                    budget.append(message["budget"])
                elif message.get("late") and late is not None:  # a worker's calls past a question's deadline
                    late(message["late"])
                elif message.get("unfinished") and unfinished is not None:
                    unfinished.append(int(message["unfinished"]))
                elif message.get("lost") and lost is not None:  # a question a worker ended with no record
                    lost.append(str(message["lost"]))
            if stop:
                halt.value = 1  # nothing more started; the questions in flight finish and are kept
        for worker in workers:
            if worker.exitcode not in (0, None):
                said = f"worker process {worker.name} ended with exit code {worker.exitcode}"
                logger.warning("evaluate: %s; its unfinished questions are not recorded (--resume runs them)", said)
                if lost is not None:
                    lost.insert(0, said)
        if budget:  # a worker names its own share: the user's figure is the flag (`left`: what earlier runs spent)
            calls, cost = (left.earlier_calls, left.earlier_cost) if left is not None else (0, 0.0)
            flag_calls, flag_cost = (left.flag_calls, left.flag_cost) if left is not None else (max_calls, max_cost)
            if budget[0].startswith("LM call budget") and max_calls is not None:
                before = f", {calls} of them spent by earlier runs" if calls else ""
                return (f"LM call budget reached (--max-calls {flag_calls}{before}, {'the rest ' * bool(calls)}"
                        f"split evenly over the {processes} processes); raise --max-calls to continue")
            if budget[0].startswith("LM cost budget") and max_cost is not None:
                before = f", ${cost:.4f} of it spent by earlier runs" if cost else ""
                return (f"LM cost budget reached (--max-cost {flag_cost:g}{before}, {'the rest ' * bool(cost)}"
                        f"split evenly over the {processes} processes); raise --max-cost to continue")
            return budget[0]
        return None
    finally:
        halt.value = 1
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join(5)
            if worker.is_alive():
                worker.kill()
                worker.join()
        for receiver in pipes:
            receiver.close()
        sharing.close()  # the workers are gone: no slot file is held


def _process_worker(items, threads, program, metrics, deadline, max_calls, max_cost, limits, sender, halt,
                    parent, processes: int = 1) -> None:
    """One worker process of `_run_in_processes`: its questions on its own threads, each record sent back. Its
    budget is its share of the run's (1/`processes` of --max-cost), so the hourly rate of a rented server it
    charges against it is its share too: the workers together stop when one process would."""
    import signal

    from ragzoo import endpoints
    from ragzoo.usage import metering

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's stop, not the CLI's SIGTERM-as-Ctrl-C it inherited

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)  # the parent was killed: no one would write what this worker finishes

    if not _die_with_parent(parent):  # where the kernel cannot end it with its parent, a watch does, within 0.5 s
        threading.Thread(target=orphaned, name="ragzoo-orphan-watch", daemon=True).start()
    for name, limit in limits.items():  # the whole limit: the machine's slots keep the workers' sum within it
        endpoints.set_max_concurrency(name, limit)
    send_lock = threading.Lock()

    def send(message: dict, line: bytes = b"") -> None:
        data = json.dumps(message, ensure_ascii=False, default=str).encode() + b"\n" + line
        with send_lock:
            sender.send_bytes(data)

    def send_record(record: dict) -> None:
        stored = storable_record(record)  # scrubbed once, here: the line and its view both
        send({"record": summary_view(stored)}, _line(stored))

    halt_self: list[str] = []  # this worker's budget share is spent

    def work(item):
        position, example = item
        if halt.value or halt_self:
            return None
        try:
            record = run_example(program, example, position, metrics, deadline=deadline,
                                 deliver=send_record, late=lambda line: send({"late": line}))
        except BudgetExceeded as error:
            halt_self.append(str(error))
            send({"budget": str(error)})
            return None
        except BaseException as error:  # noqa: BLE001 - as the threads of `evaluate` do
            from ragzoo.secrets import redact

            said = f"example {example_id(example, position)}: {one_line(redact(str(error)), 200)}"
            logger.warning("%s", said)
            send({"lost": said})
            return None
        if record is None:  # past its deadline: the watchdog sent its record
            return None
        send_record(record)
        return True

    def run_all() -> None:
        import dspy

        rate = getattr(dspy.settings.lm, "price_per_hour", None)
        with metering(max_calls, max_cost, price_per_hour=rate / processes if rate else None):
            unfinished = run_threads(work, items, threads, pooled=deadline is not None)
        if unfinished:
            send({"unfinished": unfinished})

    # off the main thread: a Ctrl-C is the parent's to handle, never this process's
    import contextvars

    runner = threading.Thread(target=contextvars.copy_context().run, args=(run_all,), name="ragzoo-worker")
    runner.start()
    runner.join()
    sender.close()
    os._exit(0)  # no atexit of the parent's objects (its run lock, its writer) in this copy


def _die_with_parent(parent: int) -> bool:
    """Have Linux SIGKILL this process the moment its parent dies (`prctl(PR_SET_PDEATHSIG)`): a worker whose
    parent was killed would otherwise go on asking the LM (paid calls no one writes) until a watch notices. False
    where that is not available. The parent forks its workers from the thread that also joins them, so that thread
    outlives them (the signal follows the forking thread, not the process)."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1: PR_SET_PDEATHSIG
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it died before the request was made
        os._exit(1)
    return True


def _plain_progress(total: int, enabled: bool | None, bar) -> Callable[[int, int], None] | None:
    """Periodic plain lines on stderr (about every 10%, at most every 30 s) when no progress bar is shown and
    stderr is not a terminal (batch jobs); None otherwise."""
    import sys

    if enabled is False or enabled is True or (bar is not None and not getattr(bar, "disable", False)):
        return None
    if sys.stderr.isatty():
        return None
    step = max(1, total // 10)
    last = [time.monotonic()]

    def say(done: int, failures: int) -> None:
        now = time.monotonic()
        if done % step == 0 or done == total or now - last[0] >= 30:
            last[0] = now
            print(f"evaluate: {done}/{total} done, {failures} failed", file=sys.stderr, flush=True)

    return say


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
        summary = summarize(records, list(config.get("metrics") or ["em"]), total=config.get("n"),
                            unrecorded=extra_usage(run))
    return config, summary, records
