"""Retrieval benchmark: recall of HotPotQA gold titles on the shipped wiki17 sample, build time and memory,
query throughput of our bm25 against raw bm25s and rank_bm25 in the same run, bm25 at ~1M synthetic
documents (--big), dense and hybrid (--dense: embeds 17,703 passages once, ~10 min, cached), and latency
of the ColBERTv2-compatible server under 1/8/32 concurrent loopback clients.

    python -m benchmarks.retrieval [--dense] [--big] [--questions N] [--big-docs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from benchmarks.common import wait_healthy
from ragzoo.retrieval.specs import DEFAULT_CORPUS as CORPUS  # the default retriever's corpus
from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

KS = (2, 5, 10, 20)
QUESTIONS = "hotpotqa/dev_distractor.jsonl"


# -- helpers -------------------------------------------------------------------------------------------
def in_child(function, *args):
    """Run `function(*args)` in a fresh process; returns (result, peak RSS MB of that process)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_measured, function, *args).result()


def _measured(function, *args):
    result = function(*args)
    # VmHWM is this process's own peak; ru_maxrss of a forked child can report the parent's
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return result, peak_kb / 1024


def _build_ours(corpus: str, cache: str):
    os.environ["RAGZOO_CACHE"] = cache
    from ragzoo.retrieval.bm25 import ensure_bm25_index

    started = time.perf_counter()
    folder, meta, _ = ensure_bm25_index(Path(corpus), show_progress=False, rebuild=True)
    return time.perf_counter() - started, str(folder), meta["num_docs"]


def recall_table(ranked_titles: list[list[str]], gold: list[list[str]]) -> dict[str, float]:
    row = {}
    for k in KS:
        row[f"R@{k}"] = statistics.mean(len(set(g) & set(t[:k])) / len(g) for t, g in zip(ranked_titles, gold))
        row[f"both@{k}"] = statistics.mean(set(g) <= set(t[:k]) for t, g in zip(ranked_titles, gold))
    return row


def qps(function, queries, batched: bool) -> float:
    started = time.perf_counter()
    if batched:
        function(queries)
    else:
        for query in queries:
            function([query])
    return len(queries) / (time.perf_counter() - started)


def print_table(title: str, rows: list[dict]) -> None:
    if not rows:
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_fmt(row.get(col, "")) for col in columns] for row in rows]
    widths = [max(len(col), *(len(c[i]) for c in cells)) for i, col in enumerate(columns)]
    print(f"\n## {title}")
    print("  ".join(col.ljust(w) for col, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 100 else f"{value:,.0f}"
    return str(value)


# -- parts ---------------------------------------------------------------------------------------------
def bench_sparse(data: Path, n_questions: int, rank_bm25_questions: int, tmp: Path) -> tuple[list[dict], list[dict], dict]:
    import bm25s
    from rank_bm25 import BM25Okapi

    from ragzoo.retrieval.corpus import iter_corpus
    from ragzoo.retrieval.bm25 import BM25Retriever, BM25Settings, make_tokenizer

    corpus = data / CORPUS
    rows_q = [json.loads(line) for line in open(data / QUESTIONS)][:n_questions]
    questions = [r["question"] for r in rows_q]
    gold = [r["supporting_titles"] for r in rows_q]
    quality, speed = [], []

    build_s, folder, num_docs = None, None, None
    (build_s, folder, num_docs), rss = in_child(_build_ours, str(corpus), str(tmp / "cache"))
    ours = BM25Retriever(Path(folder))
    ranked = [[p.title for p in row] for row in ours.batch(questions, 20)]
    quality.append({"retriever": "ragzoo bm25 (k1 .9, b .4)", **recall_table(ranked, gold)})

    passages = list(iter_corpus(corpus))
    titles = [p.title for p in passages]
    tokenizer = make_tokenizer(BM25Settings())
    started = time.perf_counter()
    ids = tokenizer.tokenize([p.long_text for p in passages], show_progress=False, allow_empty=False)
    raw = bm25s.BM25(k1=0.9, b=0.4)
    raw.index((ids, tokenizer.stem_to_sid), show_progress=False)
    raw_build = time.perf_counter() - started

    def raw_search(queries, k=10):
        tokens = tokenizer.tokenize(queries, update_vocab=False, show_progress=False, allow_empty=False)
        return raw.retrieve(tokens, k=k, show_progress=False, n_threads=0)

    docs, _ = raw_search(questions, 20)
    quality.append({"retriever": "raw bm25s, same tokens", **recall_table([[titles[i] for i in r] for r in docs], gold)})

    def ours_search(queries, k=10):
        return ours.batch(queries, k)

    subset = questions[:rank_bm25_questions]
    started = time.perf_counter()
    okapi = BM25Okapi([p.long_text.lower().split() for p in passages])
    okapi_build = time.perf_counter() - started

    def okapi_search(queries, k=10):
        return [okapi.get_top_n(q.lower().split(), titles, n=k) for q in queries]

    quality.append({"retriever": f"rank_bm25 (lower().split(), {len(subset)} q)",
                    **recall_table(okapi_search(subset, 20), gold[:len(subset)])})

    ours_single, ours_batch = qps(ours_search, questions, False), qps(ours_search, questions, True)
    fast = BM25Retriever(Path(folder), backend="numba")
    started = time.perf_counter()
    fast.batch(questions[:2], 10)  # numba compiles its scorer on the first query of a process
    warm_up = time.perf_counter() - started
    fast_single = qps(lambda q: fast.batch(q, 10), questions, False)
    fast_batch = qps(lambda q: fast.batch(q, 10), questions, True)
    raw_single, raw_batch = qps(raw_search, questions, False), qps(raw_search, questions, True)
    okapi_qps = qps(okapi_search, subset[:50], True)
    speed.append({"retriever": "ragzoo bm25", "build s": build_s, "build peak RSS MB": rss,
                  "QPS single": ours_single, "QPS batch": ours_batch})
    speed.append({"retriever": f"ragzoo bm25, backend=numba (JIT warm-up {warm_up:.1f} s)", "build s": build_s,
                  "QPS single": fast_single, "QPS batch": fast_batch})
    speed.append({"retriever": "raw bm25s", "build s": raw_build, "QPS single": raw_single, "QPS batch": raw_batch})
    speed.append({"retriever": "rank_bm25", "build s": okapi_build, "QPS single": okapi_qps, "QPS batch": okapi_qps})
    ratios = {"ours/raw single": ours_single / raw_single, "ours/raw batch": ours_batch / raw_batch,
              "ours/rank_bm25": ours_single / okapi_qps,
              "ours numba/raw batch": fast_batch / raw_batch, "docs": num_docs, "questions": len(questions)}
    return quality, speed, ratios


def bench_dense(data: Path, n_questions: int) -> list[dict]:
    from ragzoo.retrieval import make_retriever

    rows_q = [json.loads(line) for line in open(data / QUESTIONS)][:n_questions]
    questions, gold = [r["question"] for r in rows_q], [r["supporting_titles"] for r in rows_q]
    out = []
    for spec in (f"dense:{CORPUS}", f"hybrid:{CORPUS}"):
        started = time.perf_counter()
        retriever = make_retriever(spec)
        ready = time.perf_counter() - started
        started = time.perf_counter()
        ranked = [[p.title for p in row] for row in retriever.batch(questions, 20)]
        rate = len(questions) / (time.perf_counter() - started)
        out.append({"retriever": spec.split(":")[0], **recall_table(ranked, gold), "load/build s": ready,
                    "QPS batch": rate})
    return out


def _synthetic_corpus(path: Path, n_docs: int, words_per_doc: int = 60, vocab: int = 200_000) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    lexicon = np.array([f"w{i:x}q" for i in range(vocab)])
    with open(path, "w") as sink:
        for first in range(0, n_docs, 50_000):
            count = min(50_000, n_docs - first)
            words = lexicon[np.minimum(rng.zipf(1.2, size=(count, words_per_doc)) - 1, vocab - 1)]
            for row in range(count):
                sink.write(json.dumps({"id": f"s{first + row}", "title": f"doc {first + row}",
                                       "text": " ".join(words[row])}) + "\n")


def bench_big(tmp: Path, n_docs: int) -> dict:
    import numpy as np

    from ragzoo.retrieval.bm25 import BM25Retriever

    path = tmp / f"synthetic_{n_docs}.jsonl"
    started = time.perf_counter()
    _synthetic_corpus(path, n_docs)
    generate = time.perf_counter() - started
    (build_s, folder, num_docs), rss = in_child(_build_ours, str(path), str(tmp / "cache"))
    started = time.perf_counter()
    retriever = BM25Retriever(Path(folder))
    load_s = time.perf_counter() - started
    rng = np.random.default_rng(1)
    queries = [" ".join(f"w{i:x}q" for i in rng.integers(0, 5000, size=6)) for _ in range(200)]
    single = qps(lambda q: retriever.batch(q, 10), queries, False)
    batch = qps(lambda q: retriever.batch(q, 10), queries, True)
    size_mb = sum(f.stat().st_size for f in Path(folder).iterdir()) / 2**20
    return {"docs": num_docs, "corpus MB": path.stat().st_size / 2**20, "generate s": generate,
            "build s": build_s, "build peak RSS MB": rss, "index MB": size_mb, "load s": load_s,
            "QPS single": single, "QPS batch": batch}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _load(url: str, queries: list[str], concurrency: int, per_client: int) -> list[float]:
    import httpx

    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def worker(offset: int):
            for i in range(per_client):
                query = queries[(offset * per_client + i) % len(queries)]
                started = time.perf_counter()
                response = await client.get(url, params={"query": query, "k": 10})
                response.raise_for_status()
                latencies.append(time.perf_counter() - started)
        await asyncio.gather(*(worker(c) for c in range(concurrency)))
    return latencies


def bench_server(data: Path, tmp: Path, requests_per_level: int = 320) -> list[dict]:
    questions = [json.loads(line)["question"] for line in open(data / QUESTIONS)]
    port = _free_port()
    env = {**os.environ, "RAGZOO_CACHE": str(tmp / "cache")}
    server = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever", DEFAULT_RETRIEVER,
                               "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_healthy(url, server, seconds=60, poll=0.2)
        rows = []
        asyncio.run(_load(url, questions, 4, 10))  # warm-up
        for concurrency in (1, 8, 32):
            started = time.perf_counter()
            latencies = sorted(asyncio.run(_load(url, questions, concurrency, requests_per_level // concurrency)))
            elapsed = time.perf_counter() - started
            rows.append({"clients": concurrency, "requests": len(latencies),
                         "p50 ms": 1000 * latencies[len(latencies) // 2],
                         "p99 ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
                         "req/s": len(latencies) / elapsed})
        return rows
    finally:
        server.terminate()
        server.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense", action="store_true", help="also dense and hybrid (embeds the sample once)")
    parser.add_argument("--big", action="store_true", help="also bm25 over synthetic documents")
    parser.add_argument("--big-docs", type=int, default=1_000_000)
    parser.add_argument("--questions", type=int, default=1525)
    parser.add_argument("--rank-bm25-questions", type=int, default=200)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ragzoo.paths import data_root

    data = data_root()
    with tempfile.TemporaryDirectory(prefix="ragzoo-bench-") as scratch:
        tmp = Path(scratch)
        quality, speed, ratios = bench_sparse(data, args.questions, args.rank_bm25_questions, tmp)
        if args.dense:
            quality += bench_dense(data, args.questions)  # uses the user's cache: embeddings are kept
        print_table(f"Recall of gold titles, {ratios['questions']} HotPotQA dev questions, {ratios['docs']:,} docs",
                    quality)
        print_table("BM25 speed (one thread)", speed)
        print_table("Ratios (targets: ours/raw >= 0.9, ours/rank_bm25 >= 10)",
                    [{k: v for k, v in ratios.items() if k.startswith("ours")}])
        print_table("ColBERTv2-compatible server over loopback (bm25, k=10)", bench_server(data, tmp))
        if args.big:
            print_table(f"bm25 over {args.big_docs:,} synthetic 60-word documents", [bench_big(tmp, args.big_docs)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
