"""A packed bm25 index against an exhaustive scorer written independently of its kernel: load time, q/s one
question at a time (first sight, then warm) and the top 10 of N HotPotQA questions compared, rows and score bits.

The reference decodes every posting of every query term from the packed words (its own bit reading, not the
kernel's), sums the same float32 weights (idf * tf / (norm + tf), times the term's repeats) densely in the kernel's
term order (rarest first), and ranks by (score desc, row asc). Used once for issue 24 on the 21M-passage index:

    python -m benchmarks.exhaustive_check /big/disk/index_packed --questions 1000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np


def exhaustive(terms, reps, words, block_last, block_offset, block_widths, term_first, df, idf, norm, acc, touched):
    n_touched = 0
    for q in range(len(terms)):
        t = terms[q]; rep = reps[q]
        first = term_first[t]; n = df[t]; nblocks = (n + 127) // 128
        for j in range(nblocks):
            b = first + j
            count = min(128, n - j * 128)
            wd = np.int64(block_widths[b, 0]); wt = np.int64(block_widths[b, 1])
            at = block_offset[b]; at_tf = at + (count * wd + 31) // 32
            doc = np.int64(-1) if j == 0 else np.int64(block_last[b - 1])
            for i in range(count):
                g = np.int64(0)
                if wd:
                    bit = i * wd
                    lo = np.uint64(words[at + (bit >> 5)]); hi = np.uint64(words[at + (bit >> 5) + 1])
                    g = np.int64(((lo | (hi << np.uint64(32))) >> np.uint64(bit & 31)) & ((np.uint64(1) << np.uint64(wd)) - np.uint64(1)))
                doc += g + 1
                tf = np.int64(0)
                if wt:
                    bit = i * wt
                    lo = np.uint64(words[at_tf + (bit >> 5)]); hi = np.uint64(words[at_tf + (bit >> 5) + 1])
                    tf = np.int64(((lo | (hi << np.uint64(32))) >> np.uint64(bit & 31)) & ((np.uint64(1) << np.uint64(wt)) - np.uint64(1)))
                tff = np.float32(tf + 1)
                w = (idf[t] * (tff / (norm[doc] + tff))) * rep
                if acc[doc] == 0:
                    touched[n_touched] = doc; n_touched += 1
                acc[doc] += w
    return n_touched


_COMPILED = {}


def _exhaustive(*args):
    if not _COMPILED:
        import numba

        _COMPILED["exhaustive"] = numba.njit(cache=True)(exhaustive)
    return _COMPILED["exhaustive"](*args)


def measure(index: Path, questions: list[str]) -> dict:
    from ragzoo.retrieval.bm25 import BM25Retriever

    out: dict = {"questions": len(questions),
                 "index GiB": sum(f.stat().st_size for f in index.iterdir() if f.is_file()) / 2**30}
    started = time.perf_counter()
    retriever = BM25Retriever(index, check_stale=False, backend="numba")
    out["load s"] = time.perf_counter() - started
    retriever.batch(questions[:1], 10)  # numba's compile, or its disk cache
    for label in ("first sight", "warm"):
        wall, cpu = time.perf_counter(), time.process_time()
        for question in questions:
            retriever.batch([question], 10)
        out[f"q/s single, {label}"] = len(questions) / (time.perf_counter() - wall)
        out[f"CPU ms a question, {label}"] = 1000 * (time.process_time() - cpu) / len(questions)
    print(json.dumps(out), flush=True)
    kernel = retriever.pruned
    acc = np.zeros(kernel.num_docs, dtype=np.float32)
    touched = np.empty(kernel.num_docs, dtype=np.int64)
    same_rows = same_scores = 0
    for ids in retriever.tokenize(questions):
        rows, scores = kernel.top_k(ids, 10)
        terms, repeats = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
        keep = (terms >= 0) & (terms < len(kernel.df))
        terms, repeats = terms[keep], repeats[keep]
        keep = kernel.df[terms] > 0
        terms, repeats = terms[keep], repeats[keep].astype(np.float32)
        order = np.argsort(kernel.df[terms], kind="stable")
        n = _exhaustive(terms[order], repeats[order], kernel.words, kernel.block_last, kernel.block_offset,
                        kernel.block_widths, kernel.term_first, kernel.df, kernel.idf, kernel.norm, acc, touched)
        reached = touched[:n]
        values = acc[reached]
        if len(values) > 200:  # the 10 best are among the 200 best (ties past 200 at the 10th place: none seen)
            best = np.argpartition(-values, 199)[:200]
            reached, values = reached[best], values[best]
        rank = np.lexsort((reached, -values))[:10]
        acc[touched[:n]] = 0
        same_rows += list(reached[rank]) == list(rows)
        same_scores += bool(np.array_equal(values[rank], scores))
    out.update({"top-10 rows identical": same_rows, "top-10 scores bit-identical": same_scores,
                "peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, help="a packed bm25 index folder")
    parser.add_argument("--questions", type=int, default=1000)
    args = parser.parse_args(argv)
    from ragzoo.paths import data_root

    rows = [json.loads(line) for line in open(data_root() / "hotpotqa" / "dev.jsonl", encoding="utf-8")]
    print(json.dumps(measure(args.index, [row["question"] for row in rows[:args.questions]]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
