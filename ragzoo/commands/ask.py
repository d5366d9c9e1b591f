"""`ragzoo ask`: answer one question with a method or a compiled program; print the answer, the passages
used and a trace of every LM call (predictor, tokens) and retrieval."""

from __future__ import annotations

import argparse

DEFAULTS = {"program": None, "method": None, "knob": [], "lm": None, "api_base": None, "retriever": None,
            "no_cache": False, "max_calls": None, "max_cost": None, "seed": 0, "json": False}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.commands.evaluate import add_common

    source = parser.add_mutually_exclusive_group()
    source.add_argument("--program", help="a compiled-program directory")
    source.add_argument("--method", help="a method id (see ragzoo methods)")
    parser.add_argument("question", help="the question to answer")
    parser.add_argument("--json", action="store_true", default=None, help="print one JSON object")
    add_common(parser)


def run(args: argparse.Namespace) -> int:
    import json

    import dspy

    from ragzoo.commands.evaluate import build_lm, build_program
    from ragzoo.config import refuse_secrets, resolve
    from ragzoo.errors import ConfigError
    from ragzoo.runs import classify_error
    from ragzoo.tracing import trace_example

    config = resolve(args, DEFAULTS)
    question = (args.question or "").strip()
    if not question:
        raise ConfigError("the question is empty")
    refuse_secrets({"question": question})
    lm = build_lm(config)
    program, description = build_program(config)
    with dspy.context(lm=lm), trace_example() as trace:
        try:
            prediction = program(question=question)
            error = None
        except Exception as exc:  # show what failed, as evaluate would record it
            if isinstance(exc, ConfigError):
                raise
            prediction, error = None, f"{classify_error(exc)}: {type(exc).__name__}: {exc}"
    passages = list(prediction.get("passages") or []) if prediction is not None else []
    calls = [{"predictor": c.signature, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
              "cost": c.cost, "cached": c.cached, "latency": round(c.latency, 3)} for c in trace.lm_calls]
    if config["json"]:
        print(json.dumps({"question": question, "answer": prediction.get("answer") if prediction else None,
                          "error": error, "passages": [getattr(p, "to_dict", lambda: {"text": str(p)})()
                                                       for p in passages],
                          "lm_calls": calls, "retrievals": [r.__dict__ for r in trace.retrievals],
                          **description}, default=str, indent=2))
        return 0 if error is None else 1
    print(f"question: {question}")
    print(f"answer:   {prediction.get('answer') if prediction is not None else '(failed) ' + str(error)}")
    print(f"passages ({len(passages)}):")
    for passage in passages:
        print(f"  [{getattr(passage, 'pid', '?')}] {getattr(passage, 'title', '') or str(passage)[:60]}")
    print(f"LM calls ({len(calls)}), retrievals ({len(trace.retrievals)}):")
    for index, call in enumerate(calls, 1):
        print(f"  {index:>2}. {call['predictor']:<28} prompt {call['prompt_tokens']:>6}  completion "
              f"{call['completion_tokens']:>5}{'  (cached)' if call['cached'] else ''}")
    print(f"total: prompt {trace.prompt_tokens} + completion {trace.completion_tokens} tokens, ${trace.cost:.5f}")
    return 0 if error is None else 1
