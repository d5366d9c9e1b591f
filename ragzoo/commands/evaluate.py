"""`ragzoo evaluate`: run a method or a compiled program on a dataset split (or a user's file) and write a run
directory (config.json, predictions.jsonl, summary.json). Without `--split`/`--metric` it uses the dataset's
defaults (`ragzoo.data.registry.DEFAULTS`), records them in config.json (`defaults_used`) and says so on
stderr. The helpers it shares with `ask` and `compile` are in `ragzoo.commands.common`."""

from __future__ import annotations

import argparse
import sys

from ragzoo.commands.common import DATA_DEFAULTS, LM_DEFAULTS, add_data_args, add_lm_args, add_tracking_args

DEFAULTS = {
    "program": None, "method": None, **DATA_DEFAULTS, **LM_DEFAULTS, "out": None, "threads": 1, "resume": False,
    "force": False, "metric": None, "trust_retriever": False, "deadline": 600.0, "retry_failed": False,
    "processes": 1,  # typed for a config file's value; not given at all, `ragzoo.runs.auto_processes` picks
    "abort_failure_rate": 0.5,
    "allow_failures": False, "refuse_leakage": False, "keep_prompts": False,
}
EXIT_FAILURES = 4  # the run finished, and some examples failed (pass --allow-failures to exit 0)
EXIT_ABORTED = 5  # the run stopped early: the first examples failed for the setup (LM, timeout, retriever)


# What an interrupted run keeps (the CLI prints it on Ctrl-C and on SIGTERM).
INTERRUPTED = ("every question that finished is in --out/predictions.jsonl: rerun the same command with "
               "--resume to continue")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--program", help="a compiled-program directory (from ragzoo compile)")
    source.add_argument("--method", help="a method id (uncompiled; see ragzoo methods)")
    add_data_args(parser, split_help="split (default: the dataset's evaluation split, e.g. dev; "
                                     "strategyqa: train_first500; see ragzoo datasets)")
    parser.add_argument("--out", help="run directory to write")
    parser.add_argument("--threads", type=int, help="parallel examples (default 1)")
    parser.add_argument("--processes", type=int,
                        help="worker processes, each running --threads examples at once; they share "
                             "--max-concurrency (each may use all of it) and split --max-calls/--max-cost evenly. "
                             "Default: one, or past 64 requests in flight (--threads, capped by the questions and "
                             "--max-concurrency) and without a budget or an LM-judged metric, --threads split over up "
                             "to one process per "
                             "CPU, since one interpreter spends more CPU per LM call past that")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="continue an interrupted run (a larger -n extends it)")
    parser.add_argument("--retry-failed", action="store_true", default=None,
                        help="run again the examples of the run that failed, and, as --resume (which it implies), those "
                             "not run yet")
    parser.add_argument("--deadline", type=float,
                        help="seconds one example may take; past it the example is recorded as a timeout "
                             "failure and the run goes on (default 600)")
    parser.add_argument("--abort-failure-rate", type=float,
                        help="stop early when, from the 10th finished example on, at least this share of the "
                             "examples finished so far failed for the setup (LM, timeout, retriever); 1 = only if "
                             "all did; default 0.5")
    parser.add_argument("--allow-failures", action="store_true", default=None,
                        help="exit 0 even when examples failed (default: exit 4)")
    parser.add_argument("--force", action="store_true", default=None, help="overwrite an existing run")
    parser.add_argument("--refuse-leakage", action="store_true", default=None,
                        help="refuse to evaluate a compiled program on questions it was compiled on (default: "
                             "evaluate with a loud warning, the overlap recorded in the run)")
    parser.add_argument("--trust-retriever", action="store_true", default=None,
                        help="follow the --program artifact's retriever even outside RAGZOO_DATA (a URL, an absolute "
                             "path); without it such a retriever is refused, naming what it asked for")
    parser.add_argument("--keep-prompts", action="store_true", default=None,
                        help="keep each LM call's prompt messages and reply in predictions.jsonl (lm_trace; "
                             "secrets redacted), shown by report --html's drill-down; larger run files")
    parser.add_argument("--metric", help="comma-separated metrics (default: the dataset's: em,f1; "
                                         "strategyqa: acc)")
    add_lm_args(parser)
    add_tracking_args(parser)


def run(args: argparse.Namespace) -> int:
    import dspy

    from ragzoo.commands.common import (EXIT_STOPPED, apply_dataset_defaults, build_adapter, build_lm,
                                        check_metrics, check_question_source, follow_recorded_adapter,
                                        lm_description, load_examples, program_from_config,
                                        say_adapter_mismatch, say_defaults)
    from ragzoo.config import load_config_file, resolve
    from ragzoo.engines import is_dry_run
    from ragzoo.errors import ConfigError
    from ragzoo.runs import evaluate

    config = resolve(args, DEFAULTS)
    given = getattr(args, "config", None)
    if args.processes is None and "processes" not in (load_config_file(given) if given else {}):
        config["processes"] = None  # neither flag nor file: as many as the run's requests in flight call for
    if not config.get("out"):
        raise ConfigError("no --out given; name the run directory to write, e.g. --out runs/rag-hotpotqa")
    from ragzoo import tracking

    track = tracking.from_args(args, "evaluate")
    check_question_source(config)
    apply_dataset_defaults(config, split_kind="eval", metric_kind="eval")
    check_metrics(config["metric"], config)  # and builds an LM judge for --metric judge
    from ragzoo.config import check_out_writable

    check_out_writable(config["out"])  # before any LM call (and the endpoint check): results must be keepable
    from ragzoo.errors import RunError
    from ragzoo.ownership import claim

    claim(config["out"], "run", error=RunError)  # only a run folder ragzoo made (or a new one), before any work
    follow_recorded_adapter(args, config)
    adapter = build_adapter(config)
    lm = build_lm(config)
    if config["processes"] is not None:
        from ragzoo.runs import check_processes

        with dspy.context(lm=lm):  # against the LM's --max-concurrency, before the program builds its index
            check_processes(config["processes"])
    examples = load_examples(config)  # before the program: a `fixed` retriever replays their passages
    from ragzoo.metrics.retrieval import check_gold_titles

    # before the program builds its retriever's index (minutes on a real corpus)
    check_gold_titles([name.strip() for name in str(config["metric"]).split(",")], examples)
    program, description = program_from_config(config, examples)
    say_adapter_mismatch("evaluate", config, adapter)
    from ragzoo.secrets import storable

    run_config = storable({**{k: v for k, v in config.items()  # endpoints stored without credentials
                              if k not in ("resume", "force", "retry_failed", "allow_failures")}, **description,
                           "lm": lm_description(lm)})
    deadline = config.get("deadline")
    from ragzoo.tracing import keeping_call_texts

    with dspy.context(lm=lm), keeping_call_texts(bool(config.get("keep_prompts"))), \
            track.working(config["out"]):
        summary = evaluate(program, examples, config["metric"], config["out"], threads=int(config["threads"]),
                           resume=bool(config["resume"]), force=bool(config["force"]), config=run_config,
                           max_calls=config.get("max_calls"), max_cost=config.get("max_cost"),
                           deadline=float(deadline) if deadline else None,
                           retry_failed=bool(config.get("retry_failed")), adapter=adapter,
                           abort_failure_rate=config.get("abort_failure_rate"),
                           refuse_leakage=bool(config.get("refuse_leakage")),
                           processes=config["processes"])
    track.finish(config["out"])
    if is_dry_run(lm):
        metrics = "metrics n/a (dry-run: placeholder answers)"
    else:
        metrics = "  ".join(f"{name}={value:.3f}" for name, value in summary["metrics"].items())
    usage = summary["usage"]
    print(f"{config['out']}: n={summary['n']}/{summary['n_expected']}  {metrics}  "
          f"LM calls/question={usage['lm_calls_per_question']:.2f}  tokens={usage['prompt_tokens']}+"
          f"{usage['completion_tokens']}  cost=${usage['cost']:.4f}"
          f"{_server_part(usage)}  failures={summary['failures']} "
          f"{summary['failures_by_kind'] or ''}".rstrip())
    if summary.get("reasks") or summary.get("degradations") or usage.get("cached_calls"):
        print(f"  re-asks={summary.get('reasks', 0)} ({summary.get('examples_reasked', 0)} questions)  "
              f"degradations={summary.get('degradations', 0)} ({summary.get('examples_degraded', 0)} questions)  "
              f"cached calls={usage.get('cached_calls', 0)}  tokens if uncached={usage.get('tokens_if_uncached', 0)}"
              f"  cost if uncached=${usage.get('cost_if_uncached', 0):.4f}")
    say_defaults("evaluate", config)
    for name, count in (summary.get("metric_failures") or {}).items():
        print(f"ragzoo evaluate: WARNING: metric {name} raised on {count} of {summary['n']} questions, each scored 0 "
              f"(see metric_errors in predictions.jsonl)", file=sys.stderr)
    if summary.get("compiled_on"):
        seen = ", ".join(f"{count} {role}" for role, count in summary["compiled_on"].items())
        print(f"ragzoo evaluate: WARNING: the program was compiled on some of these questions ({seen}); their "
              f"scores are not held out (--refuse-leakage refuses such runs)", file=sys.stderr)
    if summary.get("aborted"):
        print(f"ragzoo evaluate: stopped early: {summary['aborted']}; fix the setup, then rerun with "
              f"--retry-failed", file=sys.stderr)
        return EXIT_ABORTED
    if summary.get("stopped"):
        print(f"stopped: {summary['stopped']}; rerun with --resume to continue", file=sys.stderr)
        return EXIT_STOPPED
    if summary.get("lost"):  # not paid for in vain: --resume asks them; never exit 0 with questions missing
        print(f"ragzoo evaluate: {summary['lost']['questions']} question(s) ended with no record "
              f"({summary['lost']['why']}); rerun with --resume to run them", file=sys.stderr)
        return EXIT_FAILURES
    if summary["failures"] and not config.get("allow_failures"):
        print(f"ragzoo evaluate: {summary['failures']} of {summary['n']} examples failed "
              f"({', '.join(f'{k}: {v}' for k, v in summary['failures_by_kind'].items())}); see the error of each in "
              f"predictions.jsonl; rerun them with --retry-failed (--allow-failures exits 0)", file=sys.stderr)
        return EXIT_FAILURES
    return 0


def _server_part(usage: dict) -> str:
    """` + server $X (N s at the hourly rate)` under --price-per-hour; empty otherwise."""
    if not usage.get("server_cost"):
        return ""
    return f" + server ${usage['server_cost']:.4f} ({usage['server_seconds']:.0f} s) = ${usage['total_cost']:.4f}"
