"""Regenerate the demo data slice shipped in `ragzoo/demo_data/` from the full benchmark data folder.

    python tools/build_demo_data.py                       # reads $RAGZOO_DATA, else ../shared/data
    python tools/build_demo_data.py --source /path/to/data

The slice is what a clone without the full data runs on (`make demo`, most tests): the same layout and the
same file names as `RAGZOO_DATA`, each file a subset of the original's lines, copied byte for byte and in the
original order, so every loader reads it unchanged and a paper's "first n" split stays a prefix. Which lines:

- question files: the first lines of each (and the first ActiveRAG rows of `2wikimultihopqa/dev.jsonl`, so
  both of its splits are present; and the first HotPotQA train rows without paragraphs, which are 40 times
  smaller); `hotpotqa/dev_distractor.jsonl`: the rows of the
  first HotPotQA dev questions (their gold titles and distractor paragraphs);
- `hotpotqa/corpus_wiki17_abstracts.jsonl`: the abstracts of the gold supporting titles of the sliced dev and
  train questions, the distractor paragraphs of the first dev questions, and the titles the README's examples
  ask about;
- `wiki18_passages/corpus.jsonl`: the passages ActiveRAG retrieved for the sliced ActiveRAG questions (by
  title), then the first lines up to a cap; `2wikimultihopqa/corpus.jsonl`: paragraphs whose title a sliced
  question names, then the first lines up to a cap.

Deterministic: the same source gives byte-identical files. `SOURCES.md` (with the licences) is written beside.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "ragzoo" / "demo_data"

# file -> number of leading lines kept (question files). A dataset's compile split keeps at least 110 questions
# beyond its evaluation split, so a default compile (50 training + 50 validation questions) runs on the slice.
HEAD = {
    "hotpotqa/dev.jsonl": 100,
    "hotpotqa/train.jsonl": 10,
    "hotpotqa/dev_ircot500.jsonl": 10,
    "2wikimultihopqa/dev.jsonl": 40,
    "strategyqa/train.jsonl": 140,
    "strategyqa/train_first500.jsonl": 30,
    "nq_open/dev.jsonl": 60,
    "nq_open/efficientqa_dev.jsonl": 110,
    "nq_open/efficientqa_test.jsonl": 20,
    "nq_open/dev_activerag500.jsonl": 20,
    "triviaqa/dev.jsonl": 60,
    "triviaqa/dpr_dev_from_train.jsonl": 110,
    "triviaqa/dev_activerag500.jsonl": 20,
    "squad_open/dev.jsonl": 110,
    "webquestions/train.jsonl": 110,
    "webquestions/dev.jsonl": 20,
    "webquestions/test.jsonl": 40,
    "popqa/test.jsonl": 40,
    "popqa/test_activerag500.jsonl": 20,
}
ACTIVERAG_2WIKI = 20        # ActiveRAG rows of 2wikimultihopqa/dev.jsonl kept after its first rows
PLAIN_TRAIN = 110           # HotPotQA train rows without paragraphs kept after its first rows (which have them)
DISTRACTOR_QUESTIONS = 40   # HotPotQA dev questions whose dev_distractor rows are kept
DISTRACTOR_PARAGRAPHS = 20  # ... of which the first this many bring their distractor paragraphs into the corpus
WIKI18_CAP = 200
WIKI2_CAP = 150
EXAMPLE_TITLES = ("Ed Wood", "Scott Derrickson", "Alan Turing")  # asked about in the README and the demo

SOURCES = """# The demo data slice

A small subset of the benchmark data ragzoo's loaders read (`RAGZOO_DATA`), shipped so that a clone or an
installed package anywhere runs `make demo` (and the tests that need only some data) with nothing else. It is
used only when no full data folder is found (`RAGZOO_DATA`, then `../shared/data` beside the checkout, then
`~/.ragzoo/data`). Every file is a subset of the lines of the file of the same name in the full data folder,
copied unchanged; `tools/build_demo_data.py` regenerates it. Figures measured on it say nothing about the
benchmarks: it is far too small and its corpus holds the gold passages of its questions.

## Files

| file | lines | of |
|---|---|---|
{rows}

## Sources and licences

The texts keep the licences of the releases they come from; the slice is redistributed under the same terms
(share-alike where the source is CC BY-SA). The full data folder's `SOURCES.md` and `raw/MANIFEST.tsv` list
the exact repository, path, commit and sha256 of each original file.

| data | from | licence |
|---|---|---|
| HotPotQA questions, supporting facts, distractor paragraphs | hotpotqa.github.io (Yang et al. 2018), via the ReAct, RPT, IRCoT, ECM and HippoRAG repositories | CC BY-SA 4.0 |
| 2017 Wikipedia abstracts (`corpus_wiki17_abstracts.jsonl`) | HotPotQA's processed Wikipedia (the ColBERTv2 `wiki17_abstracts` collection) | CC BY-SA (Wikipedia text) |
| December 2018 Wikipedia passages (`wiki18_passages`) | DPR / FlashRAG `wiki18_100w`, ActiveRAG's retrieved passages | CC BY-SA (Wikipedia text) |
| 2WikiMultihopQA questions and paragraphs | github.com/Alab-NII/2wikimultihop (Ho et al. 2020), via R1-Searcher, HippoRAG and ActiveRAG | Apache 2.0 (questions); CC BY-SA (Wikipedia text) |
| StrategyQA | allenai.org/data/strategyqa (Geva et al. 2021), via eladsegal/strategyqa | MIT |
| NQ-open, EfficientQA | google-research-datasets/natural-questions (Kwiatkowski et al. 2019; Lee et al. 2019) | CC BY-SA 3.0 |
| TriviaQA | nlp.cs.washington.edu/triviaqa (Joshi et al. 2017), DPR's splits via castorini/anserini-tools | Apache 2.0 |
| SQuAD v1.1 | rajpurkar.github.io/SQuAD-explorer (Rajpurkar et al. 2016) | CC BY-SA 4.0 |
| WebQuestions | Berant et al. 2013, GenRead's copy (wyu97/GenRead) | CC BY 4.0 |
| PopQA | akariasai/PopQA (Mallen et al. 2023), FlashRAG's subsample | MIT |
| ActiveRAG's 500-question samples with retrieved passages | OpenMatch/ActiveRAG | MIT (code repository); the texts keep the licences above |
"""


def _lines(path: Path) -> list[bytes]:
    with open(path, "rb") as handle:
        return [line if line.endswith(b"\n") else line + b"\n" for line in handle if line.strip()]


def build(source: Path, out: Path) -> dict[str, tuple[int, int]]:
    chosen: dict[str, list[bytes]] = {}
    totals: dict[str, int] = {}

    def keep(name: str, lines: list[bytes], total: int) -> None:
        chosen[name], totals[name] = lines, total

    for name, count in HEAD.items():
        lines = _lines(source / name)
        head = lines[:count]
        if name == "2wikimultihopqa/dev.jsonl":
            head += [line for line in lines[count:] if b'"activerag:' in line][:ACTIVERAG_2WIKI]
        if name == "hotpotqa/train.jsonl":
            head += [line for line in lines[count:] if b'"contexts"' not in line][:PLAIN_TRAIN]
        keep(name, head, len(lines))

    # HotPotQA: the dev_distractor rows of the first dev questions, in dev_distractor's order
    dev_ids = [json.loads(line)["id"] for line in chosen["hotpotqa/dev.jsonl"]]
    distractor_lines = _lines(source / "hotpotqa/dev_distractor.jsonl")
    by_id = {json.loads(line)["id"]: line for line in distractor_lines}
    wanted = set(dev_ids[:DISTRACTOR_QUESTIONS])
    keep("hotpotqa/dev_distractor.jsonl",
         [line for line in distractor_lines if json.loads(line)["id"] in wanted], len(distractor_lines))

    titles: set[str] = set(EXAMPLE_TITLES)
    for position, qid in enumerate(dev_ids):
        row = json.loads(by_id[qid]) if qid in by_id else {}
        titles.update(row.get("supporting_titles") or [])
        if position < DISTRACTOR_PARAGRAPHS:
            titles.update(context["title"] for context in row.get("contexts") or [])
    for name in ("hotpotqa/train.jsonl", "hotpotqa/dev_ircot500.jsonl"):
        for line in chosen[name]:
            titles.update(json.loads(line).get("supporting_titles") or [])
    corpus_lines = _lines(source / "hotpotqa/corpus_wiki17_abstracts.jsonl")
    keep("hotpotqa/corpus_wiki17_abstracts.jsonl",
         [line for line in corpus_lines if json.loads(line)["title"] in titles], len(corpus_lines))

    # wiki18: the passages ActiveRAG retrieved for the sliced questions, then the first lines up to the cap
    retrieved = set()
    for name in ("nq_open/dev_activerag500.jsonl", "triviaqa/dev_activerag500.jsonl",
                 "popqa/test_activerag500.jsonl", "2wikimultihopqa/dev.jsonl"):
        for line in chosen[name]:
            retrieved.update(passage.get("title") for passage in json.loads(line).get("retrieved") or [])
    keep("wiki18_passages/corpus.jsonl", *_capped(_lines(source / "wiki18_passages/corpus.jsonl"),
                                                   lambda row: row["title"] in retrieved, WIKI18_CAP))

    questions = " ".join(json.loads(line)["question"] for line in chosen["2wikimultihopqa/dev.jsonl"])
    keep("2wikimultihopqa/corpus.jsonl", *_capped(_lines(source / "2wikimultihopqa/corpus.jsonl"),
                                                  lambda row: len(row["title"]) > 3 and row["title"] in questions,
                                                  WIKI2_CAP))

    out.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name in sorted(chosen):
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(chosen[name])
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        sizes[name] = (len(chosen[name]), totals[name])
    rows = "\n".join(f"| `{name}` | {kept} | {total} |" for name, (kept, total) in sizes.items())
    (out / "SOURCES.md").write_text(SOURCES.format(rows=rows), encoding="utf-8")
    return sizes


def _capped(lines: list[bytes], wanted, cap: int) -> tuple[list[bytes], int]:
    """The lines `wanted` picks (up to `cap`), then the first other lines up to `cap`, in file order."""
    rows = [json.loads(line) for line in lines]
    picked = [i for i, row in enumerate(rows) if wanted(row)][:cap]
    taken = set(picked)
    picked += [i for i in range(len(rows)) if i not in taken][:max(0, cap - len(picked))]
    return [lines[i] for i in sorted(picked)], len(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("RAGZOO_DATA") or str(REPO.parent / "shared" / "data")
    parser.add_argument("--source", default=default, help="the full data folder (default: $RAGZOO_DATA, else "
                                                          "../shared/data)")
    parser.add_argument("--out", default=str(OUT), help="where the slice goes")
    args = parser.parse_args(argv)
    source, out = Path(args.source).expanduser().resolve(), Path(args.out).expanduser().resolve()
    if not (source / "hotpotqa" / "corpus_wiki17_abstracts.jsonl").is_file():
        print(f"build_demo_data: error: {source} is not the full data folder (no "
              f"hotpotqa/corpus_wiki17_abstracts.jsonl); pass --source", file=sys.stderr)
        return 2
    if source == out:
        print("build_demo_data: error: --source is the slice itself", file=sys.stderr)
        return 2
    sizes = build(source, out)
    total = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    for name, (kept, of) in sizes.items():
        print(f"{name}: {kept} of {of} lines")
    print(f"{out}: {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
