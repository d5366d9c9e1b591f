"""Retrieval benchmark: recall of HotPotQA gold titles on the shipped wiki17 sample, build time and memory,
query throughput of our bm25 against raw bm25s and rank_bm25 in the same run, bm25 at ~1M synthetic
documents (--big), dense and hybrid (--dense: embeds 17,703 passages once, ~10 min, cached), and latency
of the ColBERTv2-compatible server under 1/8/32 concurrent loopback clients.

The side-by-side table sets ragzoo's bm25 (each index format) against bm25s's own `retrieve` (numba and numpy)
on the same index files and questions, both from query strings to ranked rows, in interleaved rounds of one
process, and prints the ratio with its range and the load average: on a shared machine the absolute q/s
move with the load, the interleaved ratio much less (`side_by_side`, also used by `benchmarks.scale`), with
each side's process CPU per question. Ours returns hits with their passages, bm25s row numbers: the table
says so, and its "hits read" rows have ours read every hit.

    python -m benchmarks.retrieval [--dense] [--big] [--questions N] [--big-docs N] [--format csc,packed]
    python -m benchmarks.retrieval --side-by-side-only --format csc --backends numba --rounds 9
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
from ragzoo.errors import ConfigError
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


def _build_ours(corpus: str, cache: str, index_format: str = "csc"):
    os.environ["RAGZOO_CACHE"] = cache
    from ragzoo.retrieval.bm25 import ensure_bm25_index

    started = time.perf_counter()
    formatted = {} if index_format == "csc" else {"index_format": index_format}
    folder, meta, _ = ensure_bm25_index(Path(corpus), show_progress=False, rebuild=True, **formatted)
    return time.perf_counter() - started, str(folder), meta["num_docs"]


def index_formats() -> list[str]:
    """The bm25 index formats this checkout can build: bm25s's CSC, and the packed one when present."""
    try:
        from ragzoo.retrieval import bm25_packed

        bm25_packed.require_numba()
        return ["csc", bm25_packed.FORMAT]
    except (ImportError, AttributeError, ConfigError):  # no packed module, or no numba: csc only
        return ["csc"]


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


# -- side by side with bm25s ---------------------------------------------------------------------------
def interleaved(contenders: dict, n_queries: dict, rounds: int, clock=time.perf_counter,
                cpu: dict | None = None, cpu_clock=time.process_time) -> dict[str, list[float]]:
    """q/s of each contender (name -> a no-argument function answering `n_queries[name]` queries) over `rounds`
    rounds. Every round runs each contender once, forward on even rounds and backward on odd ones, so that a
    change in the machine's load between rounds (2 cores shared with other jobs) falls on all of them alike.
    With `cpu` (a dict), also each run's process CPU time per query in microseconds, name -> one per round: on a
    shared machine steadier than wall time (time spent waiting for a core is not counted)."""
    names = list(contenders)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            cpu_started = cpu_clock() if cpu is not None else 0.0
            started = clock()
            contenders[name]()
            rates[name].append(n_queries[name] / (clock() - started))
            if cpu is not None:
                cpu.setdefault(name, []).append(1e6 * (cpu_clock() - cpu_started) / n_queries[name])
    return rates


def ratio_row(label: str, ours: list[float], anchor: list[float], ours_cpu: list[float] | None = None,
              anchor_cpu: list[float] | None = None, returns: str | None = None) -> dict:
    """One table row: the median q/s of both and ours/anchor as the median (and range) of the per-round
    ratios: each round's two runs were measured minutes apart at most, under the same load. With the CPU times
    per query of each round, the same for CPU (ours/bm25s as a speed: bm25s's CPU over ours). `returns`: what
    each side hands back, in words (ours hits with passages, bm25s row numbers)."""
    ratios = [a / b for a, b in zip(ours, anchor)]
    row = {"mode": label, "bm25s q/s": statistics.median(anchor), "ours q/s": statistics.median(ours),
           "ours/bm25s": statistics.median(ratios), "ratio range": f"{min(ratios):.2f}-{max(ratios):.2f}",
           "rounds": len(ratios)}
    if ours_cpu and anchor_cpu:
        cpu_ratios = [b / a for a, b in zip(ours_cpu, anchor_cpu)]
        row.update({"bm25s CPU us/q": statistics.median(anchor_cpu), "ours CPU us/q": statistics.median(ours_cpu),
                    "ours/bm25s CPU": statistics.median(cpu_ratios),
                    "CPU ratio range": f"{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}"})
    if returns:
        row["returns (ours / bm25s)"] = returns
    return row


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def bm25s_searcher(csc_dir: Path, backend: str, settings=None):
    """bm25s end to end over a CSC index folder, as its users call it: its tokenizer (`settings`, by default the
    folder's; the index's vocabulary), then `retrieve` on one thread. Returns search(queries) -> (rows, scores)."""
    import bm25s

    from ragzoo.retrieval.bm25 import BM25Settings, make_tokenizer

    model = bm25s.BM25.load(str(csc_dir), mmap=True, load_corpus=False)
    if backend == "numba":
        model.backend = "numba"
        model.activate_numba_scorer()
    if settings is None:
        meta_file = Path(csc_dir) / "meta.json"
        settings = BM25Settings(**(json.loads(meta_file.read_text())["settings"] if meta_file.exists() else {}))
    tokenizer = make_tokenizer(settings)
    if tokenizer.stemmer:
        tokenizer.stem_to_sid = model.vocab_dict
    else:
        tokenizer.word_to_id = dict(model.vocab_dict)

    def tokenize(queries: list[str]):
        return tokenizer.tokenize(queries, update_vocab=False, show_progress=False, allow_empty=False)

    def retrieve(tokens, k: int = 10):
        return model.retrieve(tokens, k=k, show_progress=False, n_threads=0)

    def search(queries: list[str], k: int = 10):
        return retrieve(tokenize(queries), k)

    search.tokenize, search.retrieve = tokenize, retrieve  # the two halves, for `cpu_split`
    return search


def cpu_split(ours, theirs, questions: list[str], repeats: int = 3) -> dict:
    """Where a question's CPU time goes, one question per call (process CPU time, best of `repeats`; on a
    shared machine less noisy than wall time): ours tokenize / score / build hits (unread) / whole call, bm25s
    tokenize / retrieve / whole call, in microseconds per question."""
    def per_question(function) -> float:
        best = float("inf")
        for _ in range(repeats):
            started = time.process_time()
            function()
            best = min(best, time.process_time() - started)
        return 1e6 * best / len(questions)

    tokens = ours.tokenize(questions)
    ranked = [ours.pruned.top_k(ids, 10) for ids in tokens]
    their_tokens = [theirs.tokenize([q]) for q in questions]
    return {"ours tokenize us": per_question(lambda: [ours.tokenize([q]) for q in questions]),
            "ours score us": per_question(lambda: [ours.pruned.top_k(ids, 10) for ids in tokens]),
            "ours hits us": per_question(lambda: [ours.store.get_many(rows, scores) for rows, scores in ranked]),
            "ours call us": per_question(lambda: [ours(q, 10) for q in questions]),
            "bm25s tokenize us": per_question(lambda: [theirs.tokenize([q]) for q in questions]),
            "bm25s retrieve us": per_question(lambda: [theirs.retrieve(ids) for ids in their_tokens]),
            "bm25s call us": per_question(lambda: [theirs([q]) for q in questions])}


def side_by_side(index_dir: Path, questions: list[str], csc_dir: Path | None = None, rounds: int = 5,
                 numpy_questions: int | None = None, backends: tuple[str, ...] = ("numba", "numpy"),
                 label: str = "", cpu_backends: tuple[str, ...] = ("numba",)) -> tuple[list[dict], dict]:
    """ragzoo's bm25 (`BM25Retriever` over `index_dir`, one thread) against bm25s's `retrieve` over the same
    index's CSC (`csc_dir`, default `index_dir`), same questions, k=10, end to end from query strings: interleaved
    rounds of one question per call ("single") and one batch of all ("batch"), per backend, wall q/s and process
    CPU per question. numpy runs `numpy_questions` only (bm25s's numpy scorer answers ~4 q/s at 5.2M passages).

    The two do not hand back the same thing: ours returns each question's hits as `Passage` objects (pid, title,
    text, score; a hit's line is read and decoded when a field is first read), bm25s's `retrieve` arrays of row
    numbers and scores, which a caller still has to turn into passages. Hence also "single, hits read" and
    "batch, hits read": ours reading every hit's title and text, against the same bm25s rows (a lower bound of
    ours' advantage: bm25s's side reads nothing). For `cpu_backends`, also where a question's CPU time goes
    (`cpu_split`). Returns (table rows, flat numbers for JSON)."""
    import numpy as np

    from ragzoo.retrieval.bm25 import BM25Retriever

    csc_dir = Path(csc_dir or index_dir)
    rows, flat = [], {}
    for backend in backends:
        asked = questions[:numpy_questions] if backend == "numpy" and numpy_questions else questions
        ours = BM25Retriever(Path(index_dir), backend=backend, check_stale=False)
        ours.warm_up()
        theirs = bm25s_searcher(csc_dir, backend, ours.settings)
        theirs(asked[:5])  # numba compiles bm25s's scorer on its first query

        def read_all(ranked):
            return sum(len(p.title) + len(p.text) for hits in ranked for p in hits)

        contenders = {
            "ours single": lambda: [ours(q, 10) for q in asked],
            "bm25s single": lambda: [theirs([q]) for q in asked],
            "ours batch": lambda: ours.batch(asked, 10),
            "bm25s batch": lambda: theirs(asked),
            "ours single, hits read": lambda: [read_all([ours(q, 10)]) for q in asked],
            "ours batch, hits read": lambda: read_all(ours.batch(asked, 10)),
        }
        for function in contenders.values():  # warm every path (and the page cache) before timing
            function()
        # the two answer the same: every question's top-10 scores (ties may order rows differently)
        _rows, their_scores = theirs(asked)
        same = sum(len(hits) == int((row > 0).sum()) and bool(np.allclose([p.score for p in hits], row[row > 0],
                                                                           rtol=1e-5))
                   for hits, row in zip(ours.batch(asked, 10), their_scores))
        flat[f"{backend} top-10 scores == bm25s (of {len(asked)})"] = same
        if ours.pruned is not None and backend in cpu_backends:  # (bm25s numpy: minutes at 1M+)
            flat.update({f"{backend} cpu per question, {key}": value
                         for key, value in cpu_split(ours, theirs, asked).items()})
        cpu: dict[str, list[float]] = {}
        rates = interleaved(contenders, {name: len(asked) for name in contenders}, rounds, cpu=cpu)
        for mode, anchor in (("single", "bm25s single"), ("batch", "bm25s batch"),
                             ("single, hits read", "bm25s single"), ("batch, hits read", "bm25s batch")):
            returns = ("hits, every title and text read" if "hits read" in mode else "hits, unread") + " / rows"
            row = ratio_row(f"{label}{backend} {mode}", rates[f"ours {mode}"], rates[anchor],
                            cpu[f"ours {mode}"], cpu[anchor], returns=returns)
            row["questions"] = len(asked)
            rows.append(row)
            key = f"{backend} {mode}"
            if anchor == f"bm25s {mode}":  # (a hits-read row shares its mode's anchor)
                flat[f"bm25s {key} q/s"] = row["bm25s q/s"]
                flat[f"bm25s {key} cpu us/q"] = row["bm25s CPU us/q"]
            flat.update({f"ours {key} q/s": row["ours q/s"], f"ours/bm25s {key}": row["ours/bm25s"],
                         f"ours/bm25s {key} range": row["ratio range"], f"ours {key} cpu us/q": row["ours CPU us/q"],
                         f"ours/bm25s {key} cpu": row["ours/bm25s CPU"],
                         f"ours/bm25s {key} cpu range": row["CPU ratio range"]})
    flat["side by side load"] = load_average()
    return rows, flat


def cpu_rows(flat: dict) -> list[dict]:
    """`cpu_split`'s figures out of a flat result (keys "<format> <backend> cpu per question, <what>"), one row
    per format and backend."""
    rows: dict[str, dict] = {}
    for key, value in flat.items():
        if " cpu per question, " in key:
            setup, what = key.split(" cpu per question, ")
            rows.setdefault(setup, {"setup": setup})[what] = value
    return list(rows.values())


# -- parts ---------------------------------------------------------------------------------------------
def bench_sparse(data: Path, n_questions: int, rank_bm25_questions: int, tmp: Path, formats: tuple[str, ...] = ("csc",),
                 rounds: int = 5) -> tuple[list[dict], list[dict], dict, list[dict]]:
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
    ours = BM25Retriever(Path(folder), backend="numpy")
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
    side, flat = bench_side_by_side(corpus, questions, Path(folder), tmp, formats, rounds)
    ratios.update(flat)
    return quality, speed, ratios, side


def bench_side_by_side(corpus: Path, questions: list[str], csc_folder: Path, tmp: Path, formats: tuple[str, ...],
                       rounds: int, backends: tuple[str, ...] = ("numba", "numpy")) -> tuple[list[dict], dict]:
    """bm25s on the very index ours reads (the csc index's files at `csc_folder`; another format is built from
    `corpus` beside it), both end to end from query strings, interleaved (`side_by_side`) for each format."""
    side: list[dict] = []
    ratios: dict = {}
    for index_format in formats:
        index = csc_folder
        if index_format != "csc":
            (_s, index, _n), _rss = in_child(_build_ours, str(corpus), str(tmp / "cache"), index_format)
        # a packed index scores with numba whatever the backend: its numpy row would repeat the numba one
        rows, flat = side_by_side(Path(index), questions, csc_dir=csc_folder, rounds=rounds,
                                  backends=backends if index_format == "csc" else ("numba",),
                                  label=f"{index_format} ")
        side += rows
        ratios.update({f"{index_format} {key}": value for key, value in flat.items()})
    return side, ratios


def side_by_side_title(rounds: int) -> str:
    return (f"ragzoo bm25 vs bm25s retrieve on the same index, end to end from query strings, k=10, one thread, "
            f"medians of {rounds} interleaved rounds ({load_average()}; target: numba ours/bm25s >= 0.8). Ours "
            f"returns each question's hits (Passage objects: pid, title, text, score), bm25s row numbers and "
            f"scores only; 'hits read' rows read every hit's title and text")


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
    retriever = BM25Retriever(Path(folder), backend="numpy")
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
    parser.add_argument("--format", default=None,
                        help="bm25 index formats to set beside bm25s, comma-separated: csc, packed (default: all "
                             "this checkout can build)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the side-by-side runs")
    parser.add_argument("--side-by-side-only", action="store_true",
                        help="only the side by side with bm25s (and its CPU split): no recall, rank_bm25, server")
    parser.add_argument("--backends", default="numba,numpy",
                        help="backends of the csc side by side, comma-separated (default numba,numpy)")
    args = parser.parse_args(argv)
    formats = tuple(args.format.split(",")) if args.format else tuple(index_formats())
    unknown = set(formats) - set(index_formats())
    if unknown:
        parser.error(f"--format {','.join(sorted(unknown))}: this checkout builds {', '.join(index_formats())}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ragzoo.paths import data_root

    data = data_root()
    backends = tuple(args.backends.split(","))
    if set(backends) - {"numba", "numpy"} or not backends:
        parser.error(f"--backends {args.backends}: numba and/or numpy")
    with tempfile.TemporaryDirectory(prefix="ragzoo-bench-") as scratch:
        tmp = Path(scratch)
        if args.side_by_side_only:
            questions = [json.loads(line)["question"] for line in open(data / QUESTIONS)][:args.questions]
            (_s, folder, _n), _rss = in_child(_build_ours, str(data / CORPUS), str(tmp / "cache"))
            side, ratios = bench_side_by_side(data / CORPUS, questions, Path(folder), tmp, formats, args.rounds,
                                              backends)
            print_table(side_by_side_title(args.rounds), side)
            print_table("CPU per question, one question per call (us, best of 3)", cpu_rows(ratios))
            return 0
        quality, speed, ratios, side = bench_sparse(data, args.questions, args.rank_bm25_questions, tmp, formats,
                                                    args.rounds)
        if args.dense:
            quality += bench_dense(data, args.questions)  # uses the user's cache: embeddings are kept
        print_table(f"Recall of gold titles, {ratios['questions']} HotPotQA dev questions, {ratios['docs']:,} docs",
                    quality)
        print_table("BM25 speed (one thread)", speed)
        print_table("Ratios (targets: ours/raw >= 0.9, ours/rank_bm25 >= 10)",
                    [{k: v for k, v in ratios.items() if k.startswith("ours")}])
        print_table(side_by_side_title(args.rounds), side)
        print_table("CPU per question, one question per call (us, best of 3)", cpu_rows(ratios))
        print_table("ColBERTv2-compatible server over loopback (bm25, k=10)", bench_server(data, tmp))
        if args.big:
            print_table(f"bm25 over {args.big_docs:,} synthetic 60-word documents", [bench_big(tmp, args.big_docs)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
