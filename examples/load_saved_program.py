"""Load a compiled program saved by `ragzoo compile` (or examples/compile_then_run.py) and ask it questions.

    python examples/load_saved_program.py demo_out/blendfilter --lm dry-run "Who directed Ed Wood?"
"""

from __future__ import annotations

import argparse

import dspy

import ragzoo
from ragzoo.lm import make_lm


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact")
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--lm", default="dry-run")
    parser.add_argument("--api-base", default=None)
    args = parser.parse_args(argv)

    program = ragzoo.load(args.artifact)  # refuses edited, truncated or mismatched artifacts
    manifest = program.ragzoo_manifest
    print(f"{manifest['method']} compiled with {manifest.get('optimizer')} on {manifest.get('dataset')}")
    with dspy.context(lm=make_lm(args.lm, api_base=args.api_base)):
        for question in args.questions:
            prediction = program(question=question)
            titles = [passage.title for passage in getattr(prediction, "passages", [])]
            print(f"Q: {question}\nA: {prediction.answer}\n   from: {titles}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
