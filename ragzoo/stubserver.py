"""A loopback OpenAI-compatible LM server for tests and benchmarks, with scripted answers and faults.

    with StubLMServer(latency=0.0, faults=["503", None]) as server:
        lm = dspy.LM("openai/stub", api_base=server.base_url + "/v1", api_key="stub", cache=False)

Endpoints: `POST /v1/chat/completions` (and `/chat/completions`), `GET /v1/models` (and `/models`).
Replies are OpenAI chat-completion JSON with `usage` (cl100k token counts, memoised per message text).
Non-streaming only; HTTP/1.1 keep-alive, bodies by Content-Length. The server is one asyncio loop on a
background thread: latency and held-back replies are sleeps, not parked threads, so a load test's stub costs
~0.3 ms of CPU per request. Responder, fault and slip functions run on that loop: keep them quick.

Answers come from `responder(messages, request_body) -> str` (or a fixed string). The default,
`adapter_responder`, reads the DSPy ChatAdapter/JSONAdapter prompt (output field names from the system
message, types from its `# note:` lines) and answers type-valid placeholders, deterministically.

Faults (`faults=`): a list (entry i applies to the i-th chat request, 0-based; None = answer normally;
requests past the end are answered normally), a dict {index: fault}, or a function
`(index, body) -> fault | None`. A fault is a `Fault` or its short string:
    "429"            HTTP 429 without Retry-After        "429:0.5"  HTTP 429 with Retry-After: 0.5
    "500" "502" "503" (any 4xx/5xx code), optional ":<retry-after>"
    "reset"          the connection is closed with a TCP reset before any reply
    "timeout:<s>"    the reply is held back for <s> seconds (past the client's read timeout), then sent
    "truncated"      HTTP 200 whose JSON body is cut in half
    "garbage"        HTTP 200 with a completion that does not parse for the signature
    "empty"          HTTP 200 with an empty completion
    "hang"           the reply never comes (until the server stops): a straggler
    "echo"           HTTP 200 whose text fields repeat the key the request was sent with (its Authorization
                     header), as an upstream that echoes what it is sent: the test of what ragzoo keeps
`latency` (seconds) delays every chat reply. Counters: `requests` (chat requests), `faults_served`,
`log` (one `(index, fault kind or "ok")` per chat request), `models_requests`; `GET /v1/stats` answers
{requests, in_flight, max_in_flight, rejected} (a stub in a process of its own, sampled by a benchmark);
`GET /v1/stats/peak-reset` answers the same and starts `max_in_flight` again from the requests in flight now.

Slips (`slips=`): format slips of a real model, on HTTP 200 replies. A rate (`slips=0.1`: a seeded 10% of
replies slip, the shape drawn from `slip_shapes`, default all of `SLIP_SHAPES`; the draw is a function of
`slip_seed` and the request's messages, so a rerun slips the same requests whatever the thread order, and a
re-ask, whose messages differ, is drawn afresh), or a schedule like `faults` (list / dict / function giving a
shape name or None per request). Shapes:
    "preamble"     chatty sentence before the answer       "fences"      the answer inside ``` fences
    "glued"        field headers glued to the previous value (no line break before "[[ ## x ## ]]")
    "json"         a JSON object instead of the field format (the field format when JSON was asked for)
    "fenced_json"  a JSON object inside ```json fences
    "words"        typed values written in words: bool "Yes." / "No.", Literal "It is X.", list[int] "0 and 2",
                   int "two"
    "empty"        an empty reply                          "length"      half the reply, finish_reason "length"
    "headers"      headers in another style ("**answer:** value" lines)
Counters: `slips_served` ({shape: count}).

Holding (`hold_until=N`): every chat reply waits until N chat requests are in flight at once (then they all
go on, and later requests are not held), or `hold_timeout` seconds (default 30) passed: a load test's proof
that N requests were in flight together, whatever the time its client takes to start them all.

Capacity (`capacity=N`): at most N chat requests are served at once; one more is answered at once with
HTTP 429 and `Retry-After: <capacity_retry_after>`. Counters: `rejected`, `max_in_flight`.

As a command (rehearse a setup before paying for a real model; Ctrl-C stops it):
    python -m ragzoo.stubserver --port 8000 --latency 0.2 --slips 0.1 --capacity 4
    ragzoo evaluate --method rag --dataset hotpotqa -n 20 --lm openai/stub-model \
        --api-base http://127.0.0.1:8000/v1 --out runs/rehearsal
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Mapping, Sequence, Union

from ragzoo.engines import _encoding, approx_tokens

# ---------------------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------------------

FAULT_KINDS = ("http", "reset", "timeout", "hang", "truncated", "garbage", "empty", "echo")


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    status: int = 0  # for kind "http"
    retry_after: float | None = None  # Retry-After header for kind "http"
    seconds: float = 0.0  # hold-back for kind "timeout"

    @classmethod
    def parse(cls, spec: "FaultSpec") -> "Fault | None":
        if spec is None or isinstance(spec, Fault):
            return spec
        if isinstance(spec, int):
            return cls("http", status=spec)
        text = str(spec).strip().lower()
        head, _, arg = text.partition(":")
        if head.isdigit():
            return cls("http", status=int(head), retry_after=float(arg) if arg else None)
        if head == "timeout":
            return cls("timeout", seconds=float(arg) if arg else 5.0)
        if head in ("reset", "hang", "truncated", "garbage", "empty", "echo"):
            return cls(head)
        raise ValueError(f"unknown stub fault {spec!r}; use e.g. '429', '429:0', '503', 'reset', 'timeout:2', "
                         "'hang', 'truncated', 'garbage', 'empty', 'echo'")

    @property
    def label(self) -> str:
        return str(self.status) if self.kind == "http" else self.kind


FaultSpec = Union[Fault, str, int, None]
Faults = Union[Sequence[FaultSpec], Mapping[int, FaultSpec], Callable[[int, dict], FaultSpec], None]

# ---------------------------------------------------------------------------------------------------------
# The default responder: type-valid answers read from a DSPy adapter prompt
# ---------------------------------------------------------------------------------------------------------

_FIELD_LINE = re.compile(r"^\d+\. `(\w+)`", re.MULTILINE)
_NOTE = re.compile(r"\{(\w+)\}\"?\s+# note: the value you produce (.*)")
GARBAGE = "I am not sure how to format that, sorry."


def _output_fields(system: str) -> list[str]:
    start = system.find("Your output fields are:")
    if start < 0:
        return []
    end = system.find("All interactions will be structured", start)
    block = system[start:end if end > 0 else None]
    return _FIELD_LINE.findall(block)


def _value_from_note(name: str, note: str | None) -> Any:
    from ragzoo.engines import placeholder_from_schema, placeholder_text

    if not note:
        return placeholder_text(name)
    if note.startswith("must be True or False"):
        return True
    if note.startswith("must be a single int"):
        return 1
    if note.startswith("must be a single float"):
        return 0.5
    for prefix in ("must exactly match (no extra characters) one of: ", "must be one of: "):
        if note.startswith(prefix):
            return note[len(prefix):].split("; ")[0].strip()
    marker = "must adhere to the JSON schema: "
    if note.startswith(marker):
        try:
            return placeholder_from_schema(json.loads(note[len(marker):]), name)
        except json.JSONDecodeError:
            return placeholder_text(name)
    return placeholder_text(name)


def _unquote(note: str) -> str:
    """JSONAdapter prints the note inside a JSON string ("{field}   # note: ... {\"type\": ...}")."""
    note = note[:-1] if note.endswith('",') else note  # every field line but the last ends with a comma
    if note.endswith('"'):
        try:
            return json.loads('"' + note[:-1] + '"')
        except json.JSONDecodeError:
            return note
    return note


_FIELD_TYPE = re.compile(r"^\d+\. `(\w+)` \((.*)\)", re.MULTILINE)
_BY_TYPE = {"bool": True, "int": 1, "float": 0.5, "list[int]": [1], "list[str]": None}


def _value_from_type(name: str, type_name: str | None) -> Any:
    """XMLAdapter prints no note for nested (list) fields: the type in the field list says what to answer."""
    from ragzoo.engines import placeholder_text

    if type_name == "list[str]":
        return [placeholder_text(name)]
    if type_name in _BY_TYPE:
        return _BY_TYPE[type_name]
    return placeholder_text(name)


# an output field a program reads as yes or no (`answer_mode="yes_no"`): "1. `answer` (str): yes or no"
_YES_OR_NO = re.compile(r"^\d+\. `(\w+)` \(str\): yes or no\s*$", re.MULTILINE)


def adapter_answer(system: str) -> dict[str, Any]:
    """{output field: placeholder value} for the signature described by a DSPy adapter system message. A free-text
    field described as yes or no gets "yes" (a placeholder text there failed every StrategyQA question)."""
    notes = {match.group(1): _unquote(match.group(2).strip()) for match in _NOTE.finditer(system)}
    start = system.find("Your output fields are:")
    types_ = dict(_FIELD_TYPE.findall(system[start:])) if start >= 0 else {}
    yes_or_no = set(_YES_OR_NO.findall(system[start:])) if start >= 0 else set()
    return {name: "yes" if name in yes_or_no else
            _value_from_note(name, notes[name]) if name in notes else _value_from_type(name, types_.get(name))
            for name in _output_fields(system)}


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if not isinstance(value, bool) else str(value)


def prompt_style(system: str) -> str:
    """Which DSPy adapter wrote the prompt: "chat", "xml" or "json"."""
    if "[[ ## completed ## ]]" in system:
        return "chat"
    if re.search(r"<(\w+)>\s*\{\1\}", system):
        return "xml"
    return "json"


def render_answer(values: dict[str, Any], style: str) -> str:
    """The well-formed reply of `values` in an adapter's format."""
    if style == "chat":
        parts = [f"[[ ## {name} ## ]]\n{_render(value)}" for name, value in values.items()]
        return "\n\n".join(parts) + "\n\n[[ ## completed ## ]]"
    if style == "xml":
        return "\n".join(_xml_field(name, value) for name, value in values.items())
    return json.dumps(values)


def _xml_field(name: str, value: Any) -> str:
    if isinstance(value, list):  # XMLAdapter asks for lists as <name><item>...</item></name>
        return f"<{name}>" + "".join(f"<item>{_render(item)}</item>" for item in value) + f"</{name}>"
    return f"<{name}>\n{_render(value)}\n</{name}>"


def adapter_responder(messages: list[dict], body: dict | None = None) -> str:
    """Answer a DSPy-formatted chat request with type-valid placeholders (Chat, JSON or XML adapter)."""
    return _answer_for_system(_system_of(messages))


def echo_answer(system: str, key: str) -> str:
    """A well-formed reply whose every free-text field carries `key` (what an echoing upstream answers)."""
    values = adapter_answer(system)
    for name, value in values.items():
        if isinstance(value, str) and value.lower() not in ("true", "false", "yes", "no", "unknown"):
            values[name] = f"{value} (you sent me {key})"
    return render_answer(values, prompt_style(system)) if values else f"you sent me {key}"


@functools.lru_cache(maxsize=256)
def _answer_for_system(system: str) -> str:
    """The reply to a system message: a function of it alone, so a program's repeated prompt is read once."""
    values = adapter_answer(system)
    if not values:
        return "stub answer"
    return render_answer(values, prompt_style(system))


# ---------------------------------------------------------------------------------------------------------
# Slips: the format mistakes of real models
# ---------------------------------------------------------------------------------------------------------

SLIP_SHAPES = ("preamble", "fences", "glued", "json", "fenced_json", "words", "empty", "length", "headers")
PREAMBLE = "Sure! Here is my answer, in the format you asked for.\n\n"
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _in_words(value: Any, note: str | None) -> Any:
    note = note or ""
    if isinstance(value, bool):
        return "Yes." if value else "No."
    if isinstance(value, int) and note.startswith("must be a single int") and 0 <= value <= 10:
        return _NUMBER_WORDS[value]
    if isinstance(value, str) and note.startswith(("must exactly match", "must be one of")):
        return f"I would say it is {value}."
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if not value:
            return "None of them."
        if len(value) == 1:
            return f"Only {value[0]}."
        return ", ".join(str(v) for v in value[:-1]) + f" and {value[-1]}"
    return value


def slip_answer(system: str, shape: str) -> tuple[str, str]:
    """(reply text, finish_reason) of a reply to the adapter prompt `system` that slips in `shape`."""
    if shape not in SLIP_SHAPES:
        raise ValueError(f"unknown slip shape {shape!r}; known: {', '.join(SLIP_SHAPES)}")
    notes = {match.group(1): _unquote(match.group(2).strip()) for match in _NOTE.finditer(system)}
    values = adapter_answer(system) or {"answer": "stub answer"}
    style = prompt_style(system)
    normal = render_answer(values, style)
    if shape == "preamble":
        return PREAMBLE + normal, "stop"
    if shape == "fences":
        return f"```\n{normal}\n```", "stop"
    if shape == "glued":
        if style == "xml":
            return "".join(_xml_field(name, value).replace("\n", "") for name, value in values.items()), "stop"
        parts = [f"[[ ## {name} ## ]]\n{_render(value)}" for name, value in values.items()]
        return " ".join(parts) + " [[ ## completed ## ]]", "stop"
    if shape == "json":
        return (render_answer(values, "chat") if style == "json" else json.dumps(values)), "stop"
    if shape == "fenced_json":
        return f"```json\n{json.dumps(values, indent=2)}\n```", "stop"
    if shape == "words":
        worded = {name: _in_words(value, notes.get(name)) for name, value in values.items()}
        return render_answer(worded, style), "stop"
    if shape == "empty":
        return "", "stop"
    if shape == "length":
        return normal[: max(1, len(normal) // 2)], "length"
    return "\n\n".join(f"**{name}:** {_render(value)}" for name, value in values.items()), "stop"  # headers


def _system_of(messages: list[dict]) -> str:
    return next((_content(m) for m in messages if m.get("role") in ("system", "developer")), "")


def seeded_slips(rate: float, seed: int = 0, shapes: Sequence[str] = SLIP_SHAPES) -> Callable[[int, dict], str | None]:
    """A slip schedule: a `rate` share of requests slip, in a shape drawn from `shapes`; both draws are a
    function of `seed` and the request's messages only (thread order and request index do not matter)."""
    import hashlib
    import random

    shapes = tuple(shapes)
    unknown = sorted(set(shapes) - set(SLIP_SHAPES))
    if unknown or not shapes:
        raise ValueError(f"unknown slip shape(s) {unknown}; known: {', '.join(SLIP_SHAPES)}")
    if not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"slip rate must be between 0 and 1, got {rate!r}")

    def schedule(index: int, body: dict) -> str | None:
        digest = hashlib.sha256(json.dumps([seed, body.get("messages")], sort_keys=True, default=str).encode())
        rng = random.Random(digest.hexdigest())
        if rng.random() >= rate:
            return None
        return rng.choice(shapes)

    return schedule


def _content(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


Responder = Callable[[list, dict], str]

# ---------------------------------------------------------------------------------------------------------
# The server: one asyncio loop on a background thread (latency is a sleep on the loop, not a parked thread;
# a request costs a parse, a dict lookup or two and one write; ~0.3 ms of CPU)
# ---------------------------------------------------------------------------------------------------------

_TOKEN_CACHE_SIZE = 4096


class _TokenCounter:
    """cl100k token counts (`ragzoo.engines.approx_tokens`) memoised per text: a DSPy program sends the same
    system message (and gets the same placeholder answers) on every call, so most counts are lookups."""

    def __init__(self, size: int = _TOKEN_CACHE_SIZE):
        self.size = size
        self._counts: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        count = self._counts.get(text)
        if count is None:
            count = approx_tokens(text)
            if len(self._counts) >= self.size:
                self._counts.clear()  # a crude bound; prompts that repeat are back in after one request
            self._counts[text] = count
        return count


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class _BadRequest(Exception):
    pass


class StubLMServer:
    """A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions API (see module docstring).

    It runs an asyncio loop on one background thread: latency, `timeout:` and `hang` are sleeps on that loop,
    so hundreds of requests can be in flight at little CPU. A responder, fault or slip function is called on
    the loop's thread: it must be quick and must not block."""

    def __init__(self, responder: Responder | str | None = None, *, latency: float = 0.0, faults: Faults = None,
                 model: str = "stub-model", host: str = "127.0.0.1", port: int = 0,
                 slips: "float | Sequence[str | None] | Mapping[int, str] | Callable | None" = None,
                 slip_seed: int = 0, slip_shapes: Sequence[str] = SLIP_SHAPES, capacity: int | None = None,
                 capacity_retry_after: float = 0.05, hold_until: int | None = None, hold_timeout: float = 30.0,
                 usage: bool = True):
        self.responder = responder if responder is not None else adapter_responder
        self.usage = usage  # False: replies carry no `usage`, as some local OpenAI-compatible servers send
        self.latency = float(latency)
        self.capacity = capacity
        self.capacity_retry_after = float(capacity_retry_after)
        for name, value in (("latency", self.latency), ("retry-after", self.capacity_retry_after)):
            if not 0.0 <= value < float("inf"):  # nan was served as no latency at all
                raise ValueError(f"--{name} must be a finite number of seconds, at least 0; got {value}")
        self.hold_until = hold_until
        self.hold_timeout = float(hold_timeout)
        self._gathered: asyncio.Event | None = None
        self.rejected = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.slips_served: dict[str, int] = {}
        self.set_slips(slips, seed=slip_seed, shapes=slip_shapes)
        self.model = model
        self.host = host
        self.port = port
        self.requests = 0
        self.models_requests = 0
        self.faults_served = 0
        self.log: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._tokens = _TokenCounter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._stopping: asyncio.Event | None = None
        self._connections: set[asyncio.Task] = set()
        self._thread: threading.Thread | None = None
        self.set_faults(faults)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> "StubLMServer":
        if self._thread is not None:
            return self
        _encoding()  # load tiktoken's table now (about a second, once per process), not in the first request
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="stub-lm", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join(timeout=5)
            self._thread = None
            raise failure[0]
        self._thread.name = f"stub-lm-{self.port}"
        return self

    def _run(self, ready: threading.Event, failure: list) -> None:
        loop = asyncio.new_event_loop()
        try:
            try:
                self._server = loop.run_until_complete(asyncio.start_server(
                    self._connection, self.host, self.port, backlog=128, reuse_address=True))
            except BaseException as error:  # noqa: BLE001 - handed to start()
                failure.append(error)
                return
            self.port = self._server.sockets[0].getsockname()[1]
            self._stopping = asyncio.Event()
            self._gathered = asyncio.Event()
            self._loop = loop
            ready.set()
            loop.run_until_complete(self._serve_until_stopped())
        finally:
            ready.set()
            loop.close()

    async def _serve_until_stopped(self) -> None:
        await self._stopping.wait()
        self._server.close()  # no new connections
        for task in list(self._connections):  # held replies (latency, timeout, hang) and idle keep-alives
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        await self._server.wait_closed()

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            try:
                self._loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:  # the loop already ended
                pass
        self._thread.join(timeout=10)
        self._thread = None
        self._server = None
        self._loop = None

    def __enter__(self) -> "StubLMServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`; OpenAI clients want `base_url + "/v1"`."""
        return f"http://{self.host}:{self.port}"

    # -- behaviour ------------------------------------------------------------------------------------
    def set_faults(self, faults: Faults) -> None:
        """Replace the fault schedule; indexes keep counting from the requests already received."""
        if faults is None or callable(faults):
            self._faults = faults
        elif isinstance(faults, Mapping):
            self._faults = {int(key): Fault.parse(value) for key, value in faults.items()}
        else:
            self._faults = [Fault.parse(value) for value in faults]

    def set_slips(self, slips, *, seed: int = 0, shapes: Sequence[str] = SLIP_SHAPES) -> None:
        """Replace the slip schedule: a rate (seeded, see `seeded_slips`), a list / dict / function of shapes
        per request index, or None (no slips)."""
        if slips is None:
            self._slips = None
        elif isinstance(slips, (int, float)) and not isinstance(slips, bool):
            self._slips = seeded_slips(float(slips), seed, shapes)
        elif callable(slips):
            self._slips = slips
        else:
            table = dict(slips) if isinstance(slips, Mapping) else dict(enumerate(slips))
            for shape in table.values():
                if shape is not None and shape not in SLIP_SHAPES:
                    raise ValueError(f"unknown slip shape {shape!r}; known: {', '.join(SLIP_SHAPES)}")
            self._slips = lambda index, body: table.get(index)

    def _slip(self, index: int, body: dict) -> str | None:
        if self._slips is None:
            return None
        shape = self._slips(index, body)
        if shape is not None:
            with self._lock:
                self.slips_served[shape] = self.slips_served.get(shape, 0) + 1
                if self.log and self.log[-1][0] == index:
                    self.log[-1] = (index, f"slip:{shape}")
        return shape

    def _enter(self) -> bool:
        with self._lock:
            if self.capacity is not None and self.in_flight >= self.capacity:
                self.rejected += 1
                return False
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.hold_until is not None and self.in_flight >= self.hold_until:
                self._gathered.set()  # _enter runs on the loop's thread
            return True

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def answer(self, messages: list[dict], body: dict) -> str:
        if isinstance(self.responder, str):
            return self.responder
        return self.responder(messages, body)

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = self.models_requests = self.faults_served = self.rejected = self.max_in_flight = 0
            self.slips_served.clear()
            self.log.clear()

    def _next(self, body: dict) -> tuple[int, Fault | None]:
        with self._lock:
            index = self.requests
            self.requests += 1
        faults = self._faults
        if faults is None:
            fault = None
        elif callable(faults):
            fault = Fault.parse(faults(index, body))
        elif isinstance(faults, dict):
            fault = faults.get(index)
        else:
            fault = faults[index] if index < len(faults) else None
        with self._lock:
            self.faults_served += fault is not None
            self.log.append((index, fault.label if fault else "ok"))
        return index, fault

    def _count_models(self) -> None:
        with self._lock:
            self.models_requests += 1

    async def _wait(self, seconds: float | None) -> None:
        """Sleep `seconds` (None: until the server stops). `stop()` cancels the connection tasks, so a stop
        ends every sleeper at once."""
        if seconds is None:
            await self._stopping.wait()
        elif seconds > 0:
            await asyncio.sleep(seconds)

    # -- HTTP -----------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One keep-alive connection: requests are read and answered in turn."""
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                try:
                    method, path, keep_alive, length, authorization = self._parse_head(head)
                    raw = await reader.readexactly(length) if length else b""
                except _BadRequest:
                    self._write(writer, 400, {"error": {"message": "bad request", "type": "invalid_request_error"}},
                                keep_alive=False)
                    return
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if method == "GET":
                    keep = self._get(writer, path, keep_alive)
                elif method == "POST":
                    keep = await self._post(writer, path, raw, keep_alive, authorization)
                else:
                    keep = self._write(writer, 501, {"error": {"message": f"method {method} not supported",
                                                               "type": "not_found"}}, keep_alive=keep_alive)
                if not keep:
                    return
                try:
                    await writer.drain()
                except ConnectionError:
                    return
        except asyncio.CancelledError:  # the server stops
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    @staticmethod
    def _parse_head(head: bytes) -> tuple[str, str, bool, int, str]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise _BadRequest()
        method, path, version = parts
        keep_alive = version != "HTTP/1.0"
        length, authorization = 0, ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise _BadRequest() from None
                if length < 0:
                    raise _BadRequest()
            elif name == "connection":
                token = value.strip().lower()
                keep_alive = token == "keep-alive" if version == "HTTP/1.0" else token != "close"
            elif name == "transfer-encoding" and value.strip().lower() != "identity":
                raise _BadRequest()  # the stub reads Content-Length bodies only, like http.server did
            elif name == "authorization":
                authorization = value.strip()
        return method, path, keep_alive, length, authorization

    def _write(self, writer: asyncio.StreamWriter, status: int, payload: dict | bytes, headers: dict | None = None,
               *, keep_alive: bool = True) -> bool:
        """Send one reply (head and body in one write); False when the connection is to be closed."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        if not keep_alive:
            extra += "Connection: close\r\n"
        head = (f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n{extra}\r\n")
        try:
            writer.write(head.encode("latin-1") + data)
        except (ConnectionError, RuntimeError):  # the client gave up (e.g. its read timeout): nothing to answer
            return False
        return keep_alive

    def _get(self, writer: asyncio.StreamWriter, path: str, keep_alive: bool) -> bool:
        if path.rstrip("/") in ("/v1/models", "/models"):
            self._count_models()
            return self._write(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "ragzoo-stub"}]}, keep_alive=keep_alive)
        if path.rstrip("/") in ("/v1/stats", "/stats", "/v1/stats/peak-reset"):  # a load test's view of a stub in
            with self._lock:  # another process; peak-reset starts a new window for `max_in_flight`
                if path.rstrip("/").endswith("peak-reset"):
                    self.max_in_flight = self.in_flight
                stats = {"requests": self.requests, "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                         "rejected": self.rejected}
            return self._write(writer, 200, stats, keep_alive=keep_alive)
        return self._write(writer, 404, {"error": {"message": f"no route {path}", "type": "not_found"}},
                           keep_alive=keep_alive)

    async def _post(self, writer: asyncio.StreamWriter, path: str, raw: bytes, keep_alive: bool,
                    authorization: str = "") -> bool:
        if path.split("?")[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self._write(writer, 404, {"error": {"message": f"no route {path}", "type": "not_found"}},
                               keep_alive=keep_alive)
        try:
            body = json.loads(raw or b"{}")
            messages = body["messages"]
            # as a real server: a list of message objects, each with text content (or text parts); anything else
            # is a 400, not a dropped connection and a traceback
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and (isinstance(m.get("content"), (str, list))
                                             or (m.get("content") is None and m.get("role") == "assistant"))
                    and all(isinstance(part, dict) and isinstance(part.get("text", ""), str)
                            for part in (m.get("content") if isinstance(m.get("content"), list) else []))
                    for m in messages):
                raise TypeError("messages must be a list of message objects with text content")
        except (ValueError, KeyError, TypeError):
            return self._write(writer, 400, {"error": {"message": "body must be JSON with 'messages', a list of "
                                                                  "message objects with text content",
                                                       "type": "invalid_request_error"}}, keep_alive=keep_alive)
        if body.get("stream"):
            return self._write(writer, 400, {"error": {"message": "the stub server does not stream",
                                                       "type": "invalid_request_error"}}, keep_alive=keep_alive)
        if not self._enter():
            retry = {"Retry-After": f"{self.capacity_retry_after:g}"}
            return self._write(writer, 429, {"error": {"message": f"the stub serves {self.capacity} requests at a "
                                                                  "time", "type": "rate_limit_error"}}, retry,
                               keep_alive=keep_alive)
        try:
            return await self._complete(writer, body, messages, keep_alive, authorization)
        finally:
            self._leave()

    async def _complete(self, writer: asyncio.StreamWriter, body: dict, messages: list, keep_alive: bool,
                        authorization: str = "") -> bool:
        index, fault = self._next(body)
        if self.hold_until is not None and not self._gathered.is_set():
            try:
                await asyncio.wait_for(self._gathered.wait(), self.hold_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                pass  # go on: the caller's max_in_flight tells it the N never came together
        if self.latency:
            await self._wait(self.latency)
        if fault is not None and fault.kind == "hang":
            await self._wait(None)
            return False
        if fault is not None and fault.kind == "reset":
            self._reset(writer)
            return False
        if fault is not None and fault.kind == "timeout":
            await self._wait(fault.seconds)
        if fault is not None and fault.kind == "http":
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            kind = "rate_limit_error" if fault.status == 429 else "server_error"
            return self._write(writer, fault.status, {"error": {"message": f"stub fault {fault.status}",
                                                                "type": kind}}, headers, keep_alive=keep_alive)
        finish_reason = "stop"
        shape = self._slip(index, body) if fault is None else None
        if fault is not None and fault.kind == "garbage":
            text = GARBAGE
        elif fault is not None and fault.kind == "empty":
            text = ""
        elif fault is not None and fault.kind == "echo":
            text = echo_answer(_system_of(messages), authorization.removeprefix("Bearer ").strip())
        elif shape is not None:
            text, finish_reason = slip_answer(_system_of(messages), shape)
        else:
            text = self.answer(messages, body)
        prompt_tokens = sum(self._tokens(_content(m)) for m in messages if isinstance(m, dict))
        completion_tokens = self._tokens(text) if text else 0
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        if not self.usage:
            del payload["usage"]
        if fault is not None and fault.kind == "truncated":
            data = json.dumps(payload).encode()
            return self._write(writer, 200, data[: len(data) // 2], keep_alive=keep_alive)
        return self._write(writer, 200, payload, keep_alive=keep_alive)

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        # SO_LINGER 0 makes close() send a TCP RST: the client sees "connection reset by peer".
        sock = writer.get_extra_info("socket")
        try:
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------------------
# python -m ragzoo.stubserver
# ---------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the stub until Ctrl-C (or SIGTERM); one line says where."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m ragzoo.stubserver",
        description="A loopback OpenAI-compatible LM server with type-valid placeholder answers, latency, faults, "
                    "format slips and a capacity limit: rehearse a setup (threads, timeouts, budgets, adapters) "
                    "before paying for a real model. Point ragzoo at it with --lm openai/stub-model "
                    "--api-base http://127.0.0.1:PORT/v1.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port)")
    parser.add_argument("--model", default="stub-model", help="model id listed by /v1/models (default stub-model)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every reply (default 0)")
    parser.add_argument("--slips", type=float, default=0.0, help="share of replies that slip their format, 0..1")
    parser.add_argument("--slip-shapes", default=",".join(SLIP_SHAPES),
                        help=f"comma-separated slip shapes (default all: {','.join(SLIP_SHAPES)})")
    parser.add_argument("--slip-seed", type=int, default=0, help="seed of the slip draw (default 0)")
    parser.add_argument("--capacity", type=int, help="requests served at once; more get HTTP 429 (default no limit)")
    parser.add_argument("--retry-after", type=float, default=0.05, help="Retry-After of a capacity 429 (s)")
    parser.add_argument("--fault-every", type=int, default=0, metavar="N",
                        help="every N-th request gets --fault (default never)")
    parser.add_argument("--no-usage", action="store_true", help="replies without `usage` (as some local servers)")
    parser.add_argument("--fault", default="503", help="the fault of --fault-every: 429, 503, reset, hang, "
                                                        "timeout:S, truncated, garbage, empty, echo (default 503)")
    args = parser.parse_args(argv)
    shapes = [shape.strip() for shape in args.slip_shapes.split(",") if shape.strip()]
    try:
        fault = Fault.parse(args.fault)
        faults = (lambda index, body: fault if (index + 1) % args.fault_every == 0 else None) \
            if args.fault_every > 0 else None
        server = StubLMServer(latency=args.latency, faults=faults, model=args.model, host=args.host, port=args.port,
                              slips=args.slips or None, slip_seed=args.slip_seed, slip_shapes=shapes,
                              capacity=args.capacity, capacity_retry_after=args.retry_after,
                              usage=not args.no_usage)
        server.start()
    except (ValueError, OSError) as error:
        print(f"python -m ragzoo.stubserver: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"stub LM server on {server.base_url}/v1 (model {args.model}); use --lm openai/{args.model} "
          f"--api-base {server.base_url}/v1; Ctrl-C stops", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(f"stub LM server stopped after {server.requests} chat request(s), slips {server.slips_served or 0}, "
              f"429s for capacity {server.rejected}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
