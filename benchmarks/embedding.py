"""Dense embedding speed and quality per engine: passages/s of torch (sentence-transformers) vs onnx fp32
vs onnx int8 on the first N passages of the shipped wiki17 sample, and top-k agreement of dense retrieval
over those passages with the torch embeddings on HotPotQA dev questions (mean |top-k(engine) & top-k(torch)|
/ k). Targets (issue 15): >= 5x torch's passages/s, top-5 agreement >= 0.99. Needs `ragzoo[onnx]`.

    python -m benchmarks.embedding [--passages 2000] [--questions 500] [--repeat 2] [--out FILE]
                                   [--engines onnx,onnx-int8] [--no-torch-batch1]

Engines are timed in turns (torch, torch-b1, onnx, onnx-int8, repeated) so load from elsewhere on the
machine hits each alike; the best turn is reported. The one-off export + quantization time is reported
separately. Batching as each engine does it for a user: "torch" is `SentenceTransformer.encode` as ragzoo
calls it today (batches of 64, sorted longest first) and "speedup" is against it; the onnx engines run one
text per run (no padding, see `onnx_embed._batch_size`), so "torch-b1" (torch with that same batching) and
the "vs torch-b1" column give the like-for-like ratio too. Agreement is measured with each engine embedding
both questions and passages; "min/mean cos vs torch" compare passage embeddings directly.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

QUESTIONS = "hotpotqa/dev_distractor.jsonl"


class _Batch1:
    """torch with the onnx engines' batching (one text per run, no padding): the like-for-like baseline next
    to sentence-transformers' default (batches of 64, longest first), which is what a user gets today."""

    def __init__(self, model):
        self.model = model

    def encode(self, texts, **kwargs):
        return self.model.encode(texts, **{**kwargs, "batch_size": 1})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--out", default="")
    parser.add_argument("--engines", default="onnx,onnx-int8", help="onnx engines to compare with torch")
    parser.add_argument("--no-torch-batch1", action="store_true",
                        help="skip the second torch baseline (one text per batch, as the onnx engines run)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    import torch

    from ragzoo.paths import data_root
    from ragzoo.retrieval.corpus import iter_corpus
    from ragzoo.retrieval.dense import _encode, load_encoder
    from ragzoo.retrieval.specs import DEFAULT_CORPUS

    data = data_root()
    texts = [p.long_text for p in itertools.islice(iter_corpus(data / DEFAULT_CORPUS), args.passages)]
    questions = [json.loads(line)["question"] for line in itertools.islice(open(data / QUESTIONS), args.questions)]
    baselines = ("torch",) if args.no_torch_batch1 else ("torch", "torch-b1")
    engines = (*baselines, *[e for e in args.engines.split(",") if e and not e.startswith("torch")])
    setup = {}
    encoders = {}
    for engine in engines:
        started = time.perf_counter()
        encoders[engine] = _Batch1(load_encoder(engine="torch")) if engine == "torch-b1" else load_encoder(engine=engine)
        setup[engine] = time.perf_counter() - started
        _encode(encoders[engine], texts[:32])  # warm-up
    best: dict[str, float] = {engine: float("inf") for engine in engines}
    vectors = {}
    for _turn in range(args.repeat):
        for engine in engines:
            started = time.perf_counter()
            vectors[engine] = _encode(encoders[engine], texts)
            best[engine] = min(best[engine], time.perf_counter() - started)
    rows = []
    reference_top = None
    for engine in engines:
        queries = _encode(encoders[engine], questions)
        top = np.argsort(-(queries @ vectors[engine].T), axis=1)[:, :args.k]
        reference_top = top if reference_top is None else reference_top
        agreement = float(np.mean([len(set(a) & set(b)) / args.k for a, b in zip(top, reference_top)]))
        cosine = (vectors[engine] * vectors["torch"]).sum(axis=1)
        rows.append({"engine": engine, "passages/s": len(texts) / best[engine],
                     "speedup": best["torch"] / best[engine],
                     "vs torch-b1": best.get("torch-b1", float("nan")) / best[engine],
                     f"top-{args.k} agreement": agreement,
                     "min cos vs torch": float(cosine.min()), "mean cos vs torch": float(cosine.mean()),
                     "load/export s": setup[engine]})
    print(f"Dense embedding, {len(texts):,} wiki17 passages, {len(questions)} HotPotQA questions, "
          f"{os.cpu_count()} cores (torch threads {torch.get_num_threads()}); targets: speedup >= 5, "
          f"top-5 agreement >= 0.99")
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(f"{v:.1f}" if name in ("passages/s", "load/export s") else
                         f"{v:.2f}" if name in ("speedup", "vs torch-b1") else
                         f"{v:.4f}" if isinstance(v, float) else str(v)
                         for name, v in row.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"passages": len(texts), "questions": len(questions), "rows": rows},
                                             indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
