"""A ColBERTv2-compatible REST server over any ragzoo retriever (FastAPI app, served by uvicorn).

`GET <path>?query=...&k=...` and `POST <path>` with JSON `{"query", "k"}` answer
`{"query": ..., "topk": [{"text": "Title | text", "pid", "rank", "score", "prob"}]}`, `prob` being the
softmax of the returned scores, as the original server reports it. Bad requests get an HTTP status and a
JSON body `{"error": true, "message": ...}` (the shape DSPy's client checks for). `/health` says what is
served. Binding to loopback is the default of `ragzoo serve`.
"""



import math
from typing import Any, Sequence

from ragzoo.errors import RagzooError
from ragzoo.retrieval.base import MAX_K, Passage, Retriever

DEFAULT_K = 10
MAX_QUERY_CHARS = 2000


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

    app = FastAPI(title="ragzoo ColBERTv2-compatible retrieval API", docs_url=None, redoc_url=None)
    app.state.retriever = retriever

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": True, "message": message}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc):  # FastAPI's own validation errors, in our error shape
        return error(422, "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors()))

    def answer(query: Any, k: Any) -> JSONResponse:
        if not isinstance(query, str) or not query.strip():
            return error(400, "the 'query' parameter is required and must be non-empty")
        if len(query) > max_query_chars:
            return error(413, f"the query is {len(query)} characters long; the limit is {max_query_chars}")
        try:
            k = int(k) if not isinstance(k, bool) else None
        except (TypeError, ValueError):
            k = None
        if k is None or not 1 <= k <= max_k:
            return error(400, f"'k' must be an integer in 1..{max_k}")
        try:
            passages = retriever(query, k)
        except RagzooError as exc:
            return error(500, f"retriever failed: {exc}")
        return JSONResponse(topk_payload(query, passages))

    def search_get(query: str | None = None, k: str = str(DEFAULT_K)):
        return answer(query, k)

    async def search_post(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body must be JSON: {\"query\": ..., \"k\": ...}")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object: {\"query\": ..., \"k\": ...}")
        # the retriever is CPU-bound and synchronous: run it off the event loop
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(answer, body.get("query"), body.get("k", DEFAULT_K))

    for route in dict.fromkeys([path, *extra_paths]):
        app.add_api_route(route, search_get, methods=["GET"])
        app.add_api_route(route, search_post, methods=["POST"])

    @app.get("/health")
    def health():
        info: dict[str, Any] = {"status": "ok", "retriever": getattr(retriever, "spec", type(retriever).__name__),
                                "max_k": max_k}
        try:
            info["num_docs"] = len(retriever)  # type: ignore[arg-type]
        except TypeError:
            pass
        return info

    return app


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8893, path: str = "/",
          log_level: str = "warning") -> None:
    import uvicorn

    uvicorn.run(create_app(retriever, path=path), host=host, port=port, log_level=log_level)


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on a free loopback port (tests, benchmarks, notebooks).

        with BackgroundServer(create_app(retriever)) as server:
            dspy.ColBERTv2(url=server.url)("query", k=3)
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        self.config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)
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
