"""A ColBERTv2-compatible REST server over any ragzoo retriever (FastAPI app, served by uvicorn).

`GET <path>?query=...&k=...` and `POST <path>` with JSON `{"query", "k"}` answer
`{"query": ..., "topk": [{"text": "Title | text", "pid", "rank", "score", "prob"}]}`, `prob` being the
softmax of the returned scores, as the original server reports it. Bad requests get a 4xx status and a
JSON body `{"error": true, "message": ...}` (the shape DSPy's client checks for). `/health` says what is
served (the backend and file name, never a path or an upstream URL). Binding to loopback is the default of
`ragzoo serve`.

Bounds, one rule for GET and POST:
- `k`: an integer in 1..max_k (JSON integer, or the digits of one in a query string); 2.5, "2.5", 2.0, true
  and 1e400 are all 400.
- the query: at most `max_query_chars` characters (default `MAX_QUERY_CHARS` = 16,000, `ragzoo serve
  --max-query-chars N`). Programs send long queries on purpose: BlendFilter retrieves with the question
  blended with a generated passage or a whole chain-of-thought answer (a few thousand characters with
  verbose models). A longer query is answered all the same when the backend would cut it anyway (colbert:
  its query token budget; dense: its encoder's max_seq_length; see `truncate_query`): it is cut to what the
  backend reads. Otherwise (bm25 reads every term) it is refused with 413 and a body that names the limit
  and the query length (`max_query_chars`, `query_chars`), which ragzoo's client turns into a clear error.
- the POST body: at most `max_body_bytes(max_query_chars)`; the GET request line and headers likewise
  (uvicorn's h11 limit is raised to fit a query at the limit, percent-encoded).
- time: a request's head must arrive within `HEADER_TIMEOUT` seconds of the connection (or of the previous
  answer) and its body within `BODY_TIMEOUT` more; an idle keep-alive connection is closed after
  `KEEP_ALIVE_TIMEOUT`. A slow or stalled client is disconnected, it does not hold a socket forever.
- load: at most `max_pending` searches answered or waiting at once (`ragzoo serve --max-pending`); one more
  is answered at once with 503 and `Retry-After`, so latency stays bounded under overload.
- framing (this server's and `ragzoo.serving`'s, see `_bounded_protocol`): a request with both Content-Length and
  Transfer-Encoding, or any other framing error, is a JSON 400 and the connection closes, so nothing sent behind
  it (a smuggled request) is answered. A query that is not valid text (a lone surrogate, query-string bytes that
  are not UTF-8) is a 400 naming 'query'.

Errors are always `{"error": true, "message": ...}` JSON with a 4xx (5xx only for a failing backend, an
unready server or overload), and at most one log line each, never a traceback. `/health` answers 503
`{"status": "warming"}` until the index is loaded and a first search has run (numba compiles its scorer
then), and 200 `{"status": "ok", ...}` after.

The request path is a plain ASGI app (no framework routing or validation per request): the search runs on
a worker thread that micro-batches the searches waiting (see `_Batcher`), so the event loop keeps accepting,
refusing and timing out connections while the CPU-bound scorer works.
"""



import asyncio
import json
import logging
import math
import queue
import re
import threading
from types import SimpleNamespace
from typing import Any, Sequence
from urllib.parse import parse_qsl

from ragzoo.errors import RagzooError
from ragzoo.retrieval.base import MAX_K, Passage, Retriever
from ragzoo.secrets import redact

DEFAULT_K = 10
MAX_QUERY_CHARS = 16_000
DEFAULT_MAX_PENDING = 256  # searches answered or waiting; at ~1 ms each, a full queue is ~0.1-0.3 s of work
DEFAULT_WORKERS = 1  # the scorers hold the GIL most of the time: more threads only contend
DEFAULT_MAX_BATCH = 32
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
KEEP_ALIVE_TIMEOUT = 5.0

log = logging.getLogger("ragzoo.serve")

try:  # orjson is ~5x faster than json for the topk answers; fall back when it is not installed
    import orjson

    def _dumps(data: Any) -> bytes:
        return orjson.dumps(data)
except ImportError:  # pragma: no cover
    def _dumps(data: Any) -> bytes:
        return json.dumps(data, ensure_ascii=False).encode("utf-8")
_INTEGER = re.compile(r"\s*[+-]?\d{1,9}\s*")


def max_body_bytes(max_query_chars: int) -> int:
    """Request size that fits a query of `max_query_chars` characters in any encoding (a code point is at
    most 4 UTF-8 bytes; JSON's \\uXXXX escapes take 12 for a surrogate pair, percent-encoding 12 too)."""
    return 12 * max_query_chars + 64 * 1024


def parse_k(value: Any, max_k: int = MAX_K) -> int | None:
    """`k` as an int in 1..max_k, or None when it is anything else. The same rule for a query-string value
    (text) and a JSON value: integers only, so 2.5 is refused whichever way it arrives."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        k = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value):
        k = int(value)
    else:
        return None
    return k if 1 <= k <= max_k else None


def public_spec(retriever: Retriever) -> str:
    """What `/health` may say about the retriever: its backend and file name, no folder, no URL."""
    spec = str(getattr(retriever, "spec", "") or type(retriever).__name__)
    scheme, sep, rest = spec.partition(":")
    if not sep:
        return spec
    if scheme.lower() == "colbertv2" or "://" in rest:  # as the spec parser reads it: the scheme in any case
        return scheme.lower()  # the upstream URL may carry a host, a path or a key that is nobody's business
    target, qsep, options = rest.partition("?")
    name = target.rstrip("/").rsplit("/", 1)[-1]
    return redact(f"{scheme}:{name}{qsep}{options}")


def softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    weights = [math.exp(score - top) for score in scores]
    total = sum(weights)
    return [weight / total for weight in weights]


def topk_payload(query: str, passages: list[Passage]) -> dict[str, Any]:
    probs = softmax([p.score for p in passages])
    return {"query": query,
            "topk": [{"text": p.long_text, "pid": p.pid, "rank": rank, "score": p.score, "prob": prob}
                     for rank, (p, prob) in enumerate(zip(passages, probs), start=1)]}


class _Stopped(Exception):
    """A search still waiting when a stop could wait no longer (`RetrievalApp.cut`): answered 503."""


class _Batcher:
    """Searches on worker threads, micro-batched: a worker takes every search waiting (up to `max_batch`),
    groups them by k and answers each group with one `retriever.batch` call (bm25s scores a batch for less
    per query than one at a time, and the event loop hands over work once per batch). A query's answer is the
    one `retriever(query, k)` gives: same backend path, same k. A failing batch is retried one query at a
    time so only the bad query fails."""

    def __init__(self, retriever: Retriever, max_batch: int = DEFAULT_MAX_BATCH, threads: int = DEFAULT_WORKERS):
        self.retriever, self.max_batch = retriever, max_batch
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.batches = 0
        self.threads = [threading.Thread(target=self._work, name="ragzoo-search", daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def put(self, item) -> None:
        self.queue.put(item)

    def close(self) -> None:
        for _ in self.threads:
            self.queue.put(None)

    @staticmethod
    def _settle(future, result=None, error: BaseException | None = None) -> None:
        def settle():
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        try:
            future.get_loop().call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            items = [item]
            while len(items) < self.max_batch:
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)
                    break
                items.append(more)
            groups: dict[int, list] = {}
            for entry in items:
                groups.setdefault(entry[1], []).append(entry)
            for k, group in groups.items():
                self.batches += 1
                try:
                    results = self.retriever.batch([query for query, _, _ in group], k) if len(group) > 1 \
                        else [self.retriever(group[0][0], k)]
                except Exception:
                    for query, _, future in group:  # find the bad one; the others still get answers
                        try:
                            self._settle(future, self.retriever(query, k))
                        except Exception as exc:
                            self._settle(future, error=exc)
                    continue
                for (_, _, future), passages in zip(group, results):
                    self._settle(future, passages)


class RetrievalApp:
    """The ColBERTv2-compatible API as a plain ASGI application (see the module docstring)."""

    def __init__(self, retriever: Retriever, path: str = "/", extra_paths: Sequence[str] = ("/api/search",),
                 max_query_chars: int = MAX_QUERY_CHARS, max_k: int = MAX_K, max_pending: int = DEFAULT_MAX_PENDING,
                 workers: int = DEFAULT_WORKERS, warm: str = "now", retry_after: int = 1,
                 max_batch: int = DEFAULT_MAX_BATCH):
        if isinstance(max_query_chars, bool) or not isinstance(max_query_chars, int) or max_query_chars < 1:
            raise ValueError(f"max_query_chars must be a positive integer, got {max_query_chars!r}")
        if max_pending < 1 or workers < 1:
            raise ValueError("max_pending and workers must be at least 1")
        if warm not in ("now", "background", "off"):
            raise ValueError("warm must be 'now', 'background' or 'off'")
        self.retriever = retriever
        self.routes = frozenset([path, *extra_paths])
        self.max_query_chars, self.max_k, self.max_pending = max_query_chars, max_k, max_pending
        self.body_limit = max_body_bytes(max_query_chars)
        self.truncate = getattr(retriever, "truncate_query", None)
        self.retry_after = str(retry_after)
        self.batcher = _Batcher(retriever, max_batch=max_batch, threads=workers)
        self.pending = 0
        self.served = 0
        self.rejected = 0
        self._waiting: set[asyncio.Future] = set()  # the searches in flight (`cut`)
        self.state = SimpleNamespace(retriever=retriever, max_query_chars=max_query_chars)
        self.ready = threading.Event()
        self._warm_mode = warm
        self._warming: threading.Thread | None = None
        if warm == "now":
            self.warm_up()
        elif warm == "off":
            self.ready.set()
        self._info = {"retriever": public_spec(retriever), "max_k": max_k, "max_query_chars": max_query_chars}
        try:
            self._info["num_docs"] = len(retriever)  # type: ignore[arg-type]
        except TypeError:
            pass

    def cut(self) -> None:
        """On the event loop, when a stop can wait no longer (`run_app`'s on_hurry): every search still waiting is
        answered 503 at once, instead of its connection being cut (a traceback in the log, a bare 500 sent)."""
        for future in list(self._waiting):
            if not future.done():
                future.set_exception(_Stopped())

    # -- readiness ------------------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Let the backend warm up (`retriever.warm_up()`: bm25 runs a few searches, so numba compiles its
        scorer and the memory-mapped index pages come in; dense loads its encoder), then say ready."""
        try:
            warm = getattr(self.retriever, "warm_up", None)
            if warm is not None:
                warm()
        except Exception as exc:  # a backend that cannot answer these still gets served; say it once
            log.warning("warm-up search failed: %s: %s", type(exc).__name__, exc)
        self.ready.set()

    def start_warming(self) -> None:
        if self._warm_mode == "background" and self._warming is None and not self.ready.is_set():
            self._warming = threading.Thread(target=self.warm_up, name="ragzoo-warm-up", daemon=True)
            self._warming.start()

    # -- answers --------------------------------------------------------------------------------------
    @staticmethod
    async def _send(send, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        body = _dumps(payload)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": body})

    async def _error(self, send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = (),
                     **extra: Any) -> None:
        log.info("%d %s", status, message)  # one line, never a traceback
        await self._send(send, status, {"error": True, "message": message, **extra}, headers)

    def fit_query(self, query: str) -> str | None:
        """The query the backend will read, or None if it is over the limit and the backend reads it all."""
        if len(query) <= self.max_query_chars:
            return query
        if self.truncate is not None:
            try:
                cut = self.truncate(query)
            except Exception:  # a tokenizer hiccup must not turn a query into a 500
                cut = None
            if cut is not None and 0 < len(cut) <= self.max_query_chars:
                return cut
        return None

    def check(self, query: Any, k: Any) -> tuple[int, str, dict] | tuple[None, str, int]:
        """(None, query to search, k) or (status, message, extra) for a refused request."""
        if not isinstance(query, str) or not query.strip():
            return 400, "the 'query' parameter is required and must be non-empty", {}
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:  # a JSON \ud800 escape, or query-string bytes that are not UTF-8
            return 400, ("the 'query' parameter is not valid text: it holds a lone surrogate or bytes that are "
                         "not UTF-8"), {}
        searched = self.fit_query(query)
        if searched is None:
            return 413, (f"the query is {len(query):,} characters long; this server's limit is "
                         f"{self.max_query_chars:,} (ragzoo serve --max-query-chars)"), \
                {"max_query_chars": self.max_query_chars, "query_chars": len(query)}
        checked_k = parse_k(k, self.max_k)
        if checked_k is None:
            return 400, f"'k' must be an integer in 1..{self.max_k}", {}
        return None, searched, checked_k

    async def _answer(self, send, query: Any, k: Any) -> None:
        status, searched, extra = self.check(query, k)
        if status is not None:
            await self._error(send, status, searched, **extra)
            return
        if not self.ready.is_set():
            await self._error(send, 503, "the index is still loading or warming up; retry shortly",
                              [(b"retry-after", self.retry_after.encode())])
            return
        if self.pending >= self.max_pending:
            self.rejected += 1
            await self._error(send, 503, f"the server is at capacity ({self.max_pending} searches pending); "
                                         f"retry shortly", [(b"retry-after", self.retry_after.encode())])
            return
        self.pending += 1
        future = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        try:
            self.batcher.put((searched, extra, future))
            passages = await future
        except _Stopped:
            await self._error(send, 503, "the server is stopping; retry on another or later",
                              [(b"retry-after", self.retry_after.encode())])
            return
        except asyncio.CancelledError:  # the connection was cut (the stop's last step): one line, no traceback
            log.info("a search in flight was cut by the server's stop")
            return
        except RagzooError as exc:  # redacted: an upstream's error may quote the credentials it was sent
            await self._error(send, 500, f"retriever failed: {redact(str(exc))}")
            return
        except Exception as exc:
            await self._error(send, 500, f"retriever failed: {type(exc).__name__}")
            return
        finally:
            self._waiting.discard(future)
            self.pending -= 1
        payload = topk_payload(query, passages)
        self.served += 1
        await self._send(send, 200, payload)

    async def _read_body(self, scope, receive) -> bytes | None | bool:
        """The body, None when over the limit, False when the client went away."""
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                if value.isdigit() and int(value) > self.body_limit:
                    return None
                break
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.body_limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start_warming()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.batcher.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        self.start_warming()
        try:
            await self._route(scope, receive, send)
        except Exception as exc:  # a bug of ours: one line and a JSON 500, never a traceback
            log.warning("internal error on %s %s: %s: %s", scope.get("method"), scope.get("path"),
                        type(exc).__name__, exc)
            try:
                await self._send(send, 500, {"error": True, "message": f"internal error: {type(exc).__name__}"})
            except Exception:
                pass

    async def _route(self, scope, receive, send) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/health":
            if method not in ("GET", "HEAD"):
                await self._error(send, 405, "use GET /health")
            elif self.ready.is_set():
                await self._send(send, 200, {"status": "ok", **self._info, "pending": self.pending})
            else:
                await self._send(send, 503, {"status": "warming", **self._info},
                                 [(b"retry-after", self.retry_after.encode())])
            return
        if path not in self.routes:
            await self._error(send, 404, f"no such route; search with GET/POST {min(self.routes)}")
            return
        if method == "GET":
            try:  # bytes that are not UTF-8 stay as surrogates (not U+FFFD), so `check` refuses them by name
                params = dict(parse_qsl(scope.get("query_string", b"").decode("utf-8"), keep_blank_values=True,
                                        strict_parsing=False, max_num_fields=64, errors="surrogateescape"))
            except (UnicodeDecodeError, ValueError):
                await self._error(send, 400, "the query string must be UTF-8 with at most 64 parameters")
                return
            await self._answer(send, params.get("query"), params.get("k", str(DEFAULT_K)))
            return
        if method != "POST":
            await self._error(send, 405, "use GET ?query=&k= or POST JSON {\"query\", \"k\"}")
            return
        raw = await self._read_body(scope, receive)
        if raw is False:  # the client went away mid-body: nobody to answer, one line
            if not scope.get("ragzoo.timed_out"):
                log.info("client disconnected before sending the whole body")
            return
        if raw is None:
            await self._error(send, 413, f"the request body is over {self.body_limit:,} bytes",
                              max_query_chars=self.max_query_chars)
            return
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            await self._error(send, 400, "the request body must be JSON: {\"query\": ..., \"k\": ...}")
            return
        if not isinstance(body, dict):
            await self._error(send, 400, "the request body must be a JSON object: {\"query\": ..., \"k\": ...}")
            return
        await self._answer(send, body.get("query"), body.get("k", DEFAULT_K))


def create_app(retriever: Retriever, path: str = "/", extra_paths: Sequence[str] = ("/api/search",),
               max_query_chars: int = MAX_QUERY_CHARS, max_k: int = MAX_K, max_pending: int = DEFAULT_MAX_PENDING,
               workers: int = DEFAULT_WORKERS, warm: str = "now", max_batch: int = DEFAULT_MAX_BATCH) -> RetrievalApp:
    """The ASGI app. warm="now" warms up before returning (tests), "background" after the server is up
    (`/health` says 503 "warming" meanwhile), "off" never."""
    return RetrievalApp(retriever, path=path, extra_paths=extra_paths, max_query_chars=max_query_chars, max_k=max_k,
                        max_pending=max_pending, workers=workers, warm=warm, max_batch=max_batch)


# -- the HTTP server: uvicorn with time limits on slow clients ----------------------------------------------
def _bounded_protocol(header_timeout: float, body_timeout: float):
    """uvicorn's h11 protocol with a deadline for each request's head and body (uvicorn has only the idle
    keep-alive timeout): a client that opens a socket and sends nothing, or trickles a header or a body, is
    disconnected when its deadline passes."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        _deadline = None
        _phase = None
        _framing_error = ""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            read = self.conn.next_event

            def next_event():
                """h11's next event, refusing a request whose body length is ambiguous: h11 lets
                Transfer-Encoding win over Content-Length, a front proxy may not, and the bytes one reads as a
                body the other reads as a request smuggled behind it (RFC 9112 6.1, 6.3)."""
                try:
                    event = read()
                except h11.RemoteProtocolError as exc:
                    self._framing_error = str(exc)
                    raise
                if isinstance(event, h11.Request):
                    names = [name.lower() for name, _ in event.headers]
                    if b"transfer-encoding" in names and b"content-length" in names:
                        self._framing_error = "both Content-Length and Transfer-Encoding"
                        raise h11.RemoteProtocolError(self._framing_error)
                return event

            self.conn.next_event = next_event

        def send_400_response(self, msg: str) -> None:
            """A framing error: one JSON error, then the connection is closed, so nothing read after the bad
            frame (a smuggled request) is ever answered (RFC 9112 6.3)."""
            reason = self._framing_error or msg  # uvicorn has logged its one line already
            body = _dumps({"error": True, "message": f"malformed HTTP request ({reason}); the connection is "
                                                     f"closed"})
            try:
                for event in (h11.Response(status_code=400, reason=b"Bad Request",
                                           headers=[(b"content-type", b"application/json"),
                                                    (b"content-length", str(len(body)).encode()),
                                                    (b"connection", b"close")]),
                              h11.Data(data=body), h11.EndOfMessage()):
                    self.transport.write(self.conn.send(event))
            except h11.LocalProtocolError:  # an answer was already under way: just close
                pass
            self.transport.close()

        def _arm(self, phase: str, seconds: float) -> None:
            self._disarm()
            self._phase = phase
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline, self._phase = None, None

        def _too_slow(self) -> None:
            self._deadline = None
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                return  # the request is in; the server is answering: not the client's fault
            if cycle is not None and not cycle.response_complete:
                cycle.scope["ragzoo.timed_out"] = True  # the app then says nothing more: one line per event
            log.info("closing a connection whose request %s did not arrive within its time limit", self._phase)
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm("head", header_timeout)

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if self._deadline is None and (cycle is None or cycle.response_complete):
                self._arm("head", header_timeout)  # the next request of a kept-alive connection starts
            super().data_received(data)
            self._follow()

        def _follow(self) -> None:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                return
            if cycle.more_body:
                if self._phase != "body":
                    self._arm("body", body_timeout)
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedH11Protocol


def uvicorn_config(app, host: str = "127.0.0.1", port: int = 8893, log_level: str = "warning",
                   header_timeout: float = HEADER_TIMEOUT, body_timeout: float = BODY_TIMEOUT,
                   keep_alive_timeout: float = KEEP_ALIVE_TIMEOUT, max_head_bytes: int | None = None):
    import uvicorn

    max_query_chars = getattr(getattr(app, "state", None), "max_query_chars", MAX_QUERY_CHARS)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, lifespan="auto",
                          http=_bounded_protocol(header_timeout, body_timeout), timeout_keep_alive=keep_alive_timeout,
                          h11_max_incomplete_event_size=max_head_bytes or max_body_bytes(max_query_chars))


def run_app(app, host: str = "127.0.0.1", port: int = 8893, log_level: str = "warning", grace: float | None = None,
            on_hurry=None, **limits) -> None:
    """Serve `app` in this (the main) thread until SIGTERM or Ctrl-C, then stop as uvicorn does: no new connection,
    the answers in flight finish, for at most `grace` seconds (None: however long they take) or until a second
    signal of either kind. Then `on_hurry()`, run on the event loop, answers what is still in flight at once (a
    program server: 503), or, without it, uvicorn cuts the connections. SIGTERM then returns and Ctrl-C raises
    KeyboardInterrupt, as in any interrupted command. (uvicorn alone re-raises the signal it caught once it has
    stopped: SIGTERM's default action then kills the process, status 143, after its clean shutdown.)"""
    import signal

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = _stopping_server(uvicorn_config(app, host=host, port=port, log_level=log_level, **limits), grace,
                              on_hurry)
    if threading.current_thread() is not threading.main_thread():  # no signals here: the caller stops it
        server.run()
        return

    def stopping(signum, frame):  # a signal before uvicorn's handlers are on or after it put them back
        server.handle_exit(signum, frame)

    previous = {signum: signal.signal(signum, stopping) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if server.stop_signal == signal.SIGINT:
        raise KeyboardInterrupt


HURRIED_GRACE = 5.0  # seconds the connections have to close once the answers in flight were cut (`on_hurry`)


def _stopping_server(config, grace: float | None, on_hurry, coalesce: float = 0.0):
    """A uvicorn.Server that notes the first signal it got (`stop_signal`), re-raises none, and stops waiting for
    the answers in flight after `grace` seconds or a second signal of either kind (see `run_app`). A signal within
    `coalesce` seconds of the first is the same stop (a `--workers` process gets a terminal's signal and its
    parent's SIGTERM a moment apart), not a second one."""
    import time

    import uvicorn

    class StoppingServer(uvicorn.Server):
        stop_signal = None
        stopped_at = 0.0
        hurried = False

        def handle_exit(self, sig, frame):  # a signal handler: sets flags, nothing more
            if self.stop_signal is None:
                self.stop_signal, self.stopped_at = sig, time.monotonic()
            elif self.should_exit and time.monotonic() - self.stopped_at >= coalesce:
                self.hurried = True
            self.should_exit = True

        async def shutdown(self, sockets=None):
            watch = asyncio.ensure_future(self._hurry())
            try:
                await super().shutdown(sockets=sockets)
            finally:
                watch.cancel()

        async def _hurry(self):
            ends = None if grace is None else time.monotonic() + grace
            while not self.hurried and (ends is None or time.monotonic() < ends):
                await asyncio.sleep(0.1)
            if on_hurry is not None:
                on_hurry()
                ends = time.monotonic() + HURRIED_GRACE
                while time.monotonic() < ends:
                    await asyncio.sleep(0.1)
            self.force_exit = True

    return StoppingServer(config)


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8893, path: str = "/",
          log_level: str = "warning", max_query_chars: int = MAX_QUERY_CHARS,
          max_pending: int = DEFAULT_MAX_PENDING, grace: float | None = None) -> None:
    """Bind first, then warm up (`/health` says "warming" until the first searches ran). Stops as `run_app`: the
    searches still waiting once the grace is over are answered 503 (`RetrievalApp.cut`)."""
    app = create_app(retriever, path=path, max_query_chars=max_query_chars, max_pending=max_pending,
                     warm="background")
    run_app(app, host=host, port=port, log_level=log_level, grace=grace, on_hurry=app.cut)


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on a free loopback port (tests, benchmarks, notebooks).

        with BackgroundServer(create_app(retriever)) as server:
            dspy.ColBERTv2(url=server.url)("query", k=3)
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning", **limits):
        import uvicorn

        self.config = uvicorn_config(app, host=host, port=port, log_level=log_level, **limits)
        self.server = uvicorn.Server(self.config)
        self.thread = None
        self.url = ""

    def __enter__(self) -> "BackgroundServer":
        import threading
        import time

        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the background server did not start")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        if self.thread:
            self.thread.join(timeout=10)
