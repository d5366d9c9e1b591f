"""A loopback OpenAI-compatible LM server for tests and benchmarks, with scripted answers and faults.

    with StubLMServer(latency=0.0, faults=["503", None]) as server:
        lm = dspy.LM("openai/stub", api_base=server.base_url + "/v1", api_key="stub", cache=False)

Endpoints: `POST /v1/chat/completions` (and `/chat/completions`), `GET /v1/models` (and `/models`).
Replies are OpenAI chat-completion JSON with `usage` (cl100k token counts). Non-streaming only.

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
`latency` (seconds) delays every chat reply. Counters: `requests` (chat requests), `faults_served`,
`log` (one `(index, fault kind or "ok")` per chat request), `models_requests`.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence, Union

from ragzoo.engines import approx_tokens

# ---------------------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------------------

FAULT_KINDS = ("http", "reset", "timeout", "truncated", "garbage", "empty")


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
        if head in ("reset", "truncated", "garbage", "empty"):
            return cls(head)
        raise ValueError(f"unknown stub fault {spec!r}; use e.g. '429', '429:0', '503', 'reset', 'timeout:2', "
                         "'truncated', 'garbage', 'empty'")

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


def adapter_answer(system: str) -> dict[str, Any]:
    """{output field: placeholder value} for the signature described by a DSPy adapter system message."""
    notes = {match.group(1): _unquote(match.group(2).strip()) for match in _NOTE.finditer(system)}
    return {name: _value_from_note(name, notes.get(name)) for name in _output_fields(system)}


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if not isinstance(value, bool) else str(value)


def adapter_responder(messages: list[dict], body: dict | None = None) -> str:
    """Answer a DSPy-formatted chat request with type-valid placeholders (ChatAdapter or JSONAdapter)."""
    system = next((_content(m) for m in messages if m.get("role") in ("system", "developer")), "")
    values = adapter_answer(system)
    if not values:
        return "stub answer"
    if "[[ ## completed ## ]]" in system:
        parts = [f"[[ ## {name} ## ]]\n{_render(value)}" for name, value in values.items()]
        return "\n\n".join(parts) + "\n\n[[ ## completed ## ]]"
    return json.dumps(values)


def _content(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


Responder = Callable[[list, dict], str]

# ---------------------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes; with Nagle on, each reply waits for the client's delayed ACK
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: tests read counters
        pass

    def do_GET(self) -> None:  # noqa: N802
        stub = self.server.stub
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            stub._count_models()
            self._json(200, {"object": "list", "data": [{"id": stub.model, "object": "model", "created": 0,
                                                          "owned_by": "ragzoo-stub"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        stub = self.server.stub
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?")[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
            messages = body["messages"]
        except (json.JSONDecodeError, KeyError, TypeError):
            self._json(400, {"error": {"message": "body must be JSON with 'messages'", "type": "invalid_request_error"}})
            return
        if body.get("stream"):
            self._json(400, {"error": {"message": "the stub server does not stream", "type": "invalid_request_error"}})
            return
        index, fault = stub._next(body)
        if stub.latency:
            stub._wait(stub.latency)
        if fault is not None and fault.kind == "reset":
            self._reset()
            return
        if fault is not None and fault.kind == "timeout":
            stub._wait(fault.seconds)
        if fault is not None and fault.kind == "http":
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            kind = "rate_limit_error" if fault.status == 429 else "server_error"
            self._json(fault.status, {"error": {"message": f"stub fault {fault.status}", "type": kind}}, headers)
            return
        if fault is not None and fault.kind == "garbage":
            text = GARBAGE
        elif fault is not None and fault.kind == "empty":
            text = ""
        else:
            text = stub.answer(messages, body)
        prompt_tokens = sum(approx_tokens(_content(m)) for m in messages)
        completion_tokens = approx_tokens(text) if text else 0
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", stub.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        if fault is not None and fault.kind == "truncated":
            data = json.dumps(payload).encode()
            self._send(200, data[: len(data) // 2], {})
            return
        self._json(200, payload)

    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers or {})

    def _send(self, status: int, data: bytes, headers: dict) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (e.g. its read timeout): nothing to answer
            self.close_connection = True

    def _reset(self) -> None:
        # SO_LINGER 0 makes close() send a TCP RST: the client sees "connection reset by peer".
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    stub: "StubLMServer"

    def handle_error(self, request, client_address) -> None:
        pass  # a reset or a client that hung up is expected here, not a server bug


class StubLMServer:
    """A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions API (see module docstring)."""

    def __init__(self, responder: Responder | str | None = None, *, latency: float = 0.0, faults: Faults = None,
                 model: str = "stub-model", host: str = "127.0.0.1", port: int = 0):
        self.responder = responder if responder is not None else adapter_responder
        self.latency = float(latency)
        self.model = model
        self.host = host
        self.port = port
        self.requests = 0
        self.models_requests = 0
        self.faults_served = 0
        self.log: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.set_faults(faults)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> "StubLMServer":
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self.port), _Handler)
        self._server.stub = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"stub-lm-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes replies held back by latency or a timeout fault
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

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

    def answer(self, messages: list[dict], body: dict) -> str:
        if isinstance(self.responder, str):
            return self.responder
        return self.responder(messages, body)

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = self.models_requests = self.faults_served = 0
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

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)
