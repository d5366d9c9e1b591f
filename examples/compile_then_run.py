"""Compile BlendFilter on HotPotQA with BootstrapFewShot, save it, load it back, evaluate it.

Offline (no LM; retrieval real, answers placeholders, calls and tokens counted):
    python examples/compile_then_run.py --lm dry-run
For real (key from the environment):
    OPENAI_API_KEY=... python examples/compile_then_run.py --lm openai/gpt-4o-mini
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import dspy

import ragzoo
from ragzoo import data
from ragzoo import programs
from ragzoo.lm import describe_lm, is_dry_run, make_lm
from ragzoo.optimizers import compile_program
from ragzoo.retrieval import make_retriever
from ragzoo.retrieval.specs import DEFAULT_RETRIEVER
from ragzoo.runs import evaluate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lm", default="dry-run")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--method", default="blendfilter")
    parser.add_argument("--retriever", default=DEFAULT_RETRIEVER)
    parser.add_argument("--train-n", type=int, default=20)
    parser.add_argument("--dev-n", type=int, default=10)
    parser.add_argument("--eval-n", type=int, default=20)
    parser.add_argument("--out", default="demo_out/compile_then_run")
    args = parser.parse_args(argv)

    out = Path(args.out)  # its program/ and run/ are replaced on a rerun; ragzoo refuses folders it did not write
    lm = make_lm(args.lm, api_base=args.api_base)
    retriever = make_retriever(args.retriever)
    pool = data.load("hotpotqa", "train", n=args.train_n + args.dev_n, seed=0)
    train, dev = pool[:args.train_n], pool[args.train_n:]
    questions = data.load("hotpotqa", "dev_first500", n=args.eval_n)

    program = programs.get(args.method, retriever=retriever)
    with dspy.context(lm=lm):
        result = compile_program(program, trainset=train, valset=dev, optimizer="bootstrap", metric="em")
    demos = {name: len(predictor.demos) for name, predictor in result.program.named_predictors()}
    print(f"compiled {args.method}: demos per predictor {demos}")
    for stage in result.stages:
        print(f"  {stage.stage}: {stage.usage.lm_calls} LM calls, {stage.usage.prompt_tokens} prompt tokens, "
              f"${stage.usage.cost:.4f}")

    artifact = ragzoo.save(result.program, out / "program", method=args.method, dataset="hotpotqa", split="train",
                           optimizer="bootstrap", metric="em", score=result.score, lm=describe_lm(lm),
                           overwrite=True)
    reloaded = ragzoo.load(artifact, retriever=retriever)
    print(f"saved and reloaded {artifact}")

    with dspy.context(lm=lm):
        summary = evaluate(reloaded, questions, ["em", "f1"], out / "run", threads=4, progress=False, force=True)
    usage = summary["usage"]
    if is_dry_run(lm):
        print("metrics: n/a (dry-run: placeholder answers)")
    else:
        print("metrics:", json.dumps(summary["metrics"]))
    print(f"{summary['n']} questions, {usage['lm_calls_per_question']:.2f} LM calls and "
          f"{usage['tokens_per_question']:.0f} tokens per question, {summary['failures']} failures")
    return 0


if __name__ == "__main__":
    from ragzoo.errors import RagzooError

    try:
        raise SystemExit(main())
    except RagzooError as error:  # a user's folder at --out, a bad --lm: one line, as the ragzoo command says it
        raise SystemExit(f"compile_then_run: error: {error}") from None
