"""`ragzoo compile --dry-run` estimates against what a server receives, per optimizer.

For each optimizer: the dry-run estimate (`ragzoo compile --dry-run`: calls it says would be sent, i.e. its LM
calls minus those it counts as served from the response cache, and their prompt tokens; and its `--no-cache`
figure), then the same compile against the loopback stub server (`ragzoo.stubserver`), which counts the chat
requests it receives and the prompt tokens in them (cl100k, per message, as its `usage` reports). Each real
compile runs in a fresh process with an empty DSPy cache directory, as a first run would.

The stub answers every field with the same placeholders as the dry-run LM, and the questions' gold answer is
that placeholder, so every trace passes the metric in both runs: the comparison measures how well the estimate
models what is sent (the cache), not how a real model's answers would change the compile's path.

    python -m benchmarks.compile_estimates [--optimizers bootstrap,mipro:light,gepa:light,simba]
                                           [--train-n 8] [--dev-n 6] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

OPTIMIZERS = ("bootstrap", "mipro:light", "gepa:light", "simba")
TARGET = 0.15  # the tolerance: within ±15% of the calls and tokens the server receives


def _write_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    corpus, data = folder / "corpus.jsonl", folder / "questions.jsonl"
    with corpus.open("w") as out:
        for i in range(40):
            out.write(json.dumps({"id": str(i), "title": f"Topic {i}",
                                  "text": f"Topic {i} is a thing about subject {i}, first seen in year {1900 + i}."})
                      + "\n")
    from ragzoo.engines import placeholder_text

    with data.open("w") as out:  # the gold answer is what both the stub and the dry-run LM answer
        for i in range(n):
            out.write(json.dumps({"id": f"q{i}", "question": f"What is topic {i} about?",
                                  "answers": [placeholder_text("answer")]}) + "\n")
    return corpus, data


def _compile(argv: list[str], env: dict) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ragzoo.cli", "compile", *argv], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(f"compile {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.returncode, done.stdout, time.perf_counter() - started


def parse_table(stdout: str) -> dict:
    """The figures of `print_stages`: total calls, calls from the cache, prompt/completion tokens, and the
    `--no-cache` line's calls and prompt tokens when it is printed."""
    import re

    figures: dict = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 7 and words[0] == "total":
            calls, cached, prompt, completion = (int(w) for w in words[2:6])
            figures.update(calls=calls, cached=cached, sent=calls - cached, prompt_tokens=prompt,
                           completion_tokens=completion)
        match = re.search(r"Without the cache \(--no-cache\): (\d+) calls sent, (\d+) prompt", line)
        if match:
            figures.update(no_cache_calls=int(match.group(1)), no_cache_prompt_tokens=int(match.group(2)))
    figures.setdefault("no_cache_calls", figures.get("calls"))
    figures.setdefault("no_cache_prompt_tokens", figures.get("prompt_tokens"))
    return figures


def measure(optimizer: str, train_n: int, dev_n: int, folder: Path, method: str = "rag") -> dict:
    from ragzoo.engines import approx_tokens
    from ragzoo.stubserver import StubLMServer, adapter_responder

    corpus, data = _write_inputs(folder, train_n + dev_n)
    common = ["--method", method, "--data", str(data), "--train-n", str(train_n), "--dev-n", str(dev_n),
              "--optimizer", optimizer, "--retriever", f"bm25:{corpus}"]
    env = {**os.environ, "DSPY_CACHEDIR": tempfile.mkdtemp(prefix="dspy-cache-", dir=folder),
           "RAGZOO_CACHE": str(folder / "ragzoo-cache")}
    _, dry, dry_seconds = _compile([*common, "--dry-run", "--lm", "openai/gpt-4o-mini"], env)
    estimate = parse_table(dry)

    received = {"prompt_tokens": 0}
    lock = threading.Lock()

    def counting(messages, body=None):
        tokens = sum(approx_tokens(m.get("content") or "") for m in messages if isinstance(m, dict))
        with lock:
            received["prompt_tokens"] += tokens
        return adapter_responder(messages, body)

    with StubLMServer(counting) as server:
        _, real, real_seconds = _compile([*common, "--lm", "openai/stub-model", "--api-base",
                                          server.base_url + "/v1", "--out", str(folder / f"art-{optimizer}")], env)
        received["calls"] = server.requests
    used = parse_table(real)
    return {"optimizer": optimizer, "train_n": train_n, "dev_n": dev_n, "estimate": estimate, "received": received,
            "compile_reported": used, "seconds": {"dry_run": round(dry_seconds, 1), "real": round(real_seconds, 1)}}


def _off(estimate: float, actual: float) -> float:
    return (estimate - actual) / actual if actual else float("inf") if estimate else 0.0


def table(rows: list[dict]) -> str:
    from benchmarks.common import markdown_table

    lines = []
    for row in rows:
        e, r = row["estimate"], row["received"]
        calls_off, tokens_off = _off(e["sent"], r["calls"]), _off(e["prompt_tokens"], r["prompt_tokens"])
        ok = abs(calls_off) <= TARGET and abs(tokens_off) <= TARGET
        lines.append([row["optimizer"], e["sent"], r["calls"], f"{calls_off:+.0%}", e["prompt_tokens"],
                      r["prompt_tokens"], f"{tokens_off:+.0%}", e["no_cache_calls"], e["no_cache_prompt_tokens"],
                      f"{row['compile_reported'].get('cached', 0)}/{row['compile_reported'].get('calls', 0)}",
                      "met" if ok else "MISSED"])
    return markdown_table(["optimizer", "est. calls sent", "calls received", "calls off", "est. prompt tok",
                           "prompt tok received", "tok off", "est. --no-cache calls", "est. --no-cache prompt tok",
                           "real run: from cache/calls", f"±{TARGET:.0%}"], lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    parser.add_argument("--method", default="rag")
    parser.add_argument("--train-n", type=int, default=8)
    parser.add_argument("--dev-n", type=int, default=6)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="compile-estimates-") as tmp:
        for optimizer in [name.strip() for name in args.optimizers.split(",") if name.strip()]:
            folder = Path(tmp) / optimizer.replace(":", "-")
            folder.mkdir()
            row = measure(optimizer, args.train_n, args.dev_n, folder, args.method)
            rows.append(row)
            print(f"{optimizer}: estimate {row['estimate']}, received {row['received']}, {row['seconds']}",
                  file=sys.stderr, flush=True)
    print(f"compile estimates vs requests received ({args.method}, train {args.train_n}, dev {args.dev_n}; "
          f"stub server, fresh DSPy cache)")
    print(table(rows))
    if args.out:
        from benchmarks.common import write_json

        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
