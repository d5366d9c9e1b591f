"""LM endpoints: one concurrency limit per endpoint shared by the whole process, the endpoint in the
response-cache key, and pre-flight checks before anything is spent.

- **Endpoint**: the `--api-base` URL (scheme, host, port, path; no credentials) or, without one, the
  provider prefix of the model string (`openai`, `anthropic`, ...). Two LMs, threads or runs that talk to
  the same endpoint share one limiter.
- **Concurrency** (`set_max_concurrency(endpoint, n)`, `--max-concurrency`): at most n requests in flight
  per endpoint, across every thread and every run of the process; more wait for a slot. The slot is held
  for one request, not for DSPy's retries of it (`endpoint_calls`, installed around DSPy's single attempt).
  A request still waiting for a slot when its question's deadline passes is never sent (`TimeoutError`).
- **One limit for several processes** (`share_limits(folder)`, what a grid does under its OUT folder): the
  processes of this machine that share the folder (a grid's cells, their `evaluate --processes` workers,
  `--storage` workers started in the same OUT) also share each endpoint's `--max-concurrency`: a request holds
  one of n slot files (`MachineSlots`) as well as its process's slot, so the requests in flight to an endpoint,
  summed over those processes, never pass n. Per machine: the folder is named after the host.
- **429s**: a rate-limited request gives its slot back, waits as the server's `Retry-After` says
  (exponentially without one: DSPy's own back-off rule, 1 s, 2 s, 4 s, ... 60 s) and is sent again until
  the question's deadline (`start_question_deadline`, set by `ragzoo.runs` for each example; 600 s from the first
  429 outside a run), however many retries DSPy would allow: DSPy's `num_retries` are spent within seconds,
  a busy server stays busy for longer. The endpoint's limit adapts (AIMD): a 429 lowers it to 3/4 of the
  requests then in flight (once per round: 429s of requests sent before the last decrease do not count
  again), each answered request raises it by 1/limit, back up to `--max-concurrency`. So a limit above the
  server's capacity costs a few 429s, not questions: 16 threads against a capacity of 4 finish in about
  1.1x the capacity-bound time (`python -m benchmarks.rate_limits`).
- **Cache key**: DSPy's response cache leaves `api_base` out of its key, so the same model name on two
  servers would share answers. An LM with a `cache_namespace` (set by `ragzoo.lm.make_lm` to the endpoint
  unless `cache_namespace=False`) gets it added to every cache key (`install_cache_namespace`, a small
  wrapper around `dspy.clients.execution.PreparedCall.key`; LMs without the attribute keep DSPy's key).
- **Cache values**: DSPy's disk cache keeps what an upstream answered, so an upstream that echoes the key would
  get it written under DSPY_CACHEDIR. Every value put into DSPy's cache once `ragzoo.lm.make_lm` has run goes
  through the secrets rule first (`install_cache_redaction`, around `dspy.clients.cache.Cache.put`): stored
  as it is when no known secret or key shape is in it, else as a copy with those strings redacted, else
  not at all.
- **Pre-flight** (`preflight(lm)`): the provider's key is in the environment (for providers whose key
  variable is known), and a server given by `--api-base` answers `GET /models`; failures are one line
  (`ragzoo.errors.LMError`) before any example runs.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import hashlib
import os
import socket
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

from ragzoo.errors import ConfigError, LMError

DEFAULT_MAX_CONCURRENCY = 8
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
                 "groq": "GROQ_API_KEY", "together_ai": "TOGETHERAI_API_KEY", "mistral": "MISTRAL_API_KEY",
                 "deepseek": "DEEPSEEK_API_KEY", "fireworks_ai": "FIREWORKS_API_KEY",
                 "openrouter": "OPENROUTER_API_KEY", "cohere": "COHERE_API_KEY"}


def endpoint_of(lm) -> str:
    """The endpoint an LM talks to (no credentials, ever)."""
    explicit = getattr(lm, "endpoint", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    kwargs = getattr(lm, "kwargs", {}) or {}
    base = kwargs.get("api_base") or kwargs.get("base_url")
    if base:
        parts = urlsplit(str(base))
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    model = str(getattr(lm, "model", "") or "")
    return model.split("/", 1)[0] if "/" in model else model


# ---------------------------------------------------------------------------------------------------------
# Concurrency


class MachineSlots:
    """`count` request slots of one endpoint shared by every process of this machine that uses `folder`.

    A slot is a file `folder/slot-<i>` locked with `flock`: the kernel gives each lock to one open file at a time
    and drops it when its process dies, however it dies (a SIGKILL leaks no slot, no cleanup is needed, nothing
    runs beside the processes: no daemon, no scheduler). A thread takes a free slot with a non-blocking `flock`;
    when none is free it queues here, and one watcher thread per slot this process does not hold waits in a
    blocking `flock` on that slot (in the kernel, no polling), which hands the slot to the first thread queued.
    So when any process frees a slot, every process with queued requests is waiting on it and the kernel gives it
    to one of them: the requests in flight stay at `count` while work remains, and a process that ends early or
    starts late strands nothing. The threads exist because `flock` cannot time out: a queued request still
    leaves at its deadline (`TimeoutError`)."""

    def __init__(self, folder: Path, count: int):
        self.folder, self.count = Path(folder), count
        self._fresh()

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._held: set[int] = set()      # slots this process holds (for a request, or a watcher's hand-over)
        self._watched: set[int] = set()   # slots a watcher of this process waits on in the kernel
        self._queue: collections.deque = collections.deque()  # [condition, slot or None] per queued request
        self._wake: dict[int, threading.Condition] = {}       # one per watcher thread started
        self._next = 0
        self._closed = False

    def _fd(self, index: int) -> int:
        fd = self._fds.get(index)
        if fd is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = self._fds[index] = os.open(self.folder / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
        return fd

    def _take_free(self) -> int | None:
        """A slot no process holds, taken now (with `_lock` held), or None."""
        import fcntl

        start = self._next
        for step in range(self.count):
            index = (start + step) % self.count
            if index in self._held or index in self._watched:
                continue  # flock on our own open file would succeed again: never ask the kernel for these
            try:
                fcntl.flock(self._fd(index), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            self._held.add(index)
            self._next = index + 1
            return index
        return None

    def acquire(self, deadline: float | None = None, *, wait: bool = True) -> int | None:
        """Take a slot (its number); past `deadline` (monotonic) `TimeoutError`. `wait=False`: None if none is free."""
        with self._lock:
            if not self._queue:
                index = self._take_free()
                if index is not None or not wait:
                    return index
            elif not wait:
                return None
            entry = [threading.Condition(self._lock), None]
            self._queue.append(entry)
            self._watch()
            try:
                while entry[1] is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError("the question's deadline passed while its LM request waited for a slot of "
                                           "the endpoint, shared with other processes (--deadline, --max-concurrency)")
                    entry[0].wait(remaining)
            except BaseException:  # the deadline, or Ctrl-C in the main thread: leave the queue, keep no slot
                if entry[1] is None:
                    self._queue.remove(entry)
                else:
                    self._release(entry[1])
                raise
            return entry[1]

    def release(self, index: int) -> None:
        with self._lock:
            self._release(index)

    def _release(self, index: int) -> None:
        import fcntl

        if index not in self._held:
            return
        self._held.discard(index)
        fcntl.flock(self._fd(index), fcntl.LOCK_UN)
        if self._queue:  # the kernel decides who gets it next, this process's watcher or another's
            self._watch()

    def _watch(self) -> None:
        """Wake (or start) a watcher on every slot this process neither holds nor waits on (with `_lock` held)."""
        for index in range(self.count):
            if index in self._held or index in self._watched:
                continue
            self._watched.add(index)
            wake = self._wake.get(index)
            if wake is None:
                self._fd(index)
                wake = self._wake[index] = threading.Condition(self._lock)
                threading.Thread(target=self._watcher, args=(index, wake), name=f"ragzoo-slot-{index}",
                                 daemon=True).start()
            else:
                wake.notify()

    def _watcher(self, index: int, wake: threading.Condition) -> None:
        import fcntl

        fd = self._fds[index]
        while True:
            fcntl.flock(fd, fcntl.LOCK_EX)  # in the kernel until no other process holds the slot
            with self._lock:
                self._watched.discard(index)
                if self._queue:
                    entry = self._queue.popleft()
                    entry[1] = index
                    self._held.add(index)
                    entry[0].notify()
                else:  # the requests that queued left (deadline): the slot goes back at once
                    fcntl.flock(fd, fcntl.LOCK_UN)
                while index not in self._watched:  # until `_watch` needs this slot again
                    if self._closed:
                        return
                    wake.wait()

    def close(self) -> bool:
        """Close the slot files when nothing holds or awaits a slot here (the grid that shared them is over): True
        if closed, False if still in use (the files then stay open until the process ends)."""
        with self._lock:
            if self._held or self._queue or self._watched:
                return False
            self._closed = True
            for wake in self._wake.values():
                wake.notify()
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}
            return True

    def after_fork_in_child(self) -> None:
        """A forked child holds none of its parent's slots and has none of its threads: start afresh. Its copies
        of the parent's files are closed, never unlocked (an unlock through a copy would free the parent's slot)."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fresh()


_SHARED_FOLDER: Path | None = None
_MACHINE: dict[tuple[str, str, int], MachineSlots] = {}


def machine_folder(folder: str | os.PathLike) -> Path:
    """Where `share_limits(folder)` keeps this machine's slots: under the host's name, so workers of several
    machines that share `folder` (a network file system) each keep their own limit."""
    return Path(folder) / socket.gethostname()


def share_limits(folder: str | os.PathLike | None) -> Path | None:
    """From now, every endpoint limit of this process (and of processes forked from it) is shared with the other
    processes of this machine that share `folder` (None: each process keeps its own); returns the previous one."""
    global _SHARED_FOLDER
    previous = _SHARED_FOLDER
    _SHARED_FOLDER = None if folder is None else machine_folder(folder)
    return previous


@contextmanager
def shared_limits(folder: str | os.PathLike | None) -> Iterator[None]:
    previous = share_limits(folder)
    try:
        yield
    finally:
        global _SHARED_FOLDER
        _SHARED_FOLDER = previous
        if folder is not None:  # a long-lived process (a notebook, a test run) does not keep every grid's files open
            where = str(machine_folder(folder))
            with _LIMITERS_LOCK:
                for key in [key for key in _MACHINE if key[0] == where]:
                    if _MACHINE[key].close():
                        del _MACHINE[key]


def limits_shared() -> bool:
    return _SHARED_FOLDER is not None


def machine_slots(endpoint: str, limit: int | None) -> MachineSlots | None:
    """The machine-wide slots of `endpoint` under the shared folder, or None (not shared, or no limit)."""
    folder = _SHARED_FOLDER
    if folder is None or limit is None:
        return None
    key = (str(folder), endpoint, limit)
    with _LIMITERS_LOCK:
        found = _MACHINE.get(key)
        if found is None:
            # the endpoint has no credentials (`endpoint_of`), and its hash keeps it out of the file names anyway
            digest = hashlib.sha256(endpoint.encode()).hexdigest()[:16]
            found = _MACHINE[key] = MachineSlots(folder / digest, limit)
        return found


class EndpointLimiter:
    """At most `limit` holders at once (None = no limit), fewer while the server answers 429 (`window`, the
    adaptive limit: None until the first 429); the limit may change while held."""

    DECREASE = 0.75  # a 429 keeps 3/4 of the requests in flight: gentler than halving, which idles a hard cap

    def __init__(self, limit: int | None, endpoint: str = ""):
        self.limit = limit
        self.endpoint = endpoint
        self.window: float | None = None
        self.epoch = 0  # bumped by each decrease; a 429 of a request sent before it does not decrease again
        self.in_flight = 0
        self.sent = 0  # of `in_flight`, the requests sent (past the machine's slots, when limits are shared)
        self.max_in_flight = 0
        self.waited = 0
        self.rate_limited = 0
        self.lowest: int | None = None  # the lowest limit 429s brought it to (the additive increase climbs after)
        self.configured = False  # a limit was set (`set_limit`): an LM built later without one keeps it
        self._condition = threading.Condition()

    def allowed(self) -> int | None:
        """Requests that may be in flight now (None = no limit)."""
        caps = [cap for cap in (self.limit, None if self.window is None else int(self.window)) if cap is not None]
        return max(1, min(caps)) if caps else None

    def set_limit(self, limit: int | None) -> None:
        with self._condition:
            self.window = None  # a new LM or ceiling from the user: learn the server's capacity again
            self.limit = limit
            self.configured = True
            self._condition.notify_all()

    def _full(self) -> bool:
        allowed = self.allowed()
        return allowed is not None and self.in_flight >= allowed

    def _enter(self) -> int:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return self.epoch

    def _leave(self) -> None:
        with self._condition:
            self.in_flight -= 1
            self._condition.notify()

    def _sending(self, delta: int) -> None:
        with self._condition:
            self.sent += delta

    @contextmanager
    def slot(self, deadline: float | None = None) -> Iterator[int]:
        """Hold one slot; yields the ticket to hand to `rate_limited_once`. Past `deadline` (monotonic) while
        waiting: `TimeoutError`, and no request is sent for a question already recorded as a timeout. With the
        limits shared (`share_limits`), one of the machine's slots is held too, taken after this process's."""
        with self._condition:
            if self._full():
                self.waited += 1
            while self._full():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("the question's deadline passed while its LM request waited for a slot "
                                       "of the endpoint (--deadline, --max-concurrency)")
                self._condition.wait(remaining)
            ticket = self._enter()
        try:
            machine = machine_slots(self.endpoint, self.limit)
            if machine is None:
                yield ticket
                return
            index = machine.acquire(deadline)
            self._sending(1)
            try:
                yield ticket
            finally:
                self._sending(-1)
                machine.release(index)
        finally:
            self._leave()

    @asynccontextmanager
    async def aslot(self, deadline: float | None = None) -> AsyncIterator[int]:
        """`slot` for a coroutine: polls, so the event loop is never blocked."""
        machine = machine_slots(self.endpoint, self.limit)
        while True:
            with self._condition:
                if not self._full():
                    ticket = self._enter()
                    break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("the question's deadline passed while its LM request waited for a slot of the "
                                   "endpoint (--deadline, --max-concurrency)")
            await asyncio.sleep(0.01)
        try:
            index = None
            while machine is not None and index is None:  # the machine's slots, polled: the loop never blocks
                index = machine.acquire(deadline, wait=False)
                if index is None:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise TimeoutError("the question's deadline passed while its LM request waited for a slot "
                                           "of the endpoint, shared with other processes (--deadline, "
                                           "--max-concurrency)")
                    await asyncio.sleep(0.01)
            self._sending(1)
            try:
                yield ticket
            finally:
                self._sending(-1)
                if index is not None:
                    machine.release(index)
        finally:
            self._leave()

    def rate_limited_once(self, ticket: int) -> None:
        """The server answered 429 to a request sent with `ticket` (its slot still held)."""
        with self._condition:
            self.rate_limited += 1
            if ticket != self.epoch:
                return  # sent under a larger limit that an earlier 429 already lowered
            # the requests sent, not those still queued for the machine's slots (shared limits)
            self.window = max(1.0, (self.sent or self.in_flight) * self.DECREASE)
            self.epoch += 1
            now = self.allowed()
            self.lowest = now if self.lowest is None else min(self.lowest, now)

    def answered(self) -> None:
        """A request was answered: additive increase of the adaptive limit, back up to the ceiling."""
        if self.window is None:
            return
        with self._condition:
            if self.window is None:
                return
            before = self.allowed()
            self.window += 1.0 / self.window
            if self.limit is not None and self.window >= self.limit:
                self.window = None
            if self.allowed() != before:
                self._condition.notify_all()


_LIMITERS: dict[str, EndpointLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child (`evaluate --processes`, maybe from a grid's thread while other cells' threads hold these
    locks) has none of its parent's requests or threads: its locks and counts start afresh, so it never waits on a
    lock a thread that does not exist in it held at the fork."""
    global _LIMITERS_LOCK
    _LIMITERS_LOCK = threading.Lock()
    for found in _LIMITERS.values():
        found._condition = threading.Condition()
        found.in_flight = found.sent = 0
    for slots in _MACHINE.values():
        slots.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def check_max_concurrency(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--max-concurrency must be a positive integer, got {value!r}")
    return value


def limiter(endpoint: str) -> EndpointLimiter:
    with _LIMITERS_LOCK:
        found = _LIMITERS.get(endpoint)
        if found is None:
            found = _LIMITERS[endpoint] = EndpointLimiter(None, endpoint)
        return found


def set_max_concurrency(endpoint: str, limit: int | None) -> EndpointLimiter:
    """Set the process-wide limit of `endpoint` (None = unlimited); returns its limiter."""
    found = limiter(endpoint)
    found.set_limit(check_max_concurrency(limit))
    return found


# ---------------------------------------------------------------------------------------------------------
# 429s: back off outside the slot, retry until the question's deadline

RATE_LIMIT_PATIENCE = 600.0  # seconds of 429s a call outside a run (no question deadline) waits through
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ragzoo_question_deadline", default=None)
_CALLING: contextvars.ContextVar = contextvars.ContextVar("ragzoo_endpoint_lm", default=None)


def start_question_deadline(seconds: float | None) -> None:
    """From now, this context's LM calls stop retrying 429s `seconds` from now (None: no deadline).
    Set it in a context of its own (`contextvars.copy_context().run`): it is not reset."""
    _DEADLINE.set(time.monotonic() + seconds if seconds else None)


@contextmanager
def endpoint_calls(lm) -> Iterator[None]:
    """The requests of DSPy calls made in this block by `lm` hold its endpoint's slots and ride out 429s."""
    install_rate_limit_backoff()
    token = _CALLING.set(lm)
    try:
        yield
    finally:
        _CALLING.reset(token)


@asynccontextmanager
async def aendpoint_calls(lm) -> AsyncIterator[None]:
    """`endpoint_calls` for `async with` (an async generator runs in its caller's context: the same setting)."""
    with endpoint_calls(lm):
        yield


def _wait_before_retry(error, attempt: int, first_429: float) -> float | None:
    """Seconds to wait before sending again, or None if that would pass the deadline."""
    from dspy.clients import execution

    delay = execution._delay(error, attempt)  # Retry-After, else 2**attempt s capped at 60: DSPy's rule
    deadline = _DEADLINE.get()
    if deadline is None:
        deadline = first_429 + RATE_LIMIT_PATIENCE
    return None if time.monotonic() + delay >= deadline else delay


def _give_up(error) -> None:
    error.ragzoo_rate_limit_final = True  # DSPy's own retry loop must not start over
    raise error


class _Retry:
    """One managed call's 429 handling, the same for the sync and the async attempt (only the waiting differs)."""

    def __init__(self, lm):
        self.gate, self.tries, self.first_429 = limiter(endpoint_of(lm)), 0, None

    def rate_limited(self, error, ticket, state):
        """Give the slot back for a 429 and return it to retry; one that came after output started is raised."""
        if state.emitted or state.completed:
            raise error
        self.gate.rate_limited_once(ticket)
        return error

    def answered(self, result):
        self.gate.answered()
        return result

    def delay(self, error) -> float:
        """Seconds to wait before the next try; gives up (raises `error`, final) past the deadline."""
        self.first_429 = self.first_429 or time.monotonic()
        delay = _wait_before_retry(error, self.tries, self.first_429)
        if delay is None:
            _give_up(error)
        self.tries += 1
        return delay


_backoff_installed = False
_backoff_lock = threading.Lock()


def install_rate_limit_backoff() -> None:
    """Wrap DSPy's single attempt (`execution._attempt` / `_aattempt`) for LMs inside `endpoint_calls`: hold
    the endpoint's slot for the request only, and on a 429 give it back, wait, and send again (idempotent).
    DSPy 3.4's retry loop around the attempt then only sees 429s past the deadline, and does not retry them."""
    global _backoff_installed
    with _backoff_lock:
        if _backoff_installed:
            return
        from dspy.clients import execution
        from dspy.clients.errors import error_boundary
        from dspy.utils.exceptions import LMRateLimitError

        attempt_once, aattempt_once, retryable = execution._attempt, execution._aattempt, execution._retryable

        def ours(lm, call) -> bool:
            return _CALLING.get() is lm and call.managed

        def _attempt(lm, call, backend, request, provider, state, results):
            if not ours(lm, call):
                return attempt_once(lm, call, backend, request, provider, state, results)
            retry = _Retry(lm)
            while True:
                with retry.gate.slot(_DEADLINE.get()) as ticket:
                    try:
                        with error_boundary(lm.model, provider=provider, unexpected=True):
                            result = attempt_once(lm, call, backend, request, provider, state, results)
                    except LMRateLimitError as error:
                        failed = retry.rate_limited(error, ticket, state)
                    else:
                        return retry.answered(result)
                time.sleep(retry.delay(failed))

        async def _aattempt(lm, call, backend, request, provider, state, results):
            if not ours(lm, call):
                return await aattempt_once(lm, call, backend, request, provider, state, results)
            retry = _Retry(lm)
            while True:
                async with retry.gate.aslot(_DEADLINE.get()) as ticket:
                    try:
                        with error_boundary(lm.model, provider=provider, unexpected=True):
                            result = await aattempt_once(lm, call, backend, request, provider, state, results)
                    except LMRateLimitError as error:
                        failed = retry.rate_limited(error, ticket, state)
                    else:
                        return retry.answered(result)
                await asyncio.sleep(retry.delay(failed))

        def _retryable(state, exc, attempt, retries):
            return not getattr(exc, "ragzoo_rate_limit_final", False) and retryable(state, exc, attempt, retries)

        for name, wrapper, original in (("_attempt", _attempt, attempt_once), ("_aattempt", _aattempt, aattempt_once),
                                        ("_retryable", _retryable, retryable)):
            wrapper.__wrapped__ = original
            setattr(execution, name, wrapper)
        _backoff_installed = True


# ---------------------------------------------------------------------------------------------------------
# Cache namespace

_installed = False


def install_cache_namespace() -> None:
    """Make `lm.cache_namespace` part of DSPy's response-cache key (idempotent)."""
    global _installed
    if _installed:
        return
    from dspy.clients import execution

    original = execution.PreparedCall.key

    def key(self, lm, asynchronous):
        value = original(self, lm, asynchronous)
        namespace = getattr(lm, "cache_namespace", None)
        if namespace and isinstance(value, dict):
            value = {**value, "ragzoo_endpoint": namespace}
        return value

    key.__wrapped__ = original
    execution.PreparedCall.key = key
    _installed = True


_redacting = False


def install_cache_redaction() -> None:
    """Pass every value DSPy's response cache stores through `ragzoo.secrets.redact` (idempotent; see the
    module doc). On the class, so a cache built later (`dspy.configure_cache`) is covered too."""
    global _redacting
    if _redacting:
        return
    from dspy.clients.cache import Cache

    original = Cache.put

    def put(self, request, value, *args, **kwargs):
        stored = cache_safe(value)
        if stored is None:
            return None  # a secret that could not be taken out: the answer is simply not cached
        return original(self, request, stored, *args, **kwargs)

    put.__wrapped__ = original
    Cache.put = put
    _redacting = True


def cache_safe(value):
    """`value` as DSPy's cache may keep it: itself when its pickle (what diskcache writes) holds no known
    secret and nothing shaped like a key (the common case: one pickle and one scan), else a copy with every
    string redacted, or None if a secret is still in the copy's pickle."""
    import pickle

    from ragzoo.secrets import redact, redacted_copy

    def holds_secret(candidate) -> bool:
        try:
            text = pickle.dumps(candidate, protocol=pickle.HIGHEST_PROTOCOL).decode("latin-1")
        except Exception:  # noqa: BLE001 - unpicklable: diskcache cannot write it either, DSPy skips it
            return False
        return redact(text) != text

    if not holds_secret(value):
        return value
    try:
        cleaned = redacted_copy(value)
    except Exception:  # noqa: BLE001 - an object that cannot be copied is not cached, rather than kept whole
        return None
    return None if holds_secret(cleaned) else cleaned


# ---------------------------------------------------------------------------------------------------------
# Pre-flight


def preflight(lm, *, timeout: float = 5.0) -> None:
    """One-line `LMError` if the LM cannot work: no key for a provider that needs one, or a server that does
    not answer `GET <api_base>/models`. Dry-run and custom-engine LMs pass."""
    import json
    import urllib.error
    import urllib.request

    from ragzoo.engines import is_dry_run

    if is_dry_run(lm) or not isinstance(getattr(lm, "engine", "auto"), str):
        return
    kwargs = getattr(lm, "kwargs", {}) or {}
    base = kwargs.get("api_base") or kwargs.get("base_url")
    provider = str(getattr(lm, "model", "")).split("/", 1)[0]
    if not base:
        variable = KEY_VARIABLES.get(provider)
        if variable and not os.environ.get(variable) and not kwargs.get("api_key"):
            raise LMError(f"{variable} is not set; export it (the key is read from the environment only) or "
                          f"point --api-base at a server")
        return
    url = str(base).rstrip("/") + "/models"
    request = urllib.request.Request(url, method="GET")
    key = kwargs.get("api_key") or os.environ.get(KEY_VARIABLES.get(provider, ""), "")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    where = endpoint_of(lm)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's server
            body = response.read(1_000_000)
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise LMError(f"the LM server at {where} refused the key (HTTP {error.code}); check the key in the "
                          f"environment") from None
        if error.code == 404:
            return  # a server without /models (some proxies): nothing more to check here
        raise LMError(f"the LM server at {where} answered HTTP {error.code} to GET /models; is it up?") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise LMError(f"cannot reach the LM server at {where} ({reason}); start it or fix --api-base") from None
    try:
        listed = [item.get("id") for item in json.loads(body).get("data", []) if isinstance(item, dict)]
    except (ValueError, AttributeError):
        return
    model = str(getattr(lm, "model", "")).split("/", 1)[-1]
    if listed and model not in listed:
        import logging

        logging.getLogger(__name__).warning("the LM server at %s lists %s, not %s", where,
                                            ", ".join(map(str, listed[:5])), model)
