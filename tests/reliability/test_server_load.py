"""The ColBERTv2 REST server (`ragzoo serve`'s app, BackgroundServer(create_app(bm25 over the wiki17 sample)))
under a bounded loopback load: 1, 8 and 32 concurrent clients, a fixed number of requests per level, stops by
itself. 0 errors, p99 under a generous bound, RSS steady between levels; oversized queries and bad k get 4xx;
loopback by default."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import psutil
import pytest

from ragzoo.retrieval.server import MAX_QUERY_CHARS, BackgroundServer, create_app

REQUESTS_PER_LEVEL = 100
LEVELS = (1, 8, 32)
P99_BOUND_S = 2.0  # generous: 2 shared cores, other tests running; a healthy server answers in ~ms
RSS_GROWTH_BOUND_MB = 30.0  # server process, from 1 to 32 concurrent clients (measured: ~3 MB)
STEADY_BOUND_MB = 8.0  # a repeated round at 32 clients (measured: < 1 MB)
WORDS = ["river", "film", "album", "football", "president", "band", "city", "novel", "war", "university",
         "American", "born", "singer", "team", "season", "church", "island", "company", "station", "actor"]


@pytest.fixture(scope="module")
def server(wiki17_corpus):
    from ragzoo.retrieval import make_retriever

    retriever = make_retriever(f"bm25:{wiki17_corpus}", show_progress=False)
    with BackgroundServer(create_app(retriever)) as running:
        yield running


def _load(url: str, clients: int, total: int) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(total))

    def client(worker: int) -> None:
        with httpx.Client(timeout=10.0) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                query = f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7 + worker) % len(WORDS)]} {i}"
                started = time.perf_counter()
                try:
                    if i % 2:
                        response = http.get(url, params={"query": query, "k": 1 + i % 20})
                    else:
                        response = http.post(url, json={"query": query, "k": 1 + i % 20})
                    ok = response.status_code == 200 and len(response.json()["topk"]) == 1 + i % 20
                except Exception as error:  # noqa: BLE001 - every failure is counted
                    ok, response = False, error
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors.append(repr(response)[:200])

    threads = [threading.Thread(target=client, args=(w,), daemon=True) for w in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "the load test did not stop by itself"
    return latencies, errors


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@pytest.fixture(scope="module")
def served(wiki17_corpus, server):
    """The real `ragzoo serve` in its own process (its RSS is then the server's alone, not the clients')."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever", f"bm25:{wiki17_corpus}",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "ragzoo serve exited"
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "ragzoo serve did not start"
            time.sleep(0.1)
        yield url, psutil.Process(process.pid)
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.needs_full_data
def test_load_levels_zero_errors_bounded_p99_steady_memory(served):
    url, process = served
    _load(url + "/", 4, 40)  # warm-up: first queries, thread pools, allocator
    rss = {}
    report = []
    for clients in LEVELS:
        latencies, errors = _load(url + "/", clients, REQUESTS_PER_LEVEL)
        rss[clients] = process.memory_info().rss / 2**20
        p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
        report.append(f"{clients} clients: p50={p50 * 1000:.1f} ms p99={p99 * 1000:.1f} ms server rss={rss[clients]:.0f} MB")
        assert len(latencies) == REQUESTS_PER_LEVEL
        assert errors == [], errors[:3]
        assert p99 < P99_BOUND_S, report
    _latencies, errors = _load(url + "/", LEVELS[-1], REQUESTS_PER_LEVEL)  # a second round at the top level
    again = process.memory_info().rss / 2**20
    report.append(f"{LEVELS[-1]} clients again: server rss={again:.0f} MB")
    assert errors == []
    assert rss[LEVELS[-1]] - rss[LEVELS[0]] < RSS_GROWTH_BOUND_MB, report
    assert again - rss[LEVELS[-1]] < STEADY_BOUND_MB, report
    print("\n".join(report))


@pytest.mark.parametrize("params, status", [
    ({"query": "x" * (MAX_QUERY_CHARS + 1), "k": 3}, 413),
    ({"query": "river", "k": 0}, 400),
    ({"query": "river", "k": 101}, 400),
    ({"query": "river", "k": -5}, 400),
    ({"query": "river", "k": "ten"}, 400),
    ({"query": "", "k": 3}, 400),
    ({"k": 3}, 400),
])
@pytest.mark.parametrize("verb", ["get", "post"])
def test_rejects_bad_requests_with_4xx_json(server, params, status, verb):
    with httpx.Client(timeout=10.0) as http:
        if verb == "get":
            response = http.get(server.url + "/", params=params)
        else:
            response = http.post(server.url + "/", json=params)
    assert response.status_code == status, response.text[:200]
    body = response.json()
    assert body["error"] is True and body["message"]


def test_post_with_a_non_json_body_is_a_4xx(server):
    response = httpx.post(server.url + "/", content=b"\xff\xfe not json", timeout=10.0)
    assert 400 <= response.status_code < 500 and response.json()["error"] is True


def test_binds_loopback_by_default(server):
    assert server.url.startswith("http://127.0.0.1:")
    from ragzoo.cli import build_parser

    _parser, subparsers = build_parser("serve")
    assert subparsers["serve"].parse_args([]).host == "127.0.0.1"


# -- issue 15/16: overload, readiness, identical results, slow and broken clients ---------------------------
class _Slow:
    """A backend that takes `delay` seconds per search (and per batch), to fill the queue on purpose."""

    spec = "bm25:/home/someone/private/corpus.jsonl"

    def __init__(self, inner, delay: float = 0.2):
        self.inner, self.delay, self.released = inner, delay, threading.Event()
        self.released.set()

    def __call__(self, query, k):
        time.sleep(self.delay)
        return self.inner(query, k)

    def batch(self, queries, k):
        time.sleep(self.delay)
        return self.inner.batch(queries, k)

    def warm_up(self):
        self.released.wait(20)

    def __len__(self):
        return len(self.inner)


@pytest.fixture(scope="module")
def bm25(wiki17_corpus):
    from ragzoo.retrieval import make_retriever

    return make_retriever(f"bm25:{wiki17_corpus}", show_progress=False)


def test_results_under_32_concurrent_clients_are_identical_to_direct_search(server, bm25):
    queries = [f"{WORDS[i % len(WORDS)]} {WORDS[(3 * i + 1) % len(WORDS)]}" for i in range(96)]
    want = {(q, k): [p.pid for p in bm25(q, k)] for i, q in enumerate(queries) for k in (3 + i % 4,)}
    got: dict = {}
    lock = threading.Lock()

    def client(part):
        with httpx.Client(timeout=30) as http:
            for q, k in part:
                pids = [t["pid"] for t in http.get(server.url + "/", params={"query": q, "k": k}).json()["topk"]]
                with lock:
                    got[(q, k)] = pids

    items = list(want)
    threads = [threading.Thread(target=client, args=(items[c::32],)) for c in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert got == want


def test_beyond_the_queue_limit_the_answer_is_503_with_retry_after(bm25):
    app = create_app(_Slow(bm25, delay=0.3), max_pending=2)
    with BackgroundServer(app) as running:
        results: list = []

        def ask(i):
            results.append(httpx.get(running.url + "/", params={"query": f"river {i}", "k": 2}, timeout=30))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    busy = [r for r in results if r.status_code == 503]
    assert len(results) == 8 and busy and len(busy) <= 6
    assert all(r.headers.get("retry-after") == "1" and r.json()["error"] is True for r in busy)
    assert all(r.status_code in (200, 503) for r in results)


def test_health_says_ready_only_once_loaded_and_warm(bm25):
    slow = _Slow(bm25, delay=0.0)
    slow.released.clear()  # the warm-up blocks until released
    app = create_app(slow, warm="background")
    with BackgroundServer(app) as running:
        health = httpx.get(running.url + "/health")
        search = httpx.get(running.url + "/", params={"query": "river", "k": 2})
        assert health.status_code == 503 and health.json()["status"] == "warming"
        assert search.status_code == 503 and search.headers["retry-after"] == "1" and search.json()["error"] is True
        slow.released.set()
        deadline = time.monotonic() + 10
        while httpx.get(running.url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ready = httpx.get(running.url + "/health").json()
        assert ready["status"] == "ok" and "/home" not in json.dumps(ready)  # no paths in public answers
        assert httpx.get(running.url + "/", params={"query": "river", "k": 2}).status_code == 200


def test_every_error_is_json_4xx_or_5xx_with_one_log_line(bm25, caplog):
    class Broken:
        spec = "bm25:x"

        def __call__(self, query, k):
            raise ValueError("/secret/path exploded")

        def batch(self, queries, k):
            raise ValueError("/secret/path exploded")

    import logging

    with BackgroundServer(create_app(Broken())) as running, caplog.at_level(logging.INFO):
        cases = [httpx.get(running.url + "/nowhere"), httpx.delete(running.url + "/"),
                 httpx.get(running.url + "/", params={"query": "river", "k": 2}),
                 httpx.post(running.url + "/", content=b'{"query": "x", "k": 1e400}'),
                 httpx.post(running.url + "/", content=b"[" * 100_000)]
    statuses = [r.status_code for r in cases]
    assert statuses == [404, 405, 500, 400, 400]
    for response in cases:
        assert response.headers["content-type"] == "application/json" and response.json()["error"] is True
        assert "/secret" not in response.text and "Traceback" not in response.text
    logged = [r for r in caplog.records if r.name.startswith(("ragzoo", "uvicorn"))]
    assert len(logged) <= len(cases) and not any(r.exc_info for r in logged)


def _raw(port: int, payload: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if payload:
        sock.sendall(payload)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionError:
        return True
    finally:
        sock.close()


def test_slow_headers_bodies_and_idle_sockets_are_disconnected(bm25, caplog):
    import logging

    with BackgroundServer(create_app(bm25), header_timeout=0.5, body_timeout=0.5, keep_alive_timeout=0.5) as running, \
            caplog.at_level(logging.INFO):
        port = int(running.url.rsplit(":", 1)[1])
        idle = _raw(port, b"")
        slow_head = _raw(port, b"GET /?query=river&k=2 HTTP/1.1\r\nHost: x\r\n")  # never finishes its head
        slow_body = _raw(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"query\": ")
        assert _closed_within(idle, 3) and _closed_within(slow_head, 3) and _closed_within(slow_body, 3)
        # many clients that hang up mid-body: no traceback, at most one line each
        for _ in range(20):
            _raw(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"query\"").close()
        time.sleep(0.5)
        assert httpx.get(running.url + "/", params={"query": "river", "k": 2}).status_code == 200  # still serving
    logged = [r for r in caplog.records if r.name.startswith(("ragzoo", "uvicorn"))]
    assert len(logged) <= 3 + 20 and not any(r.exc_info for r in logged)
    assert not any("Traceback" in r.getMessage() for r in caplog.records)
