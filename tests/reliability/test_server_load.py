"""The ColBERTv2 REST server (`ragzoo serve`'s app, BackgroundServer(create_app(bm25 over the wiki17 sample)))
under a bounded loopback load: 1, 8 and 32 concurrent clients, a fixed number of requests per level, stops by
itself. 0 errors, p99 under a generous bound, RSS steady between levels; oversized queries and bad k get 4xx;
loopback by default."""

from __future__ import annotations

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
