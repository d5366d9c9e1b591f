"""LM calls, retrievals and prompt tokens per question for every method and knob setting.

Dry-run LM (no model: type-valid placeholder answers, real prompts counted with tiktoken), the embedded
bm25 retriever over the wiki17 sample, the first N HotPotQA dev questions. Printed beside the LM calls
per question that each paper's structure implies.

    python -m benchmarks.calls [--n 50] [--out benchmarks/results/calls.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

# (method id, knobs, label). Ablations of the papers' tables are one knob each.
VARIANTS: list[tuple[str, dict, str]] = [
    ("direct", {}, ""),
    ("cot", {}, ""),
    ("rag", {}, ""),
    ("cot_rag", {}, ""),
    ("iter_retgen", {}, ""),
    ("self_ask", {}, ""),
    ("multihop", {}, ""),
    ("blendfilter", {}, ""),
    ("blendfilter", {"filter": False}, "no filter"),
    ("blendfilter", {"augmentations": ("external",)}, "external only"),
    ("blendfilter", {"augmentations": ("internal",)}, "internal only"),
    ("blendfilter", {"filter_mode": "union"}, "filter once over union"),
    ("blendfilter", {"answer_mode": "yes_no"}, "StrategyQA yes/no mode"),
    ("blendfilter", {"sampling": True}, "Fig. 5 sampling variant"),
    ("concat", {}, ""),
    ("postfusion", {}, ""),
    ("concat_pf", {}, ""),
    ("pf_concat", {}, ""),
    ("pruning", {}, ""),
    ("summary", {}, ""),
    ("concat", {"samples": 3}, "self-consistency, 3 samples"),
    ("filco", {}, ""),
    ("filco", {"k": 5}, "top-5 passages"),
    ("filco", {"granularity": "passage"}, "passage granularity"),
    ("filco", {"k": 5, "context": "full"}, "FULL: no filter"),
    ("activerag", {}, ""),
    ("activerag", {"agents": ("associate", "anchoring", "logician", "cognition")}, "all four agents"),
    ("activerag", {"knowledge": "passages"}, "CoT with passages"),
    ("activerag", {"knowledge": "notes"}, "CoT with notes"),
    ("raisf", {}, ""),
    ("raisf", {"use_relevance": False}, "no relevance model: decomposes"),
    ("raisf", {"relevance": "joint"}, "joint relevance call"),
    ("react", {}, ""),
    ("least_to_most", {}, ""),
    ("ircot", {}, ""),
    ("skr", {}, ""),
    ("replug", {}, ""),
    ("chain_of_note", {}, ""),
    ("self_rerank", {}, ""),
    ("self_refine", {}, ""),
    ("guideline", {}, ""),
]


def measure(method_id: str, knobs: dict, questions: list, retriever, lm) -> dict:
    import dspy

    from ragzoo import programs
    from ragzoo.tracing import trace_example

    program = programs.get(method_id, retriever=retriever, **knobs) if programs.info(method_id).uses_retrieval \
        else programs.get(method_id, **knobs)
    calls, retrievals, prompt_tokens, completion_tokens, failures = [], [], [], [], 0
    started = time.perf_counter()
    with dspy.context(lm=lm):
        for example in questions:
            history_before = len(lm.history)
            with trace_example() as trace:
                try:
                    program(question=example.question)
                except Exception:  # a placeholder path the program cannot take counts as a failure
                    failures += 1
            lm_calls = len(trace.lm_calls) or (len(lm.history) - history_before)
            calls.append(lm_calls)
            retrievals.append(len(trace.retrievals))
            prompt_tokens.append(trace.prompt_tokens or sum(
                (entry.get("usage") or {}).get("prompt_tokens", 0) for entry in lm.history[history_before:]))
            completion_tokens.append(trace.completion_tokens or sum(
                (entry.get("usage") or {}).get("completion_tokens", 0) for entry in lm.history[history_before:]))
    elapsed = time.perf_counter() - started
    return {
        "lm_calls": statistics.mean(calls), "lm_calls_max": max(calls), "retrievals": statistics.mean(retrievals),
        "prompt_tokens": statistics.mean(prompt_tokens), "completion_tokens": statistics.mean(completion_tokens),
        "failures": failures, "seconds_per_question": elapsed / max(1, len(questions)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--retriever", default=None)
    parser.add_argument("--lm", default="dry-run:openai/gpt-4o-mini")
    parser.add_argument("--methods", default="", help="comma-separated method ids (default: all variants)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from ragzoo import data, programs
    from ragzoo.lm import make_lm
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    from benchmarks.common import markdown_table, write_json

    questions = data.load(args.dataset, args.split, n=args.n, seed=None)
    retriever = make_retriever(args.retriever or DEFAULT_RETRIEVER)
    lm = make_lm(args.lm, cache=False)
    wanted = set(filter(None, args.methods.split(",")))
    registry = programs.methods()
    rows, results = [], []
    for method_id, knobs, label in VARIANTS:
        if (wanted and method_id not in wanted) or method_id not in registry:
            continue
        try:
            result = measure(method_id, knobs, questions, retriever, lm)
        except Exception as error:  # a knob this version of the method lacks: report, go on
            print(f"skipped {method_id} {knobs}: {type(error).__name__}: {error}")
            continue
        results.append({"method": method_id, "knobs": knobs, "label": label, **result,
                        "paper_calls": registry[method_id].calls})
        rows.append([method_id + (f" ({label})" if label else ""), f"{result['lm_calls']:.2f}",
                     result["lm_calls_max"], f"{result['retrievals']:.2f}", f"{result['prompt_tokens']:.0f}",
                     f"{result['completion_tokens']:.0f}", result["failures"], registry[method_id].calls])
    print(f"\n{len(questions)} {args.dataset}/{args.split} questions, LM {args.lm}, retriever "
          f"{args.retriever or DEFAULT_RETRIEVER}\n")
    print(markdown_table(["method", "LM calls/q", "max", "retrievals/q", "prompt tok/q", "completion tok/q",
                          "failures", "paper's structure"], rows))
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
