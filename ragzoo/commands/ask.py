"""`ragzoo ask`: answer one question with a method or a compiled program; print the answer, the passages
used and a trace of every LM call (predictor, tokens) and retrieval. `--max-calls`/`--max-cost` hold: the
call past the budget is never sent (one line on stderr, exit 3). `--retriever fixed` replays the passages
recorded with this question in `--dataset/--split` (or `--data`). With `--program` and no `--lm`, the LM the
artifact was compiled with answers (its api base and price too; keys from the environment); one line on stderr
says which. A `--program` runs under the adapter and re-asks it was compiled with unless `--adapter` is given, as
in `evaluate` (`common.follow_recorded_adapter`); an explicit one that differs wins, said in one line."""

from __future__ import annotations

import argparse

from ragzoo.commands.common import DATA_DEFAULTS, LM_DEFAULTS, add_data_args, add_lm_args

DEFAULTS = {"program": None, "method": None, **{k: v for k, v in DATA_DEFAULTS.items() if k != "n"},
            **LM_DEFAULTS, "json": False, "trust_retriever": False}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--program", help="a compiled-program directory")
    source.add_argument("--method", help="a method id (see ragzoo methods)")
    parser.add_argument("question", help="the question to answer")
    parser.add_argument("--json", action="store_true", default=None, help="print one JSON object")
    parser.add_argument("--trust-retriever", action="store_true", default=None,
                        help="follow the --program artifact's retriever even outside RAGZOO_DATA (a URL, an absolute "
                             "path); without it such a retriever is refused, naming what it asked for")
    add_data_args(parser, n=False, split_help="with --retriever fixed: the split whose recorded passages to "
                                              "replay (default: the dataset's evaluation split)")
    add_lm_args(parser)


def _recorded_questions(config: dict, question: str) -> list:
    """The examples that hold the recorded passages a `fixed` retriever replays for `question`."""
    from ragzoo.commands.common import FIXED_NEEDS_QUESTIONS, apply_dataset_defaults, load_examples
    from ragzoo.errors import ConfigError

    if not config.get("dataset") and not config.get("data"):
        raise ConfigError(FIXED_NEEDS_QUESTIONS)
    apply_dataset_defaults(config, split_kind="eval", metric_kind=None)
    wanted = " ".join(question.split())
    examples = [example for example in load_examples(config, n=None)
                if " ".join(str(example.get("question", "")).split()) == wanted]
    source = config.get("data") or f"{config['dataset']}/{config['split']}"
    if not examples:
        raise ConfigError(f"the fixed retriever has no recorded passages for this question: it is not in "
                          f"{source}; ask one of its questions or use another --retriever")
    if not any(example.get("retrieved") for example in examples):
        from ragzoo.data.registry import SPLITS

        recorded = [split for (dataset, split), spec in SPLITS.items()
                    if dataset == config.get("dataset") and "(`retrieved`)" in spec.description]
        where = f"--split {' or '.join(recorded)} (recorded passages), or " if recorded else ""
        raise ConfigError(f"{source} records no passages ('retrieved' field) for this question; use {where}"
                          f"another --retriever")
    return examples


def _on_this_machine(url: str) -> bool:
    """Whether `url`'s host is a loopback address (127.0.0.0/8, ::1, localhost)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _use_recorded_lm(config: dict) -> None:
    """No --lm with --program: the LM the artifact was compiled with (model, api base, price; the key from the
    environment). Says which in one line on stderr, with the adapter `follow_recorded_adapter` chose. A recorded
    server off this machine is refused unless --api-base names it: an artifact from someone else must not send
    your questions and key to their server (as its retriever is refused, `ragzoo.artifacts`)."""
    import sys

    from ragzoo.artifacts import read_manifest
    from ragzoo.errors import ConfigError

    manifest = read_manifest(config["program"])
    recorded, compiled = manifest.get("lm"), manifest.get("config")
    recorded = recorded if isinstance(recorded, dict) else {}  # a hand-edited manifest is read, never trusted
    compiled = compiled if isinstance(compiled, dict) else {}
    spec = compiled.get("lm") if isinstance(compiled.get("lm"), str) else None
    if not spec and recorded.get("model"):  # saved from Python: the manifest's LM description only
        model = str(recorded["model"])
        priced = recorded.get("priced_model")
        spec = ("dry-run:" + (priced if isinstance(priced, str) else "")).rstrip(":") if recorded.get("dry_run") \
            else model
    if not spec:
        raise ConfigError(f"{config['program']} records no LM; pass --lm openai/gpt-4o-mini (key in the "
                          f"environment) or --lm dry-run")
    api_base = compiled.get("api_base") if compiled.get("lm") else None
    if api_base is not None and not isinstance(api_base, str):
        raise ConfigError(f"{config['program']}: its manifest's config.api_base is not a URL ({api_base!r}); pass "
                          f"--lm and --api-base")
    if recorded.get("api_base") and not api_base:
        raise ConfigError(f"{config['program']} was compiled with {spec} at {recorded['api_base']} but does not "
                          f"record the server's URL; pass --lm {spec} --api-base http://{recorded['api_base']}/v1")
    if config.get("api_base") is None and api_base and not _on_this_machine(api_base):
        # an artifact is untrusted input: a server it names would get the questions and the key in the environment
        raise ConfigError(f"{config['program']} was compiled with {spec} at {api_base}; an artifact's LM server "
                          f"is followed only on this machine (loopback): pass --api-base {api_base} to send your "
                          f"questions and key there, or --lm to choose another LM")
    config["lm"] = spec
    if config.get("api_base") is None:
        config["api_base"] = api_base
    for key in ("price", "price_per_hour"):
        if config.get(key) is None and compiled.get(key) is not None:
            config[key] = compiled[key]
    where = f" at {config['api_base']}" if config.get("api_base") else ""
    print(f"ragzoo ask: using the LM recorded in {config['program']}: {spec}{where} (adapter {config['adapter']}; "
          f"keys from the environment; --lm overrides)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    import json

    import dspy

    from ragzoo.commands.common import (budget_stop, build_adapter, build_lm, check_question_source,
                                        find_budget_error, follow_recorded_adapter, is_fixed_spec,
                                        program_from_config, say_adapter_mismatch)
    from ragzoo.config import refuse_secrets, resolve
    from ragzoo.errors import ConfigError
    from ragzoo.runs import classify_error
    from ragzoo.secrets import redact
    from ragzoo.tracing import trace_example
    from ragzoo.usage import metering

    config = resolve(args, DEFAULTS)
    question = (args.question or "").strip()
    if not question:
        raise ConfigError("the question is empty")
    refuse_secrets({"question": question})
    check_question_source(config, required=False)
    follow_recorded_adapter(args, config)
    if config.get("program") and not config.get("lm"):
        _use_recorded_lm(config)
    lm = build_lm(config)
    examples = None
    spec = config.get("retriever")
    if spec is None and config.get("program"):
        from ragzoo.artifacts import read_manifest

        spec = read_manifest(config["program"]).get("retriever")
    if is_fixed_spec(spec):
        examples = _recorded_questions(config, question)
    program, description = program_from_config(config, examples)
    adapter = build_adapter(config)
    say_adapter_mismatch("ask", config, adapter)
    budget = None
    with dspy.context(lm=lm, adapter=adapter), \
            metering(max_calls=config.get("max_calls"), max_cost=config.get("max_cost")), \
            trace_example() as trace:
        try:
            prediction = program(question=question)
            error = None
        except Exception as exc:  # show what failed, as evaluate would record it
            if isinstance(exc, ConfigError):
                raise
            budget = find_budget_error(exc)
            prediction, error = None, redact(f"{classify_error(exc)}: {type(exc).__name__}: {exc}")
    if budget is not None:
        return budget_stop("ask", budget)
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
