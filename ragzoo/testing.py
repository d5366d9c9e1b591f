"""Offline stand-ins for tests, notebooks and benchmarks: a scripted LM that answers per predictor, a static
retriever (both go through the real DSPy and ragzoo code paths), and a loopback HTTP server for hand-written
`http.server` handlers (fake upstreams that misbehave at the protocol level)."""

from __future__ import annotations

import json
import sys
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterable

import dspy


from ragzoo.engines import CallContext, FunctionEngine
from ragzoo.retrieval.base import BaseRetriever, Passage
from ragzoo.usage import TrackedLM

Script = "dict[str, Any] | str | list | Callable[[CallContext], Any]"


class ScriptedLM(TrackedLM):
    """A `dspy.LM` whose answers are scripted per predictor name.

    `responses` maps a predictor's name in the program (as `named_predictors()` gives it, without the
    trailing `.predict` of chain-of-thought modules; the signature's class name for a bare predictor) to:
    a dict of output values (used for every call), a list of them (consumed in order, the last repeats),
    a raw completion string (to test parse failures), or a function of the `CallContext`.
    `default` answers predictors that are not listed; without it an unlisted predictor is an error.
    Every call is kept in `.calls` (predictor name, signature, parsed inputs, prompt).
    """

    def __init__(self, responses: dict[str, Any] | None = None, default: Any = None):
        self.responses = dict(responses or {})
        self.default = default
        self._positions: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        super().__init__("scripted/ragzoo", engine=FunctionEngine(self._respond), cache=False, num_retries=0)

    @property
    def calls(self) -> list[CallContext]:
        return self._engine_spec.calls if hasattr(self, "_engine_spec") else self.engine.calls

    @property
    def call_names(self) -> list[str]:
        return [call.predictor_name for call in self.calls]

    def calls_to(self, name: str) -> list[CallContext]:
        return [call for call in self.calls if call.predictor_name == name]

    def _respond(self, context: CallContext):
        script = self.responses.get(context.predictor_name, self.default)
        if script is None:
            raise AssertionError(f"ScriptedLM has no answer for predictor {context.predictor_name!r}; "
                                 f"scripted: {sorted(self.responses)}")
        if isinstance(script, list):
            with self._lock:
                position = self._positions[context.predictor_name]
                self._positions[context.predictor_name] += 1
            script = script[min(position, len(script) - 1)]
        if callable(script):
            script = script(context)
        return script


class StaticRetriever(BaseRetriever):
    """Retrieval from a fixed list of passages: a query gets the passages whose text shares the most words
    with it (ties by list order), or exactly what `by_query` maps it to. Records every query."""

    spec = "static"

    def __init__(self, passages: Iterable[Passage], by_query: dict[str, list[Passage]] | None = None):
        self.passages = list(passages)
        self.by_query = dict(by_query or {})
        self.queries: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def _search(self, query: str, k: int) -> list[Passage]:
        with self._lock:
            self.queries.append((query, k))
        if query in self.by_query:
            return list(self.by_query[query][:k])
        words = set(query.lower().split())
        ranked = sorted(enumerate(self.passages),
                        key=lambda item: (-len(words & set(item[1].long_text.lower().split())), item[0]))
        return [passage for _, passage in ranked[:k]]


class AnswerQuestion(dspy.Module):
    """The smallest program, one `question -> answer` predictor: for tests of the evaluation loop, not of a method."""

    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        return self.answer(question=question)


def make_examples(n: int) -> list[dspy.Example]:
    """n examples, ids and questions `q0`.. with gold answers `Q0`.., the question marked as the input."""
    return [dspy.Example(id=f"q{i}", question=f"q{i}", answer=f"Q{i}").with_inputs("question") for i in range(n)]


def make_passages(n: int, prefix: str = "Doc") -> list[Passage]:
    """n distinct passages `Doc 0 | text of doc 0`, ... for tests."""
    return [Passage(pid=str(i), title=f"{prefix} {i}", text=f"text of {prefix.lower()} {i}", score=float(n - i))
            for i in range(n)]


class LoopbackHTTPServer:
    """`handler` (a `http.server.BaseHTTPRequestHandler` class) served on 127.0.0.1, on a free port, by a
    daemon thread while the context is open; `base_url` is `http://127.0.0.1:PORT` (no trailing slash)."""

    def __init__(self, handler: type):
        import socket
        from http.server import ThreadingHTTPServer

        class Server(ThreadingHTTPServer):
            def get_request(self):
                # a handler writes its head and its body apart; on a kept-alive connection Nagle's algorithm then
                # holds the body for the client's delayed ack (40 ms a request: 1 s of a 28-file fetch)
                connection, address = super().get_request()
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return connection, address

            def handle_error(self, request, client_address):
                # a client that drops its connection (a download refused mid-way, a kept-alive connection closed)
                # is the client's business: socketserver printed its traceback on stderr, into the output a test
                # reads (a one-line refusal read as 20 lines, once in CI); any other error is still printed
                if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    return
                super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        # serve_forever's default poll (0.5 s) is how long `shutdown` waits: half a second at the end of each test
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet base for `LoopbackHTTPServer` handlers that answer JSON: `reply(status, payload)`."""

    def log_message(self, *args):
        pass

    def reply(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
