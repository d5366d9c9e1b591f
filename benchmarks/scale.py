"""Scale benchmark: bm25 over N synthetic passages shaped like the real wiki17 abstracts, queried with real
HotPotQA questions.

Passages: the shipped 17,703-abstract sample first (so questions keep their gold passages, and recall@10 among
all N is measured), then abstracts resampled from it: as many sentences as a randomly drawn real abstract, each
a real sentence of the sample, a real title. Names in resampled passages mostly become look-alikes, so that a
question's entities stay about as rare as in a real collection (see `synthetic_corpus`; `--keep-names 1` is
plain resampling, where every question term is ~300x as frequent at 5.2M as in the sample: a harsher case).
Lines use the full release's format (`{"title", "text": [sentence, ...]}`, no id).

Measured: generation, build time and peak RSS (in a child process), index size, load time, queries/s single
and batched (after the retriever's warm-up, as `ragzoo serve` does) with the numpy and numba column loops of
the pruned scorer (numba after its JIT warm-up, and on 2 threads), gold recall@10 among all N, a
profile of one batch with the postings read per query, agreement with bm25s's exhaustive scorer, and the
p99 of `ragzoo serve` at 8 loopback clients. Targets (issue 15, 2 cores): RSS <= 4 GB, build <= 10 min,
load <= 5 s, q/s >= bm25s's published figures at 5.23M passages (21 numpy, 47 numba, one core).

Then the anchor, side by side (issue 24): bm25s's own `retrieve` (numba, and numpy on `--numpy-questions`) over
the same index files (a packed index is exported to bm25s's CSC first, `bm25_packed.to_csc`), same questions,
both end to end from query strings, in interleaved rounds in one process; the table gives the ratio ours/bm25s
(median and range of the per-round ratios) with the load average, since on a shared machine only ratios measured
so are comparable. Targets: numba ours/bm25s >= 1.0 at 1M, >= 1.5 at 5.2M and 21M.

    nice -n 10 python -m benchmarks.scale --docs 5200000 --workdir /big/disk --out benchmarks/results/scale_5m.json
    python -m benchmarks.scale --corpus first_1m_lines.jsonl --format packed --workdir /big/disk
    python -m benchmarks.scale --index /big/disk/cache/bm25/... --no-serve      # measure a built index again
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import percentile, wait_healthy, write_json
from benchmarks.loadgen import get_request, run_load
from benchmarks.retrieval import (QUESTIONS, _free_port, cpu_rows, in_child, load_average, print_table, qps,
                                  side_by_side)
from ragzoo.retrieval.specs import DEFAULT_CORPUS

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"\w+")


def synthetic_corpus(sample: Path, path: Path, n_docs: int, seed: int = 0, keep_names: float = 0.02) -> dict:
    """Write `n_docs` wiki17-shaped passages to `path`: the sample's own abstracts first (line i = sample
    abstract i, so questions keep their gold passages), then resampled ones.

    Resampling a 17.7k-abstract sample up to 5.2M repeats each sentence ~300 times, and with it every word's
    document frequency, names included. General vocabulary does scale so with a collection; names do not
    (the sample is built around the questions' entities: "Kerensky" is in a few of its abstracts, not in
    thousands of Wikipedia's). So in a resampled sentence, names (words the sample writes capitalized
    mid-sentence nearly always) keep their spelling with probability `keep_names` only, and otherwise become
    one of 64 look-alike names (`Kerenskyzq1f`): ~300 copies x 2% leave a sample name in ~7x as many
    passages as in the sample. `keep_names=1` is plain resampling, the harsher case where every
    question term is ~300x as frequent as in the sample.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, titles, counts, sentences = [], [], [], []
    for line in open(sample, encoding="utf-8"):
        row = json.loads(line)
        parts = [s for s in _SENTENCE.split(row["text"].strip()) if s]
        rows.append(row)
        titles.append(row["title"])
        counts.append(max(1, len(parts)))
        sentences.extend(parts)
    names = _names(sentences)
    mark = (lambda text: _WORD.sub(lambda m: m.group(0) + "\x00" if m.group(0) in names else m.group(0), text))
    counts_arr = np.asarray(counts)
    sentences_arr = np.asarray([" " + mark(s) for s in sentences], dtype=object)
    titles_arr = np.asarray([mark(t) for t in titles], dtype=object)
    suffixes = [""] + [f"zq{i:x}" for i in range(64)]
    step = 100_000
    with open(path, "w", encoding="utf-8") as sink:
        for row in rows[:n_docs]:
            sink.write(json.dumps({"title": row["title"], "text": [row["text"]]}, ensure_ascii=False) + "\n")
        for first in range(len(rows), n_docs, step):
            count = min(step, n_docs - first)
            n_sent = counts_arr[rng.integers(0, len(counts_arr), size=count)]
            picks = sentences_arr[rng.integers(0, len(sentences_arr), size=int(n_sent.sum()))]
            title_picks = titles_arr[rng.integers(0, len(titles_arr), size=count)]
            # one look-alike per passage (its names are another entity's), or the sample's own names
            renamed = np.where(rng.random(count) < keep_names, 0, rng.integers(1, 65, size=count))
            cursor = 0
            lines = []
            for i in range(count):
                n = int(n_sent[i])
                suffix = suffixes[renamed[i]]
                text = [sentence.replace("\x00", suffix) for sentence in picks[cursor:cursor + n]]
                text[0] = text[0][1:]
                cursor += n
                lines.append(json.dumps({"title": title_picks[i].replace("\x00", suffix), "text": text},
                                        ensure_ascii=False))
            sink.write("\n".join(lines) + "\n")
    return {"sample sentences": len(sentences), "sample titles": len(titles), "sample names": len(names),
            "keep names": keep_names}


def _names(sentences: list[str]) -> set[str]:
    """Names: words the sample writes capitalized after a sentence's first word, lower-case at most 1 time in 10,
    and at most 50 times (the frequent ones, "American", "January", "University", scale like common words)."""
    upper, lower = {}, {}
    for sentence in sentences:
        for i, match in enumerate(_WORD.finditer(sentence)):
            word = match.group(0)
            if word[0].isupper():
                if i:
                    upper[word] = upper.get(word, 0) + 1
            else:
                lower[word] = lower.get(word, 0) + 1
    return {w for w, n in upper.items()
            if n <= 50 and lower.get(w.lower(), 0) * 10 <= n and not w.isupper()}


def _serve_p99(folder: str, questions: list[str], cache: str, clients: int = 8, requests: int = 800) -> dict:
    port = _free_port()
    env = {**os.environ, "RAGZOO_CACHE": cache}
    server = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--retriever",
                               f"bm25:{folder}?backend=numba", "--port", str(port)], env=env,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        ready_s = wait_healthy(url, server, seconds=300, poll=0.2)
        wanted = [get_request("/", {"query": questions[i % len(questions)], "k": 10}) for i in range(requests)]
        asyncio.run(run_load("127.0.0.1", port, wanted[:40], 4))
        began = time.perf_counter()
        latencies, statuses = asyncio.run(run_load("127.0.0.1", port, wanted, clients))
        elapsed = time.perf_counter() - began
        return {"served clients": clients, "served ready s": ready_s, "served ok": statuses.count(200),
                "served p50 ms": 1000 * percentile(latencies, 50), "served p99 ms": 1000 * percentile(latencies, 99),
                "served req/s": len(latencies) / elapsed}
    finally:
        server.terminate()
        server.wait(timeout=30)


def profile_batch(retriever, questions: list[str]) -> dict:
    """Where one batch of queries spends its time: tokenizing, scoring (the pruned top-k), passage lookup; and
    how much of the query terms' postings the pruning read in full."""
    import numpy as np

    started = time.perf_counter()
    tokens = [t for t in retriever.tokenize(questions) if t]
    tokenize_s = time.perf_counter() - started
    pruned = retriever.pruned
    scanned, searched = pruned.postings_scanned, pruned.terms_searched
    started = time.perf_counter()
    ranked = [pruned.top_k(t, 10)[0] for t in tokens]
    score_s = time.perf_counter() - started
    started = time.perf_counter()
    for rows in ranked:
        for row in rows:
            retriever.store.get(int(row))
    lookup_s = time.perf_counter() - started
    total = tokenize_s + score_s + lookup_s
    df = getattr(pruned, "df", None)  # the packed index keeps document frequencies; the CSC its column bounds
    df = np.diff(pruned.indptr) if df is None else df
    postings = sum(int(df[t]) for ids in tokens for t in set(ids))
    return {"profile tokenize %": 100 * tokenize_s / total, "profile score %": 100 * score_s / total,
            "profile lookup %": 100 * lookup_s / total,
            "query terms' postings per query": postings / len(tokens),
            "postings read in full per query": (pruned.postings_scanned - scanned) / len(tokens),
            "terms only looked up per query": (pruned.terms_searched - searched) / len(tokens)}


def gold_recall(retriever, sample: Path, questions: list[dict], k: int = 10) -> dict | None:
    """Recall@k of HotPotQA's supporting passages among all N, when the corpus starts with the sample's own
    abstracts (as `synthetic_corpus` writes it): passage i is sample abstract i."""
    titles = {json.loads(line)["title"]: str(i) for i, line in enumerate(open(sample, encoding="utf-8"))}
    first = retriever.store.get(0)
    if first.title != next(iter(titles)) or len(retriever) < len(titles):
        return None
    found = wanted = 0
    for question, ranked in zip(questions, retriever.batch([q["question"] for q in questions], k)):
        gold = {titles[t] for t in question["supporting_titles"] if t in titles}
        wanted += len(gold)
        found += len(gold & {p.pid for p in ranked})
    return {f"gold recall@{k} at N": found / max(1, wanted)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--workdir", default=None,
                        help="where the corpus and index go, kept afterwards (default: a temp dir, removed)")
    parser.add_argument("--index", default=None, help="measure an index built earlier (skips generate/build)")
    parser.add_argument("--keep-names", type=float, default=0.02,
                        help="chance a resampled passage keeps the sample's names (1: plain resampling, every "
                             "question term ~300x as frequent as in the sample at 5.2M)")
    parser.add_argument("--no-serve", action="store_true")
    parser.add_argument("--format", default="csc", choices=("csc", "packed"),
                        help="the index format to build (an --index is measured in its own format)")
    parser.add_argument("--corpus", default=None,
                        help="a corpus of the scale model written earlier (e.g. the first N lines of a larger one) "
                             "instead of generating one; never deleted")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the side-by-side runs")
    parser.add_argument("--numpy-questions", type=int, default=100,
                        help="questions for the numpy rows of the side by side (bm25s numpy: ~4 q/s at 5.2M)")
    parser.add_argument("--no-anchor", action="store_true", help="skip the side by side with bm25s")
    parser.add_argument("--serve-only", action="store_true", help="with --index: only the served p99")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragzoo.paths import data_root
    data = data_root()
    rows = [json.loads(line) for line in open(data / QUESTIONS)][:args.questions]
    questions = [row["question"] for row in rows]
    row: dict = {"docs": args.docs, "questions": len(questions)}
    if args.index:
        row["docs"] = json.loads((Path(args.index) / "meta.json").read_text())["num_docs"]
    if args.index and args.serve_only:
        row.update(_serve_p99(args.index, questions, str(Path(args.index).parent)))
        print(json.dumps(row, indent=2), flush=True)
        write_json(args.out, row)
        return 0
    anchor = None if args.no_anchor else {"rounds": args.rounds, "numpy_questions": args.numpy_questions}
    if args.index:
        row.update(_measure(args.index, rows, args.no_serve, str(Path(args.index).parent), anchor))
        print(json.dumps(row, indent=2), flush=True)
        write_json(args.out, row)
        return 0
    keep = contextlib.nullcontext(args.workdir) if args.workdir else tempfile.TemporaryDirectory(prefix="ragzoo-scale-")
    with keep as scratch:
        tmp = Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        if args.corpus:
            corpus = Path(args.corpus)
            row["corpus"] = str(corpus)
        else:
            corpus = tmp / f"wiki17_like_{args.docs}.jsonl"
            started = time.perf_counter()
            row.update(synthetic_corpus(data / DEFAULT_CORPUS, corpus, args.docs, keep_names=args.keep_names))
            row["generate s"] = time.perf_counter() - started
        row["corpus MB"] = corpus.stat().st_size / 2**20
        print(json.dumps(row), flush=True)
        cache = str(tmp / "cache")
        (build_s, folder, num_docs), rss = in_child(_build, str(corpus), cache, args.format)
        row.update({"format": args.format, "docs": num_docs, "build s": build_s, "build peak RSS MB": rss,
                    "build load": load_average(),
                    "index MB": sum(f.stat().st_size for f in Path(folder).iterdir()) / 2**20})
        print(json.dumps(row), flush=True)
        if not args.corpus:
            corpus.unlink()  # the passages live in the index; free the disk
        row["index"] = folder
        row.update(_measure(folder, rows, args.no_serve, cache, anchor))
        row["targets"] = {"build peak RSS MB <= 4096": row["build peak RSS MB"] <= 4096,
                          "build s <= 600": row["build s"] <= 600, "load s <= 5": row["load s"] <= 5,
                          "q/s numpy >= 21 (bm25s, 5.23M)": row["QPS numpy batch"] >= 21,
                          "q/s numba >= 47 (bm25s, 5.23M)": row["QPS numba batch"] >= 47}
        print(json.dumps(row, indent=2), flush=True)
        write_json(args.out, row)
    return 0


def _measure(folder: str, rows: list[dict], no_serve: bool, cache: str, anchor: dict | None = None) -> dict:
    questions = [row["question"] for row in rows]
    (row, query_rss) = in_child(_query, folder, rows)
    row["query peak RSS MB"] = query_rss
    print(json.dumps(row), flush=True)
    if anchor is not None:
        (table, flat), _rss = in_child(_anchor, folder, questions, cache, anchor["rounds"], anchor["numpy_questions"])
        docs = json.loads((Path(folder) / "meta.json").read_text())["num_docs"]
        print_table(f"ragzoo bm25 vs bm25s retrieve on the same index, {docs:,} passages, end to end "
                    f"from query strings, k=10, one thread, medians of {anchor['rounds']} interleaved rounds "
                    f"({flat['side by side load']})", table)
        print_table("CPU per question, one question per call (us, best of 3)",
                    cpu_rows(flat))
        row.update(flat)
    if not no_serve:
        row.update(_serve_p99(folder, questions, cache))
    return row


def _anchor(folder: str, questions: list[str], cache: str, rounds: int, numpy_questions: int):
    """The side by side with bm25s (in its own process: both scorers' memory maps, not the earlier runs')."""
    index_format = json.loads((Path(folder) / "meta.json").read_text()).get("index_format", "csc")
    csc_dir = Path(folder)
    flat: dict = {}
    if index_format != "csc":
        from ragzoo.retrieval import bm25_packed

        csc_dir = Path(cache) / f"{Path(folder).name}.bm25s-csc"
        if not (csc_dir / "params.index.json").exists():
            started = time.perf_counter()
            bm25_packed.to_csc(Path(folder), csc_dir)
            flat["csc export s"] = time.perf_counter() - started
    # a packed index scores with numba whatever the backend: its numpy rows would repeat the numba ones
    table, measured = side_by_side(Path(folder), questions, csc_dir=csc_dir, rounds=rounds,
                                   numpy_questions=numpy_questions, label=f"{index_format} ",
                                   backends=("numba", "numpy") if index_format == "csc" else ("numba",))
    flat.update(measured)
    return table, flat


def _build(corpus: str, cache: str, index_format: str = "csc"):
    os.environ["RAGZOO_CACHE"] = cache
    from ragzoo.retrieval.bm25 import ensure_bm25_index

    started = time.perf_counter()
    formatted = {} if index_format == "csc" else {"index_format": index_format}
    folder, meta, _ = ensure_bm25_index(Path(corpus), show_progress=False, rebuild=True, **formatted)
    return time.perf_counter() - started, str(folder), meta["num_docs"]


def _query(folder: str, rows: list[dict]) -> dict:
    import numpy as np

    from ragzoo.paths import data_root
    from ragzoo.retrieval.bm25 import BM25Retriever

    questions = [row["question"] for row in rows]
    started = time.perf_counter()
    retriever = BM25Retriever(Path(folder), check_stale=False, backend="numpy")
    load_s = time.perf_counter() - started
    out = {"load s": load_s}
    retriever.warm_up()  # as `ragzoo serve` does before /health says ready: MADV_WILLNEED and a few searches
    retriever.batch(questions[:5], 10)
    out["QPS numpy single"] = qps(lambda q: retriever.batch(q, 10), questions[:100], False)
    out["QPS numpy batch"] = qps(lambda q: retriever.batch(q, 10), questions, True)
    out.update(profile_batch(retriever, questions[:100]))
    out.update(gold_recall(retriever, data_root() / DEFAULT_CORPUS, rows) or {})
    started = time.perf_counter()
    fast = BM25Retriever(Path(folder), check_stale=False, backend="numba")
    fast.batch(questions[:2], 10)
    out["numba warm-up s"] = time.perf_counter() - started
    out["QPS numba single"] = qps(lambda q: fast.batch(q, 10), questions, False)
    out["QPS numba batch"] = qps(lambda q: fast.batch(q, 10), questions, True)
    two = BM25Retriever(Path(folder), check_stale=False, backend="numba", n_threads=2)
    out["QPS numba batch, 2 threads"] = qps(lambda q: two.batch(q, 10), questions, True)
    same = sum([p.pid for p in a] == [p.pid for p in b]
               for a, b in zip(retriever.batch(questions[:100], 10), fast.batch(questions[:100], 10)))
    out["numba == numpy top-10 (of 100)"] = same
    exhaustive = 0
    if retriever.model is None:  # a packed index: the side by side compares every question with bm25s
        return out
    for ids, ranked in zip(retriever.tokenize(questions[:20]), retriever.batch(questions[:20], 10)):
        _rows, scores = retriever.model.retrieve([ids], k=10, show_progress=False)  # bm25s, every posting
        expected = [s for s in scores[0] if s > 0]
        ours = [p.score for p in ranked]
        exhaustive += len(ours) == len(expected) and bool(np.allclose(ours, expected, rtol=1e-5))
    out["pruned == bm25s exhaustive top-10 scores (of 20)"] = exhaustive
    return out


if __name__ == "__main__":
    sys.exit(main())
