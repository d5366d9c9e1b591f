"""`ragzoo evaluate`: run a method or a compiled program on a dataset split (or a user's file) and write a run
directory (config.json, predictions.jsonl, summary.json). Without `--split`/`--metric` it uses the dataset's
defaults (`ragzoo.data.registry.DEFAULTS`), records them in config.json (`defaults_used`) and says so on
stderr. The helpers it shares with `ask` and `compile` are in `ragzoo.commands.common`."""

from __future__ import annotations

import argparse
import sys

from ragzoo.commands.common import DATA_DEFAULTS, LM_DEFAULTS, add_data_args, add_lm_args

DEFAULTS = {
    "program": None, "method": None, **DATA_DEFAULTS, **LM_DEFAULTS, "out": None, "threads": 1, "resume": False,
    "force": False, "metric": None,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--program", help="a compiled-program directory (from ragzoo compile)")
    source.add_argument("--method", help="a method id (uncompiled; see ragzoo methods)")
    add_data_args(parser, split_help="split (default: the dataset's evaluation split, e.g. dev; "
                                     "strategyqa: train_first500; see ragzoo datasets)")
    parser.add_argument("--out", help="run directory to write")
    parser.add_argument("--threads", type=int, help="parallel examples (default 1)")
    parser.add_argument("--resume", action="store_true", default=None, help="continue an interrupted run")
    parser.add_argument("--force", action="store_true", default=None, help="overwrite an existing run")
    parser.add_argument("--metric", help="comma-separated metrics (default: the dataset's: em,f1; "
                                         "strategyqa: acc)")
    add_lm_args(parser)


def run(args: argparse.Namespace) -> int:
    import dspy

    from ragzoo.commands.common import (EXIT_STOPPED, apply_dataset_defaults, build_lm, check_metrics,
                                        check_question_source, lm_description, load_examples,
                                        program_from_config, say_defaults)
    from ragzoo.config import resolve
    from ragzoo.engines import is_dry_run
    from ragzoo.errors import ConfigError
    from ragzoo.runs import evaluate

    config = resolve(args, DEFAULTS)
    if not config.get("out"):
        raise ConfigError("no --out given; name the run directory to write, e.g. --out runs/rag-hotpotqa")
    check_question_source(config)
    apply_dataset_defaults(config, split_kind="eval", metric_kind="eval")
    check_metrics(config["metric"])
    lm = build_lm(config)
    examples = load_examples(config)  # before the program: a `fixed` retriever replays their passages
    program, description = program_from_config(config, examples)
    run_config = {**{k: v for k, v in config.items() if k not in ("resume", "force")}, **description,
                  "lm": lm_description(lm)}
    with dspy.context(lm=lm):
        summary = evaluate(program, examples, config["metric"], config["out"], threads=int(config["threads"]),
                           resume=bool(config["resume"]), force=bool(config["force"]), config=run_config,
                           max_calls=config.get("max_calls"), max_cost=config.get("max_cost"))
    if is_dry_run(lm):
        metrics = "metrics n/a (dry-run: placeholder answers)"
    else:
        metrics = "  ".join(f"{name}={value:.3f}" for name, value in summary["metrics"].items())
    usage = summary["usage"]
    print(f"{config['out']}: n={summary['n']}/{summary['n_expected']}  {metrics}  "
          f"LM calls/question={usage['lm_calls_per_question']:.2f}  tokens={usage['prompt_tokens']}+"
          f"{usage['completion_tokens']}  cost=${usage['cost']:.4f}  failures={summary['failures']} "
          f"{summary['failures_by_kind'] or ''}".rstrip())
    say_defaults("evaluate", config)
    if summary.get("stopped"):
        print(f"stopped: {summary['stopped']}; rerun with --resume to continue", file=sys.stderr)
        return EXIT_STOPPED
    return 0
