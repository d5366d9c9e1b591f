"""`ragzoo evaluate`: run a method or a compiled program on a dataset split (or a user's file) and write a run
directory (config.json, predictions.jsonl, summary.json). Also holds the helpers compile/ask share."""

from __future__ import annotations

import argparse
import sys

DEFAULTS = {
    "program": None, "method": None, "knob": [], "dataset": None, "split": "dev", "n": None, "seed": 0,
    "data": None, "field_map": None, "lm": None, "api_base": None, "retriever": None, "out": None,
    "threads": 1, "resume": False, "force": False, "metric": "em,f1", "no_cache": False, "max_calls": None,
    "max_cost": None,
}


def add_common(parser: argparse.ArgumentParser) -> None:
    from ragzoo.config import add_secret_trap

    parser.add_argument("--lm", help="LM spec: a LiteLLM model (openai/gpt-4o-mini), or dry-run[:priced-model]")
    parser.add_argument("--api-base", help="URL of an OpenAI-compatible server (keys come from the environment)")
    parser.add_argument("--retriever", help="retriever spec (default: the method's/artifact's, else bm25 wiki17)")
    parser.add_argument("--knob", action="append", metavar="K=V", help="method knob, repeatable")
    parser.add_argument("--no-cache", action="store_true", default=None,
                        help="bypass DSPy's LM cache (key: sha256 of the request: model, messages, sampling "
                             "options; api_key/api_base excluded)")
    parser.add_argument("--max-calls", type=int, help="stop after this many LM calls")
    parser.add_argument("--max-cost", type=float, help="stop after this many USD")
    parser.add_argument("--seed", type=int, help="sampling seed (default 0)")
    parser.add_argument("--config", help="TOML/YAML file of options; flags win")
    add_secret_trap(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--program", help="a compiled-program directory (from ragzoo compile)")
    source.add_argument("--method", help="a method id (uncompiled; see ragzoo methods)")
    parser.add_argument("--dataset", help="dataset name (see ragzoo datasets)")
    parser.add_argument("--split", help="split (default dev)")
    parser.add_argument("-n", "--n", type=int, help="number of questions (seeded sample)")
    parser.add_argument("--data", help="a question file (JSONL/JSON/CSV/TSV) instead of --dataset")
    parser.add_argument("--field-map", help="fields of --data: question=q,answers=gold,id=qid")
    parser.add_argument("--out", help="run directory to write")
    parser.add_argument("--threads", type=int, help="parallel examples (default 1)")
    parser.add_argument("--resume", action="store_true", default=None, help="continue an interrupted run")
    parser.add_argument("--force", action="store_true", default=None, help="overwrite an existing run")
    parser.add_argument("--metric", help="comma-separated metrics (default em,f1)")
    add_common(parser)


def build_lm(config: dict):
    from ragzoo.errors import ConfigError
    from ragzoo.lm import make_lm

    if not config.get("lm"):
        raise ConfigError("no LM given; pass --lm openai/gpt-4o-mini (key in the environment) or --lm dry-run")
    options = {}
    if config.get("no_cache"):
        options["cache"] = False
    return make_lm(config["lm"], api_base=config.get("api_base"), **options)


def lm_description(lm) -> dict:
    from ragzoo.lm import describe_lm

    return describe_lm(lm)


def build_retriever(spec: str | None, method: str | None, needed: bool = True):
    from ragzoo.retrieval import make_retriever

    if not needed:
        return None
    if not spec:
        from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

        spec = DEFAULT_RETRIEVER
    return make_retriever(spec)


def load_examples(config: dict):
    from ragzoo import data
    from ragzoo.errors import ConfigError

    if config.get("data"):
        return data.load_file(config["data"], n=config.get("n"), seed=config.get("seed"),
                              **data.parse_field_map(config.get("field_map")))
    if not config.get("dataset"):
        raise ConfigError("no questions given; pass --dataset NAME (see ragzoo datasets) or --data FILE")
    split = config.get("split") or data.default_split(config["dataset"])
    return data.load(config["dataset"], split, n=config.get("n"), seed=config.get("seed"))


def build_program(config: dict):
    """(program, description) from --program DIR or --method M (+ --knob, --retriever)."""
    from ragzoo import programs
    from ragzoo.artifacts import build_program as build, load_artifact, read_manifest
    from ragzoo.config import knob_dict
    from ragzoo.errors import ConfigError

    knobs = knob_dict(config.get("knob"))
    if config.get("program"):
        manifest = read_manifest(config["program"])
        info = programs.info(manifest["method"]) if manifest["method"] in programs.methods() else None
        retriever = None
        if info is not None and info.uses_retrieval and config.get("retriever"):
            retriever = build_retriever(config["retriever"], manifest["method"])
        program, manifest = load_artifact(config["program"], retriever=retriever, method=config.get("method"),
                                          knobs=knobs or None)
        return program, {"program": str(config["program"]), "method": manifest["method"], "knobs": manifest["knobs"],
                         "retriever": config.get("retriever") or manifest.get("retriever")}
    if not config.get("method"):
        raise ConfigError("pass --program DIR (a compiled program) or --method M (see ragzoo methods)")
    info = programs.info(config["method"])
    resolved = programs.resolved_knobs(config["method"], **knobs)  # bad knobs fail before the index is built
    retriever = build_retriever(config.get("retriever"), config["method"], info.uses_retrieval)
    program = build(config["method"], retriever=retriever, **knobs)
    return program, {"method": config["method"], "knobs": resolved,
                     "retriever": getattr(retriever, "spec", None)}


def run(args: argparse.Namespace) -> int:
    import dspy

    from ragzoo.config import resolve
    from ragzoo.errors import ConfigError
    from ragzoo.runs import evaluate

    config = resolve(args, DEFAULTS)
    if not config.get("out"):
        raise ConfigError("no --out given; name the run directory to write, e.g. --out runs/rag-hotpotqa")
    lm = build_lm(config)
    program, description = build_program(config)
    examples = load_examples(config)
    run_config = {**{k: v for k, v in config.items() if k not in ("resume", "force")}, **description,
                  "lm": lm_description(lm)}
    with dspy.context(lm=lm):
        summary = evaluate(program, examples, config["metric"], config["out"], threads=int(config["threads"]),
                           resume=bool(config["resume"]), force=bool(config["force"]), config=run_config,
                           max_calls=config.get("max_calls"), max_cost=config.get("max_cost"))
    if run_config["lm"].get("dry_run"):
        metrics = "metrics n/a (dry-run: placeholder answers)"
    else:
        metrics = "  ".join(f"{name}={value:.3f}" for name, value in summary["metrics"].items())
    usage = summary["usage"]
    print(f"{config['out']}: n={summary['n']}/{summary['n_expected']}  {metrics}  "
          f"LM calls/question={usage['lm_calls_per_question']:.2f}  tokens={usage['prompt_tokens']}+"
          f"{usage['completion_tokens']}  cost=${usage['cost']:.4f}  failures={summary['failures']} "
          f"{summary['failures_by_kind'] or ''}".rstrip())
    if summary.get("stopped"):
        print(f"stopped: {summary['stopped']}; rerun with --resume to continue", file=sys.stderr)
        return 3
    return 0
