"""Client of the ColBERTv2 REST API (`GET url?query=&k=`, or POST JSON), the interface of the public
wiki17_abstracts server the seed papers used and of `ragzoo serve`.

The public server often answers HTTP 200 with `{"error": true, ...}` (DSPy issues #8946, #7966, #9116);
that, HTTP errors, timeouts, unreachable hosts, malformed JSON and answers of the wrong shape all raise a
`RetrieverError` saying what happened; a query the server finds too long (HTTP 413/414/431) names the
server's limit (`ragzoo serve` states it) and the query's length. 429 and 5xx answers (and timeouts) are retried a bounded number of
times with exponential backoff. Answers are cached in memory (LRU) and optionally on disk.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from pathlib import Path

from ragzoo.errors import RetrieverError
from ragzoo.retrieval.base import BaseRetriever, Passage

RETRYABLE_STATUS = {429, 500, 502, 503, 504}


class ColBERTv2Client(BaseRetriever):
    def __init__(self, url: str, *, post: bool = False, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.5, max_backoff: float = 8.0, cache_size: int = 4096,
                 disk_cache: str | Path | None = None, spec: str = ""):
        import httpx

        from ragzoo.secrets import strip_endpoint

        self.shown = strip_endpoint(url)  # what messages name: no userinfo or token of the server's URL
        if not url.startswith(("http://", "https://")):
            raise RetrieverError(f"ColBERTv2 URL must start with http:// or https://, got {self.shown!r}")
        try:
            self._base = httpx.URL(url)  # a GET adds query and k to the URL's own parameters (an index name, a key)
        except httpx.InvalidURL as error:
            raise RetrieverError(f"ColBERTv2 URL {self.shown!r} is not a valid URL ({error})") from None
        self.url = url
        self.post = post
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.spec = spec or f"colbertv2:{url}"
        self._http = httpx.Client(timeout=timeout, follow_redirects=True)
        self._cache: OrderedDict[tuple, list[Passage]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.disk_cache = Path(disk_cache) if disk_cache else None
        self.requests_sent = 0  # how many HTTP requests went out (tests and benchmarks read it)

    # -- cache -------------------------------------------------------------------------------------
    def _key(self, query: str, k: int) -> tuple:
        return (self.url, self.post, query, k)

    def _disk_path(self, key: tuple) -> Path:
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        return self.disk_cache / digest[:2] / f"{digest}.json"

    def _cached(self, key: tuple) -> list[Passage] | None:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        if self.disk_cache:
            path = self._disk_path(key)
            if path.exists():
                try:
                    passages = [Passage.from_dict(item) for item in json.loads(path.read_text())]
                except (OSError, ValueError, KeyError):
                    return None
                self._remember(key, passages, to_disk=False)
                return passages
        return None

    def _remember(self, key: tuple, passages: list[Passage], to_disk: bool = True) -> None:
        with self._lock:
            self._cache[key] = passages
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        if to_disk and self.disk_cache:
            path = self._disk_path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_text(json.dumps([p.to_dict() for p in passages], ensure_ascii=False))
            tmp.replace(path)

    # -- requests ----------------------------------------------------------------------------------
    def _search(self, query: str, k: int) -> list[Passage]:
        key = self._key(query, k)
        cached = self._cached(key)
        if cached is not None:
            return list(cached)
        passages = self._parse(self._fetch(query, k), k)
        self._remember(key, passages)
        return list(passages)

    def _fetch(self, query: str, k: int) -> dict:
        import httpx

        attempt = 0
        while True:
            reason = None
            try:
                self.requests_sent += 1
                if self.post:
                    response = self._http.post(self.url, json={"query": query, "k": k})
                else:
                    # httpx's `params=` would replace the URL's own query string, not add to it
                    response = self._http.get(self._base.copy_merge_params({"query": query, "k": k}))
            except httpx.TimeoutException:
                reason = f"timed out after {self.timeout:g}s"
            except httpx.TransportError as error:
                raise RetrieverError(f"ColBERTv2 server {self.shown} is unreachable ({type(error).__name__}: "
                                     f"{error}); start one with `ragzoo serve` or use --retriever bm25:<corpus>")
            else:
                if response.status_code in RETRYABLE_STATUS:
                    reason = f"HTTP {response.status_code}{_error_detail(response)}"
                elif response.status_code in (413, 414, 431):
                    raise RetrieverError(_too_long(response, self.shown, query, self.post))
                elif response.status_code >= 400:
                    raise RetrieverError(f"ColBERTv2 server {self.shown} refused the query: HTTP "
                                         f"{response.status_code}{_error_detail(response)}")
                else:
                    return _decode(response, self.shown)
            if attempt >= self.retries:
                raise RetrieverError(f"ColBERTv2 server {self.shown} failed {attempt + 1} time(s), last: {reason}")
            delay = min(self.max_backoff, self.backoff * (2 ** attempt))
            time.sleep(delay)
            attempt += 1

    def _parse(self, payload: dict, k: int) -> list[Passage]:
        topk = payload.get("topk")
        if not isinstance(topk, list):
            raise RetrieverError(f"ColBERTv2 server {self.shown} answered without a 'topk' list "
                                 f"(keys: {sorted(payload)[:8]}); is this a ColBERTv2 endpoint?")
        passages = []
        for position, item in enumerate(topk[:k]):
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise RetrieverError(f"ColBERTv2 server {self.shown}: topk[{position}] has no 'text' string")
            try:
                score = float(item.get("score", 0.0))
            except (TypeError, ValueError):
                raise RetrieverError(f"ColBERTv2 server {self.shown}: topk[{position}].score is not a number")
            passage = Passage.from_long_text(item["text"], pid=str(item.get("pid", "")), score=score)
            meta = {name: item[name] for name in ("rank", "prob") if name in item}
            passages.append(Passage(passage.pid, passage.title, passage.text, passage.score, meta))
        return passages

    def close(self) -> None:
        self._http.close()


def _error_detail(response) -> str:
    """What the server said of its refusal, redacted: a server may echo what it was sent (the URL's credentials,
    as Basic auth sends them)."""
    from ragzoo.secrets import redact

    try:
        body = response.json()
    except ValueError:
        text = response.text.strip().replace("\n", " ")
        return f": {redact(text[:200])}" if text else ""
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error")
        if message is not None:
            return f": {redact(str(message)[:200])}"
    return ""


def _too_long(response, url: str, query: str, post: bool) -> str:
    """The message for a query the server found too long: its limit (when it says it, as `ragzoo serve`
    does in `max_query_chars`) beside the query's length, and what to do."""
    try:
        body = response.json()
    except ValueError:
        body = None
    limit = body.get("max_query_chars") if isinstance(body, dict) else None
    size = f"a {len(query):,}-character query"
    if isinstance(limit, int) and not isinstance(limit, bool):
        return (f"ColBERTv2 server {url} refused {size} (HTTP {response.status_code}): the server's limit is "
                f"{limit:,} characters; restart it with a higher `ragzoo serve --max-query-chars`, or shorten "
                f"the query")
    if response.status_code == 413:
        return (f"ColBERTv2 server {url} refused {size} as too large (HTTP 413{_error_detail(response)}); "
                f"the server does not say its limit")
    how = "" if post else "; POST sends the query in the body instead (post=True)"
    return (f"ColBERTv2 server {url} refused {size}: the request line or headers are too long for it "
            f"(HTTP {response.status_code}){how}")


def _decode(response, url: str) -> dict:
    from ragzoo.secrets import redact  # what the server says may quote the credentials it was sent

    try:
        payload = response.json()
    except ValueError:
        raise RetrieverError(f"ColBERTv2 server {url} answered with malformed JSON: "
                             f"{redact(repr(response.text[:120]))}")
    if not isinstance(payload, dict):
        raise RetrieverError(f"ColBERTv2 server {url} answered a {type(payload).__name__}, not a JSON object")
    if payload.get("error"):
        message = payload.get("message") or payload.get("error")
        raise RetrieverError(f"ColBERTv2 server {url} answered with an error payload: {redact(str(message)[:200])}")
    return payload
