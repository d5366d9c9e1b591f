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
"""



import json
import math
import re
from typing import Any, Sequence

from ragzoo.errors import RagzooError
from ragzoo.retrieval.base import MAX_K, Passage, Retriever

DEFAULT_K = 10
MAX_QUERY_CHARS = 16_000
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
    if scheme == "colbertv2":
        return "colbertv2"  # the upstream URL may carry a host, a path or a key that is nobody's business
    target, qsep, options = rest.partition("?")
    name = target.rstrip("/").rsplit("/", 1)[-1]
    return f"{scheme}:{name}{qsep}{options}"


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


def create_app(retriever: Retriever, path: str = "/", extra_paths: Sequence[str] = ("/api/search",),
               max_query_chars: int = MAX_QUERY_CHARS, max_k: int = MAX_K):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    if isinstance(max_query_chars, bool) or not isinstance(max_query_chars, int) or max_query_chars < 1:
        raise ValueError(f"max_query_chars must be a positive integer, got {max_query_chars!r}")
    body_limit = max_body_bytes(max_query_chars)
    truncate = getattr(retriever, "truncate_query", None)
    app = FastAPI(title="ragzoo ColBERTv2-compatible retrieval API", docs_url=None, redoc_url=None)
    app.state.retriever = retriever
    app.state.max_query_chars = max_query_chars

    def error(status: int, message: str, **extra: Any) -> JSONResponse:
        return JSONResponse({"error": True, "message": message, **extra}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc):  # FastAPI's own validation errors, in our error shape
        return error(422, "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors()))

    def fit_query(query: str) -> str | None:
        """The query the backend will read, or None if it is over the limit and the backend reads it all."""
        if len(query) <= max_query_chars:
            return query
        if truncate is not None:
            try:
                cut = truncate(query)
            except Exception:  # a tokenizer hiccup must not turn a query into a 500
                cut = None
            if cut is not None and 0 < len(cut) <= max_query_chars:
                return cut
        return None

    def answer(query: Any, k: Any) -> JSONResponse:
        if not isinstance(query, str) or not query.strip():
            return error(400, "the 'query' parameter is required and must be non-empty")
        searched = fit_query(query)
        if searched is None:
            return error(413, f"the query is {len(query):,} characters long; this server's limit is "
                              f"{max_query_chars:,} (ragzoo serve --max-query-chars)",
                         max_query_chars=max_query_chars, query_chars=len(query))
        checked_k = parse_k(k, max_k)
        if checked_k is None:
            return error(400, f"'k' must be an integer in 1..{max_k}")
        try:
            passages = retriever(searched, checked_k)
        except RagzooError as exc:
            return error(500, f"retriever failed: {exc}")
        return JSONResponse(topk_payload(query, passages))

    def search_get(query: str | None = None, k: str = str(DEFAULT_K)):
        return answer(query, k)

    async def read_body(request: Request) -> bytes | None:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > body_limit:
            return None
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > body_limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def search_post(request: Request):
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import ClientDisconnect

        try:
            raw = await read_body(request)
        except ClientDisconnect:  # the client went away mid-body: nobody to answer, nothing to log
            return error(400, "the client disconnected before sending the whole body")
        if raw is None:
            return error(413, f"the request body is over {body_limit:,} bytes", max_query_chars=max_query_chars)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            return error(400, "the request body must be JSON: {\"query\": ..., \"k\": ...}")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object: {\"query\": ..., \"k\": ...}")
        # the retriever is CPU-bound and synchronous: run it off the event loop
        return await run_in_threadpool(answer, body.get("query"), body.get("k", DEFAULT_K))

    for route in dict.fromkeys([path, *extra_paths]):
        app.add_api_route(route, search_get, methods=["GET"])
        app.add_api_route(route, search_post, methods=["POST"])

    @app.get("/health")
    def health():
        info: dict[str, Any] = {"status": "ok", "retriever": public_spec(retriever), "max_k": max_k,
                                "max_query_chars": max_query_chars}
        try:
            info["num_docs"] = len(retriever)  # type: ignore[arg-type]
        except TypeError:
            pass
        return info

    return app


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8893, path: str = "/",
          log_level: str = "warning", max_query_chars: int = MAX_QUERY_CHARS) -> None:
    import uvicorn

    uvicorn.run(create_app(retriever, path=path, max_query_chars=max_query_chars), host=host, port=port,
                log_level=log_level, h11_max_incomplete_event_size=max_body_bytes(max_query_chars))


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on a free loopback port (tests, benchmarks, notebooks).

        with BackgroundServer(create_app(retriever)) as server:
            dspy.ColBERTv2(url=server.url)("query", k=3)
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        max_query_chars = getattr(getattr(app, "state", None), "max_query_chars", MAX_QUERY_CHARS)
        self.config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                     h11_max_incomplete_event_size=max_body_bytes(max_query_chars))
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
