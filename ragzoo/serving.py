"""A compiled program behind HTTP: `ragzoo serve --program DIR --lm SPEC`.

Routes (JSON in, JSON out):
- `POST /ask` `{"question": "..."}` -> `{"question", "answer", "passages": [{"pid","title","text","score"}],
  "trace": {"lm_calls": [{"predictor","model","prompt_tokens","completion_tokens","cost","latency","cached"}],
  "retrievals": [{"query","k","pids","latency"}]}, "usage": {"lm_calls","prompt_tokens","completion_tokens",
  "cost","latency"}}`. Errors: `{"error": true, "message": ...}` with a 4xx (bad request), 502 (the upstream LM
  or retriever failed), 503 + Retry-After (over capacity), 504 (the question's deadline passed).
- `POST /v1/chat/completions` (and `/chat/completions`): OpenAI-compatible; the last user message is the
  question, the answer is the assistant message, `usage` sums the program's LM calls. Any OpenAI client or chat
  UI can use the compiled program as a model. `stream: true` answers with server-sent events in OpenAI's chunk
  format (a role delta at once, `: keep-alive` comments every `keepalive` seconds while the program runs, the
  answer as content deltas when it is ready — the program does not stream tokens —, finish_reason, a usage chunk
  with `stream_options.include_usage`, `data: [DONE]`); a failure once the stream started is an error event
  `data: {"error": {...}}` and no [DONE]; a request refused before it starts (bad input, 503) is a plain HTTP
  error. A DSPy ChatAdapter request (`dspy.LM("openai/<name>", api_base=".../v1")` under `dspy.Predict(
  "question -> answer")` or ChainOfThought) is recognised by its system message: the `question` input field is
  the question and the reply is in the requested output fields (`answer`; `reasoning` says the compiled program
  answered); a request for other output fields is a 400 naming them. Options: `max_tokens` /
  `max_completion_tokens` cut the answer to that many tokens (cl100k; finish_reason "length"); `n` must be 1; the
  program's own LM settings and prompts decide the answer, so every other option (`temperature`, `top_p`,
  `stop`, ..., and a `model` other than the served name) is ignored and named in the reply: the header
  `X-Ragzoo-Ignored: temperature, top_p` and `ragzoo.ignored` `{option: why}` in the JSON body. Errors in
  OpenAI's shape `{"error": {"message", "type", "code"}}`. `GET /v1/models` lists the one model.
- `GET /health`: `{"status": "ok", "method", "model", "in_flight", "abandoned", "workers", "worker", ...}` (no
  path, no upstream URL, no key; `worker` is the answering process's id: with `ragzoo serve --workers N`, each
  connection lands on one of N processes, each with its own bounds and counts).

Bounds: a request body of at most `max_body_bytes` (413), a question of at most `max_question_chars` (413),
at most `max_concurrency` questions answered at once (each on a worker thread) and `max_queue` more waiting;
past that, 503 with Retry-After at once instead of an unbounded queue. Keys for the upstream LM come from the
environment only (LiteLLM reads them); if `RAGZOO_SERVE_API_KEY` is set, every route but `/health` needs
`Authorization: Bearer <that key>`. `ragzoo serve` binds 127.0.0.1 unless `--host` says otherwise. Text that is
not valid Unicode (a lone surrogate from a `\\ud800` escape) is a 400 naming the field; more than `MAX_MESSAGES`
chat messages is a 400 naming the limit.

Nothing hangs (issue 20): a question has `deadline` seconds (`ragzoo serve --deadline`, default 120), time in the
queue included; past it the answer is 504 and its worker slot is free at once, even while the LM hangs. The
worker thread cannot be stopped mid-request, so it is abandoned: the served LM (`_cancellable`) refuses any
further LM call or retry for it, its hung request ends with the per-request timeout (`--timeout`, at most the
deadline; it bounds each wait for the server's next bytes, so a reply dripped a byte at a time outlives it), and
until then it is counted in `abandoned` and holds one of `max_abandoned` spare threads (and its
request's endpoint slot), not a question slot. A client that disconnects cancels its question the same way; a question still queued is never sent.
Everything an answer carries (answer, passages, trace) is redacted (`ragzoo.secrets.redact`): an upstream that
echoes the key it was sent cannot hand it to the client.

CPU per question (issue 15; the answers are the same either way, see tests/serving/test_serving_fast_path.py):
DSPy's model-metadata lookup is memoised for the process (`ragzoo.usage.memoize_price_metadata`), and a question without a
budget runs without a meter when the LM carries ragzoo's usage callback itself (the trace sees the same calls).
The LM endpoint's concurrency limit (`ragzoo.endpoints`, 8 unless set) also bounds questions at once: set
`lm_max_concurrency` to at least `max_concurrency` for an LM-bound program.
"""


import asyncio
import collections
import contextvars
import hmac
import json
import os
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

from ragzoo.secrets import scrub

MAX_QUESTION_CHARS = 8_000
MAX_BODY_BYTES = 1 << 20  # a chat history can be long; only the last user message is read
MAX_MESSAGES = 1_000
DEFAULT_CONCURRENCY = 32
DEFAULT_QUEUE = 64
DEFAULT_DEADLINE = 120.0
API_KEY_ENV = "RAGZOO_SERVE_API_KEY"
KEEPALIVE_SECONDS = 10.0  # a streamed reply's comment line while the program runs: proxies and UIs see it alive
# chat request options this server acts on; any other is named in the reply as ignored
_HONOURED_OPTIONS = frozenset({"messages", "model", "stream", "stream_options", "n", "max_tokens",
                               "max_completion_tokens"})
# fields of a DSPy ChatAdapter request this server can fill from a program's prediction
_DSPY_OUTPUTS = ("answer", "reasoning")


class Overloaded(Exception):
    pass


class QuestionTimeout(Exception):
    """A question's deadline passed before its answer came (HTTP 504)."""


class ClientGone(Exception):
    """The client disconnected while its question waited or ran; nobody is left to answer."""


class ShuttingDown(Exception):
    """The server is stopping and no longer waits for this question's answer (HTTP 503, see `ProgramService.cut`)."""


class QuestionCancelled(Exception):
    """Raised in an abandoned question's worker thread at its next LM call or attempt: nothing more is sent."""


class _Ticket:
    """One question's cancellation flag, read by its worker thread (see `_cancellable`), and its deadline."""

    __slots__ = ("cancelled", "ends")

    def __init__(self, deadline: float | None):
        self.cancelled = False
        self.ends = None if deadline is None else time.monotonic() + deadline


_QUESTION: contextvars.ContextVar = contextvars.ContextVar("ragzoo_served_question", default=None)


def _check_cancelled() -> None:
    ticket = _QUESTION.get()
    if ticket is not None and ticket.cancelled:
        raise QuestionCancelled("the question was abandoned (deadline passed or client left)")


class _CancellableCalls:
    """Mixin for the served LM: an abandoned question sends no further LM request. Checked when an LM call
    starts, and at each of DSPy's attempts: DSPy reads `lm.model` as it opens an attempt (its error boundary),
    which is the one per-attempt hook the LM object offers, so a hung request that timed out is not retried for a
    question nobody waits for (a retry would hold an endpoint slot a live question needs)."""

    def __call__(self, *args, **kwargs):
        _check_cancelled()
        return super().__call__(*args, **kwargs)

    @property
    def model(self):
        _check_cancelled()
        return self.__dict__["model"]

    @model.setter
    def model(self, value):
        self.__dict__["model"] = value


def _cancellable(lm):
    """A shallow copy of `lm` (same engine, clients, usage callback and totals) whose calls stop for an abandoned
    question; an LM without a `model` in its instance dict is served as it is."""
    import copy

    from ragzoo.usage import mixed_class

    if lm is None or "model" not in getattr(lm, "__dict__", {}):
        return lm
    served = copy.copy(lm)
    served.__class__ = mixed_class(_CancellableCalls, type(lm), "Cancellable")
    return served


def _bad_text(value: str) -> str | None:
    """Why `value` cannot be sent on (a lone surrogate from a JSON \\uD800 escape: not encodable as UTF-8), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"it holds a lone surrogate (\\u{ord(value[exc.start]):04x}), which is not a character"
    return None


def _mended(text: str) -> str:
    """`text` with every lone surrogate (an upstream's reply may carry a JSON \\uD800 escape) as U+FFFD: what JSON
    and UTF-8 can carry. Unmended, a reply or an error message failed to encode (a 500, or a stream cut with no
    error event) after the program was paid for."""
    return text if _bad_text(text) is None else text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _sendable(value: Any) -> Any:
    """An answer as it can be sent: the record scrub of secrets, and its texts `_mended`."""
    def mend(item: Any) -> Any:
        if isinstance(item, str):
            return _mended(item)
        if isinstance(item, dict):
            return {mend(key): mend(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [mend(inner) for inner in item]
        return item

    return mend(scrub(value))


def _header_text(text: str) -> str:
    """`text` as a header can carry it: ASCII with no control characters (a key holding a newline broke the reply's
    framing after its answer was paid for); escaped, as the JSON body names it as it is."""
    return text.encode("unicode_escape").decode("ascii")


def _passage_dict(passage: Any) -> dict:
    if hasattr(passage, "to_dict"):
        data = passage.to_dict()
        data.pop("meta", None)
        return data
    return {"text": str(passage)}


def _redact(text: str) -> str:
    """An error text without any known secret (keys echoed back by an upstream)."""
    from ragzoo.secrets import redact

    return redact(text)


class ProgramService:
    """Answers questions with a compiled program on a bounded pool of worker threads.

    `lm_max_concurrency`: when given, the process-wide limit of LM requests in flight to the LM's endpoint
    (`ragzoo.endpoints`) is set to it. `make_lm` leaves it at 8, which caps an LM-bound program at 8 questions
    at once whatever `max_concurrency` says (at 200 ms a call: 40 questions/s). None leaves the LM's limit alone.
    `memoize_prices`: DSPy prices every call from its model table; for a model the table does not know (a local
    or stub model) that is a scan of the whole table, twice per call (~2 ms of CPU per question, the largest
    single cost of a served question); True memoises the lookup for this process (same values, see
    `memoize_price_metadata`)."""

    def __init__(self, program, lm, *, name: str = "ragzoo", method: str = "", max_concurrency: int = DEFAULT_CONCURRENCY,
                 max_queue: int = DEFAULT_QUEUE, max_calls: int | None = None, max_cost: float | None = None,
                 lm_max_concurrency: int | None = None, memoize_prices: bool = True,
                 deadline: float | None = DEFAULT_DEADLINE, max_abandoned: int | None = None):
        if max_concurrency < 1 or max_queue < 0:
            raise ValueError("max_concurrency must be >= 1 and max_queue >= 0")
        if deadline is not None and not (isinstance(deadline, (int, float)) and 0 < deadline < float("inf")):
            raise ValueError(f"deadline must be a finite positive number of seconds, got {deadline!r}")
        self.program, self.lm, self.name, self.method = program, _cancellable(lm), name, method
        self.deadline = None if deadline is None else float(deadline)
        # worker threads abandoned past their deadline that may still be running (waiting on a hung LM until
        # its per-request timeout); a few times the live workers, so a storm's leftovers never block new questions
        self.max_abandoned = 4 * max_concurrency if max_abandoned is None else max_abandoned
        self.max_concurrency, self.max_queue = max_concurrency, max_queue
        self.max_calls, self.max_cost = max_calls, max_cost
        if lm_max_concurrency is not None:
            from ragzoo.endpoints import endpoint_of, set_max_concurrency

            set_max_concurrency(endpoint_of(lm), lm_max_concurrency)
        if memoize_prices:
            from ragzoo.usage import memoize_price_metadata

            memoize_price_metadata()
        self._meter = self._needs_meter()
        self.workers = max_concurrency + self.max_abandoned
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ragzoo-ask")
        self._on_threads = 0  # questions on a worker thread (any thread), read by `close`
        self._on_threads_lock = threading.Lock()
        self._questions: set = set()  # event-loop thread only: the `_run` task of each question admitted
        # event-loop thread only:
        self.admitted = 0  # answering + waiting (`in_flight` of /health)
        self.running = 0  # questions on a worker thread
        self.abandoned = 0  # worker threads still busy with a question nobody waits for any more
        self._waiting: collections.deque = collections.deque()  # futures of queued questions, in arrival order
        self.served = 0
        self.rejected = 0
        self.timed_out = 0
        self.cancelled = 0

    def _needs_meter(self) -> bool:
        """A meter is needed for a budget, or to see calls of an LM without ragzoo's usage callback. Without
        one, DSPy runs its callback machinery only around LM calls, not around every module, predictor and
        adapter call (~0.5 ms of CPU per question); the trace records the same calls either way."""
        from ragzoo.usage import USAGE_CALLBACK

        if self.max_calls is not None or self.max_cost is not None or getattr(self.lm, "price_per_hour", None):
            return True
        if not any(callback is USAGE_CALLBACK for callback in getattr(self.lm, "callbacks", None) or []):
            return True
        try:
            predictors = list(self.program.predictors()) if hasattr(self.program, "predictors") else []
        except Exception:  # noqa: BLE001 - an unusual program: keep the meter
            return True
        return any(getattr(predictor, "lm", None) is not None for predictor in predictors)

    def answer(self, question: str) -> dict:
        """Run the program on one question (blocking). Raises on failure."""
        import contextlib

        import dspy

        from ragzoo.tracing import trace_example
        from ragzoo.usage import metering

        meter = metering(max_calls=self.max_calls, max_cost=self.max_cost) if self._meter \
            else contextlib.nullcontext()
        with dspy.context(lm=self.lm), meter, trace_example() as trace:
            prediction = self.program(question=question)
        answer = prediction.get("answer") if hasattr(prediction, "get") else getattr(prediction, "answer", None)
        passages = list(prediction.get("passages") or []) if hasattr(prediction, "get") else []
        calls = [{"predictor": c.signature, "model": c.model, "prompt_tokens": c.prompt_tokens,
                  "completion_tokens": c.completion_tokens, "cost": c.cost, "latency": round(c.latency, 4),
                  "cached": c.cached} for c in trace.lm_calls]
        retrievals = [{"query": r.query, "k": r.k, "pids": list(r.pids), "latency": round(r.latency, 4)}
                      for r in trace.retrievals]
        summary = trace.summary()
        usage = {key: summary[key] for key in ("lm_calls", "prompt_tokens", "completion_tokens", "cost")}
        usage["latency"] = round(summary["latency"], 4)
        return {"question": question, "answer": "" if answer is None else str(answer),
                "passages": [_passage_dict(p) for p in passages],
                "trace": {"lm_calls": calls, "retrievals": retrievals}, "usage": usage}

    def _answer_for(self, question: str, ticket: _Ticket) -> dict:
        """`answer` on a worker thread, for a question that may have been abandoned meanwhile."""
        if ticket.cancelled:  # its client left or its deadline passed while it waited for this thread
            raise QuestionCancelled("the question was abandoned before it started")
        with self._on_threads_lock:
            self._on_threads += 1
        try:
            _QUESTION.set(ticket)  # in a context of this question's own (see `_run`)
            if ticket.ends is not None:
                from ragzoo.endpoints import start_question_deadline

                # 429s are retried until the question's deadline, not past it (what is left of it: it waited)
                start_question_deadline(max(0.001, ticket.ends - time.monotonic()))
            return self.answer(question)
        finally:
            with self._on_threads_lock:
                self._on_threads -= 1

    def _has_room(self) -> bool:
        return self.running < self.max_concurrency and self.running + self.abandoned < self.workers

    def _wake(self) -> None:
        while self._waiting and self._has_room():
            waiter = self._waiting.popleft()
            if not waiter.done():
                self.running += 1
                waiter.set_result(None)

    def _leave(self) -> None:
        self.running -= 1
        self._wake()

    @staticmethod
    def _call_soon(loop, callback) -> None:
        try:
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed: the server stopped
            pass

    def _abandoned_done(self, _future=None) -> None:
        self.abandoned -= 1
        self._wake()

    async def _run(self, question: str, ticket: _Ticket) -> dict:
        """Wait for a worker (in arrival order), then answer on it. Cancelling this coroutine (deadline, client
        gone) gives the worker slot back at once: a question still waiting is never started, and a running one's
        thread is abandoned (it stops at its next LM call or attempt) rather than waited for."""
        loop = asyncio.get_running_loop()
        if self._waiting or not self._has_room():
            waiter = loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._leave()  # woken and cancelled at once: hand the slot on
                else:
                    try:
                        self._waiting.remove(waiter)
                    except ValueError:
                        pass
                raise
        else:
            self.running += 1
        work = self.pool.submit(contextvars.copy_context().run, self._answer_for, question, ticket)
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            ticket.cancelled = True
            if not work.cancel():  # already running on its thread: abandon it, count it until it ends
                self.abandoned += 1
                work.add_done_callback(lambda _: self._call_soon(loop, self._abandoned_done))
            raise
        finally:
            self._leave()

    async def submit(self, question: str, disconnected: Callable[[], Awaitable[Any]] | None = None) -> dict:
        """Answer `question`, within the deadline. `disconnected`: an awaitable that completes when the client
        goes away (the question is then cancelled: never started if it still waits, abandoned if it runs).
        Raises Overloaded (queue full), QuestionTimeout, ClientGone, or the program's error."""
        if self.admitted >= self.max_concurrency + self.max_queue:
            self.rejected += 1
            raise Overloaded()
        self.admitted += 1
        ticket = _Ticket(self.deadline)
        work = asyncio.ensure_future(self._run(question, ticket))
        self._questions.add(work)
        work.add_done_callback(self._questions.discard)
        watcher = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        try:
            done, _ = await asyncio.wait([work] if watcher is None else [work, watcher], timeout=self.deadline,
                                         return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                if work.cancelled():  # only `cut` cancels it while this waits
                    raise ShuttingDown()
                try:
                    result = work.result()
                except Exception as exc:
                    # a failure that came at the deadline is the deadline's (the LM layer gives up a request
                    # still waiting for an endpoint slot when the question's deadline passes): 504, not 502
                    if ticket.ends is not None and time.monotonic() >= ticket.ends:
                        self.timed_out += 1
                        raise self._timeout() from exc
                    raise
                self.served += 1
                return result
            ticket.cancelled = True
            work.cancel()
            if watcher is not None and watcher in done:
                self.cancelled += 1
                raise ClientGone()
            self.timed_out += 1
            raise self._timeout()
        except asyncio.CancelledError:  # the request's own task was cancelled (server shutting down)
            ticket.cancelled = True
            work.cancel()
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            self.admitted -= 1

    def _timeout(self) -> QuestionTimeout:
        return QuestionTimeout(f"the question did not finish within its {self.deadline:g} s deadline "
                               f"(ragzoo serve --deadline)")

    def cut(self) -> int:
        """On the event loop, as the server stops and waits no longer: every question admitted is answered at once
        with 503 (`ShuttingDown`); one still queued never starts, one on a worker thread is abandoned as past its
        deadline. Returns how many were cut."""
        questions = [work for work in self._questions if not work.done()]
        for work in questions:
            work.cancel()
        return len(questions)

    def close(self) -> int:
        """Once the server has stopped: questions still queued for a thread never start. Returns how many are still
        on a worker thread: abandoned (nobody waits for their answer), each until its LM request's timeout, and
        the interpreter would wait for them at exit (`ragzoo serve` cuts them)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._on_threads_lock:
            return self._on_threads


def _chat_question(body: Any) -> tuple[str | None, str | None]:
    """(the text of the last user message of an OpenAI chat request, None) or (None, why it cannot be read)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return None, "'messages' must be a list of chat messages"
    if len(messages) > MAX_MESSAGES:
        return None, (f"'messages' holds {len(messages):,} messages; this server's limit is {MAX_MESSAGES:,} "
                      f"(only the last user message is read: send fewer)")
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                texts = [part.get("text") for part in content
                         if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)]
                content = "\n".join(texts) if texts else None
            if not isinstance(content, str):
                break
            problem = _bad_text(content)
            if problem:
                return None, f"'messages[{position}].content' is not valid text: {problem}"
            return content, None
    return None, "no user message with text content in 'messages'"


def _ignored_options(body: dict, name: str) -> dict[str, str]:
    """{option: why it was not applied} for a chat request's options this server does not act on."""
    ignored = {}
    if body.get("model") not in (None, name):
        ignored["model"] = f"this server serves one model, {name!r}, which answered"
    for key, value in body.items():
        if key not in _HONOURED_OPTIONS and value is not None:
            ignored[key] = "not applied: the compiled program's own LM settings and prompts decide the answer"
    last_user = next((m for m in reversed(body.get("messages") or []) if isinstance(m, dict)
                      and m.get("role") == "user"), None)
    parts = last_user.get("content") if last_user is not None else None
    dropped = sorted({str(part.get("type")) for part in parts if isinstance(part, dict) and part.get("type") != "text"}
                     ) if isinstance(parts, list) else []
    if dropped:  # an image or audio part: the program reads the question's text alone
        ignored["content parts " + ", ".join(dropped)] = "not read: the program takes the text of the question"
    return ignored


def _max_tokens(body: dict) -> tuple[int | None, str | None]:
    """(the answer's token limit the request asks for or None, None) or (None, why it is not a limit)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None, f"'{key}' must be a positive integer, got {value!r}"
        return value, None
    return None, None


def _cut(text: str, max_tokens: int | None) -> tuple[str, bool]:
    """`text` cut to its first `max_tokens` tokens (cl100k, as the token counts), and whether it was cut."""
    if max_tokens is None:
        return text, False
    from ragzoo.engines import _encoding

    encoding = _encoding()
    if encoding is False:  # no tokenizer: ~4 characters a token, as `approx_tokens` counts
        return (text, False) if len(text) <= 4 * max_tokens else (text[:4 * max_tokens], True)
    tokens = encoding.encode(text, disallowed_special=())
    if len(tokens) <= max_tokens:
        return text, False
    # a token may end inside a character: drop the partial character rather than send a replacement mark
    return encoding.decode_bytes(tokens[:max_tokens]).decode("utf-8", errors="ignore"), True


_DSPY_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
_DSPY_LISTED = re.compile(r"^\d+\. `(\w+)`(?: \((.*?)\):)?", re.MULTILINE)  # a field, its type up to the first "):"
_DSPY_TEXT_TYPES = ("", "str", "Optional[str]", "Union[str, NoneType]", "str | None")  # what a text answer fills
_DSPY_TRAILER = "\n\nRespond with the corresponding output fields"


_DSPY_JSON_MARK = "Outputs will be a JSON object"
_DSPY_JSON_TRAILER = "\n\nRespond with a JSON object"
_DSPY_XML_MARK = "wrapped in XML tags"  # XMLAdapter's user message: "Respond with ... wrapped in XML tags `<answer>`."
_DSPY_XML_FIELD = re.compile(r"<(\w+)>\n(.*?)\n</\1>", re.DOTALL)


def _dspy_request(messages: list, last_user: str) -> tuple[dict, list, str] | None:
    """({input field: value} of the last user message, {output field: its type}, "chat", "json" or "xml") when the
    chat request is in DSPy's ChatAdapter format (its system message lists the fields and ends the structure with
    `[[ ## completed ## ]]`), its JSONAdapter's (the fallback ChatAdapter retries a failed parse with: the
    outputs as one JSON object) or its XMLAdapter's (each field in its own tags), else None."""
    system = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"), None)
    if not isinstance(system, str) or "Your output fields are:" not in system:
        return None
    if "[[ ## completed ## ]]" in system:
        shape, trailer = "chat", _DSPY_TRAILER
    elif _DSPY_JSON_MARK in system:
        shape, trailer = "json", _DSPY_JSON_TRAILER
    elif _DSPY_XML_MARK in last_user:
        shape, trailer = "xml", _DSPY_TRAILER
    else:
        return None
    head, _, rest = system.partition("Your output fields are:")
    outputs = dict(_DSPY_LISTED.findall(rest.split("All interactions will be structured", 1)[0]))
    body = last_user.split(trailer, 1)[0]
    if shape == "xml":
        inputs = {name: value.strip() for name, value in _DSPY_XML_FIELD.findall(body)}
    else:
        parts = _DSPY_FIELD.split(body)
        inputs = {name: value.strip() for name, value in zip(parts[1::2], parts[2::2])}
    if not outputs or not inputs:
        return None
    return inputs, outputs, shape


def _dspy_reply(values: dict[str, str], shape: str = "chat") -> str:
    """A reply in DSPy's ChatAdapter format (each field under its header, then the completion marker), its
    JSONAdapter's (one JSON object) or its XMLAdapter's (each field in its tags)."""
    if shape == "json":
        return json.dumps(values, ensure_ascii=False)
    if shape == "xml":
        return "\n\n".join(f"<{name}>\n{value}\n</{name}>" for name, value in values.items())
    return "".join(f"[[ ## {name} ## ]]\n{value}\n\n" for name, value in values.items()) + "[[ ## completed ## ]]"


def _failure(exc: BaseException) -> tuple[int, str, str, dict | None]:
    """(HTTP status, message, OpenAI error type, headers) of a question that did not get its answer."""
    from ragzoo.errors import BudgetExceeded

    if isinstance(exc, Overloaded):
        return 503, "the server is at capacity; retry later", "server_busy", None
    if isinstance(exc, ShuttingDown):
        return 503, "the server is shutting down; retry later", "server_busy", None
    if isinstance(exc, QuestionTimeout):
        return 504, _mended(str(exc)), "timeout", None
    if isinstance(exc, ClientGone):  # nobody reads this; the connection is gone
        return 400, "the client disconnected before the answer", "invalid_request_error", None
    if isinstance(exc, BudgetExceeded):  # not 429: clients retry a 429, and each retry would spend the budget again
        return 402, _mended(_redact(f"per-question budget reached: {exc}")), "budget_exceeded", None
    # the upstream LM or the retriever failed: say so, without secrets (and in text JSON can carry: an upstream's
    # reply quoted in the error may hold a lone surrogate)
    return 502, _mended(_redact(f"the program failed: {type(exc).__name__}: {exc}")[:2000]), "upstream_error", None


def create_app(service: ProgramService, *, max_question_chars: int = MAX_QUESTION_CHARS,
               max_body_bytes: int = MAX_BODY_BYTES, retry_after: int = 1, keepalive: float = KEEPALIVE_SECONDS,
               workers: int = 1):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import ClientDisconnect

    app = FastAPI(title="ragzoo compiled-program API", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.max_body_bytes = max_body_bytes
    api_key = os.environ.get(API_KEY_ENV) or None

    def ragzoo_error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"error": True, "message": message}, status_code=status, headers=headers)

    def openai_error(status: int, message: str, kind: str = "invalid_request_error",
                     headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                            status_code=status, headers=headers)

    def is_openai(request: Request) -> bool:
        return request.url.path.startswith(("/v1/", "/chat/", "/models"))

    def error_for(request: Request, status: int, message: str, kind: str = "invalid_request_error",
                  headers: dict | None = None) -> JSONResponse:
        if is_openai(request):
            return openai_error(status, message, kind, headers)
        return ragzoo_error(status, message, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc):
        return error_for(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):
        return error_for(request, 400, "invalid request")

    @app.exception_handler(Exception)
    async def _unexpected(request, exc):  # one line, JSON, never a traceback in the answer
        return error_for(request, 500, f"internal error: {type(exc).__name__}", "server_error")

    async def read_json(request: Request) -> tuple[Any, JSONResponse | None]:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            return None, error_for(request, 413, f"the request body is over {max_body_bytes:,} bytes")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body_bytes:
                    return None, error_for(request, 413, f"the request body is over {max_body_bytes:,} bytes")
                chunks.append(chunk)
        except ClientDisconnect:
            return None, error_for(request, 400, "the client disconnected before sending the whole body")
        try:
            return json.loads(b"".join(chunks)), None
        except ValueError as error:
            # Python refuses integers of over 4,300 digits: valid JSON, so say that, not "not JSON"
            why = ": a number in it has more than 4,300 digits" if "digits" in str(error) else ""
            return None, error_for(request, 400, f"the request body must be a JSON object{why}")
        except RecursionError:
            return None, error_for(request, 400, "the request body must be a JSON object: it is nested too deep")

    def authorized(request: Request) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())

    async def disconnected(request: Request) -> None:
        """Completes when the client goes away (the body is read by then: the next message is the disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    def question_problem(request: Request, question: Any) -> JSONResponse | None:
        if not isinstance(question, str) or not question.strip():
            return error_for(request, 400, "the question is missing or empty")
        if len(question) > max_question_chars:
            return error_for(request, 413, f"the question is {len(question):,} characters long; this "
                                           f"server's limit is {max_question_chars:,}")
        problem = _bad_text(question)
        if problem:
            return error_for(request, 400, f"the 'question' field is not valid text: {problem}")
        return None

    def failed(request: Request, exc: BaseException) -> JSONResponse:
        status, message, kind, headers = _failure(exc)
        if status == 503:
            headers = {"Retry-After": str(retry_after)}
        return error_for(request, status, message, kind, headers)

    async def run_question(request: Request, question: Any) -> tuple[dict | None, JSONResponse | None]:
        problem = question_problem(request, question)
        if problem:
            return None, problem
        try:
            return _sendable(await service.submit(question.strip(), lambda: disconnected(request))), None
        except Exception as exc:  # noqa: BLE001 - every failure is an HTTP error of its kind, never a traceback
            return None, failed(request, exc)

    @app.post("/ask")
    async def ask(request: Request):
        if not authorized(request):
            return ragzoo_error(401, f"missing or wrong bearer token (the server's {API_KEY_ENV})")
        body, problem = await read_json(request)
        if problem:
            return problem
        if not isinstance(body, dict):
            return ragzoo_error(400, "the request body must be a JSON object: {\"question\": ...}")
        result, problem = await run_question(request, body.get("question"))
        return problem or JSONResponse(result)

    async def chat(request: Request):
        if not authorized(request):
            return openai_error(401, f"missing or wrong bearer token (the server's {API_KEY_ENV})",
                                "authentication_error")
        body, problem = await read_json(request)
        if problem:
            return problem
        if not isinstance(body, dict):
            return openai_error(400, "the request body must be a JSON object")
        n = body.get("n", 1)
        if n is not None and (type(n) is not int or n != 1):  # true == 1 in Python, not in the API
            return openai_error(400, "only n=1 is supported")
        for key, kind, what in (("stream", bool, "true or false"), ("model", str, "a string")):
            if body.get(key) is not None and not isinstance(body[key], kind):  # "yes" is not true
                return openai_error(400, f"'{key}' must be {what}, got {body[key]!r}")
        question, problem_text = _chat_question(body)
        if question is None:
            return openai_error(400, problem_text)
        max_tokens, problem_text = _max_tokens(body)
        if problem_text:
            return openai_error(400, problem_text)
        for key in body:  # a key is named back in the reply: one that is not text cannot be
            if _bad_text(key):
                return openai_error(400, f"a request key is not valid text: {_bad_text(key)}")
        ignored = _ignored_options(body, service.name)
        dspy_fields, dspy_shape = None, "chat"
        dspy_request = _dspy_request(body["messages"], question)
        if dspy_request is not None:
            inputs, typed, dspy_shape = dspy_request
            dspy_fields = list(typed)
            unknown = [name for name in dspy_fields if name not in _DSPY_OUTPUTS]
            # the program answers in text: a typed field (int, bool, list) would fail DSPy's parse, after a paid run
            # and again on each of its retries
            not_text = [f"{name} ({kind})" for name, kind in typed.items() if name not in unknown and kind not in
                        _DSPY_TEXT_TYPES]
            if "question" not in inputs or "answer" not in dspy_fields or unknown or not_text:
                cannot = (f": it cannot fill {unknown}" if unknown else "") + \
                    (f": it answers in text, not {', '.join(not_text)}" if not_text else "")
                return openai_error(400, f"this server answers DSPy signatures `question -> answer` (and fills "
                                         f"`reasoning`); this request has inputs {sorted(inputs)} and asks for "
                                         f"{dspy_fields}" + cannot)
            question = inputs.pop("question")
            for name in inputs:
                ignored[f"input field {name}"] = "not read: the program takes the question and retrieves its own passages"

        def reply_text(result: dict) -> tuple[str, str]:
            """(the assistant message, finish_reason) of an answer: cut to max_tokens, in DSPy's fields if asked."""
            answer, cut = _cut(result["answer"], max_tokens)
            if dspy_fields is not None:
                note = f"Answered by the compiled program {service.name!r} (its trace: POST /ask)."
                answer = _dspy_reply({name: answer if name == "answer" else note for name in dspy_fields}, dspy_shape)
            return answer, "length" if cut else "stop"

        headers = {"X-Ragzoo-Ignored": _header_text(", ".join(ignored))} if ignored else None
        if body.get("stream"):
            return await stream_chat(request, question, body, reply_text, headers)
        result, problem = await run_question(request, question)
        if problem:
            return problem
        usage = result["usage"]
        content, finish = reply_text(result)
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": service.name,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": openai_usage(usage),
            "ragzoo": {"passages": result["passages"], "trace": result["trace"], "usage": usage, "ignored": ignored},
        }, headers=headers)

    def openai_usage(usage: dict) -> dict:
        return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}

    async def stream_chat(request: Request, question: Any, body: dict, reply_text, headers: dict | None):
        """Server-sent events in OpenAI's chunk format. Admission is decided before the stream starts (a refused
        question is a plain HTTP error); once it runs, Starlette's own watch for the client leaving cancels the
        generator, which cancels the question (a second reader of the connection would race it for the
        disconnect message)."""
        problem = question_problem(request, question)
        if problem:
            return problem
        work = asyncio.ensure_future(service.submit(question.strip()))
        await asyncio.sleep(0)  # submit's admission check runs before its first wait
        if work.done() and work.exception() is not None:
            return failed(request, work.exception())
        include_usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def event(payload: dict) -> str:
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        def chunk(choices: list, **extra) -> str:
            return event({"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                          "model": service.name, "choices": choices, **extra})

        def delta(content: dict, finish: str | None = None) -> str:
            return chunk([{"index": 0, "delta": content, "finish_reason": finish}])

        async def events():
            try:
                yield delta({"role": "assistant", "content": ""})
                while not (await asyncio.wait([work], timeout=keepalive))[0]:
                    yield ": keep-alive\n\n"
                try:
                    result = _sendable(work.result())
                except Exception as exc:  # noqa: BLE001 - the status line is gone: an error event says it
                    status, message, kind, _ = _failure(exc)
                    yield event({"error": {"message": message, "type": kind, "param": None, "code": status}})
                    return
                content, finish = reply_text(result)
                for start in range(0, len(content), 200):  # a few deltas, as a UI renders a streamed answer
                    yield delta({"content": content[start:start + 200]})
                yield delta({}, finish)
                if include_usage:
                    yield chunk([], usage=openai_usage(result["usage"]))
                yield "data: [DONE]\n\n"
            finally:
                if not work.done():
                    work.cancel()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **(headers or {})})

    app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    app.add_api_route("/chat/completions", chat, methods=["POST"])

    @app.get("/v1/models")
    async def models(request: Request):
        if not authorized(request):
            return openai_error(401, "missing or wrong bearer token", "authentication_error")
        return {"object": "list", "data": [{"id": service.name, "object": "model", "created": 0,
                                            "owned_by": "ragzoo"}]}

    @app.get("/health")
    async def health():
        return {"status": "ok", "method": service.method, "model": service.name,
                "max_concurrency": service.max_concurrency, "max_queue": service.max_queue,
                "in_flight": service.admitted, "abandoned": service.abandoned, "deadline": service.deadline,
                "workers": workers, "worker": os.getpid()}

    return app
