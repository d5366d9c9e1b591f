"""End-to-end check of the local colbert-ai backend on CPU, with timings.

    python benchmarks/colbert_local_check.py [--passages 200] [--work DIR]

Writes an untrained tiny BERT checkpoint (no ColBERTv2 checkpoint can be downloaded here), indexes the
first N passages of the wiki17 sample with colbert-ai (PLAID, 2-bit residuals), loads the index through
`colbert:<dir>` and searches it. Rankings are meaningless (random weights): "self@5" only shows that
a passage's own title tends to find it. Needs the extra `ragzoo[colbert]` (colbert-ai, transformers<5).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--work", default=None, help="working folder (default: a new temp folder)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    from ragzoo.paths import data_root
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.colbert_local import build_colbert_index, make_random_checkpoint

    work = Path(args.work or tempfile.mkdtemp(prefix="ragzoo-colbert-"))
    work.mkdir(parents=True, exist_ok=True)
    source = data_root() / "hotpotqa" / "corpus_wiki17_abstracts.jsonl"
    with open(source, encoding="utf-8") as handle:
        lines = list(itertools.islice(handle, args.passages))
    corpus = work / "corpus.jsonl"
    corpus.write_text("".join(lines), encoding="utf-8")
    rows = [json.loads(line) for line in lines]

    timings: dict[str, float] = {}
    started = time.perf_counter()
    checkpoint = make_random_checkpoint(work / "checkpoint", (f"{row['title']} {row['text']}" for row in rows))
    timings["checkpoint"] = time.perf_counter() - started

    started = time.perf_counter()
    meta = build_colbert_index(corpus, work / "index", str(checkpoint), show_progress=False)
    timings["index build"] = time.perf_counter() - started

    started = time.perf_counter()
    retriever = make_retriever(f"colbert:{work / 'index'}")
    timings["index load"] = time.perf_counter() - started

    queries = [row["title"] for row in rows[:50]]
    started = time.perf_counter()
    results = [retriever(query, 5) for query in queries]
    timings["search (per query)"] = (time.perf_counter() - started) / len(queries)
    self_hits = sum(row["id"] in {p.pid for p in found} for row, found in zip(rows, results))

    print(f"\nwork folder: {work}")
    print(f"indexed {meta['num_docs']} passages into {meta['index']}")
    print(f"top-3 for {queries[0]!r}: {[p.title for p in results[0][:3]]}")
    print(f"self@5 (own title finds the passage, untrained model): {self_hits}/{len(queries)}")
    print("note: first use on a machine includes compiling colbert-ai's C++ extensions "
          "(build: segmented_maxsim; load: segmented_lookup, filter_pids, decompress_residuals)")
    for name, seconds in timings.items():
        print(f"  {name:<20} {seconds:8.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
