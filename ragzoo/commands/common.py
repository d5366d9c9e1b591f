"""Helpers shared by the subcommands that run programs (`ask`, `compile`, `evaluate`): the one place for

- the common flags (`add_lm_args`: LM, retriever, knobs, cache, budgets, seed, config file) and the data
  flags (`add_data_args`: `--dataset`, `--split`, `--data`, `--field-map`, `-n`), so every command that
  takes questions takes the same options;
- building the LM (`build_lm`, `lm_description`), the retriever (`build_retriever`: the default comes from
  `ragzoo.retrieval.specs.DEFAULT_RETRIEVER`; `fixed` is built from the loaded questions), the questions
  (`load_examples`, `apply_dataset_defaults`: a dataset's default split and metric come from
  `ragzoo.data.registry.DEFAULTS`) and the program (`program_from_config`: `--program DIR` or `--method M`,
  knobs resolved once through `ragzoo.programs.resolve_knobs`);
- a budget stop (`budget_stop`): one line on stderr, exit code 3, like an evaluation stopped by its budget.

Dry-run detection is `ragzoo.engines.is_dry_run_spec` / `is_dry_run`; secret detection is `ragzoo.secrets`
(through `ragzoo.config`). Nothing here imports DSPy at module level: `ragzoo --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

EXIT_STOPPED = 3  # a run or compile stopped by --max-calls / --max-cost (finished work is kept)

# flags of `add_lm_args`, with their defaults (commands merge these into their own DEFAULTS)
LM_DEFAULTS: dict[str, Any] = {"lm": None, "api_base": None, "retriever": None, "knob": [], "no_cache": False,
                               "max_calls": None, "max_cost": None, "seed": 0, "adapter": "chat", "max_reasks": 2,
                               "max_concurrency": 8, "timeout": 120.0, "price": None,
                               "price_per_hour": None, "judge_lm": None, "judge_api_base": None}
# flags of `add_data_args`; split and metric stay None unless given, so the dataset's defaults can apply
DATA_DEFAULTS: dict[str, Any] = {"dataset": None, "split": None, "data": None, "field_map": None, "n": None,
                                 "preset": None}


def add_lm_args(parser: argparse.ArgumentParser) -> None:
    from ragzoo.config import add_secret_trap
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER  # a light module: no DSPy, numpy or index import

    parser.add_argument("--lm", help="LM spec: a LiteLLM model (openai/gpt-4o-mini), or dry-run[:priced-model]")
    parser.add_argument("--api-base", help="URL of an OpenAI-compatible server (keys come from the environment)")
    parser.add_argument("--retriever", help=f"retriever spec (default: the artifact's, else {DEFAULT_RETRIEVER}); "
                                            f"'fixed' replays the passages recorded with the questions")
    parser.add_argument("--knob", action="append", metavar="K=V", help="method knob, repeatable "
                                                                      "(default: the paper's values)")
    parser.add_argument("--no-cache", action="store_true", default=None,
                        help="bypass DSPy's LM cache (key: sha256 of the request: model, messages, sampling "
                             "options and the endpoint; never the key)")
    add_budget_args(parser)
    parser.add_argument("--seed", type=int, help="sampling seed (default 0)")
    # real models (ragzoo.adapters, ragzoo.endpoints)
    parser.add_argument("--adapter", choices=("chat", "json", "xml", "two-step"),
                        help="prompt/reply format: chat (default), json or xml; replies are read leniently and an "
                             "unreadable one is re-asked (recorded in the run config and the manifest); two-step: "
                             "the model answers in free text and a second call of the same LM extracts the "
                             "fields (DSPy's TwoStepAdapter: twice the calls, for models that slip on formats)")
    parser.add_argument("--max-reasks", type=int, help="re-asks after an unreadable reply, per call (default 2)")
    parser.add_argument("--max-concurrency", type=int,
                        help="LM requests in flight per endpoint, shared by all threads (default 8)")
    parser.add_argument("--timeout", type=float, help="seconds per LM request (default 120)")
    parser.add_argument("--judge-lm", metavar="SPEC",
                        help="LM that judges --metric judge / judge_faithful (a LiteLLM model; key in the "
                             "environment); its calls are counted and priced apart and bound by no budget")
    parser.add_argument("--judge-api-base", help="URL of an OpenAI-compatible server for --judge-lm")
    parser.add_argument("--config", help="TOML/YAML file of options; flags win")
    add_secret_trap(parser)


def add_budget_args(parser: argparse.ArgumentParser, *, scope: str = "") -> None:
    """--max-calls, --max-cost, --price, --price-per-hour: one definition for every command that spends
    (`evaluate`, `compile`, `ask`, and grids, where `scope` says the budget covers the whole grid)."""
    parser.add_argument("--max-calls", type=int, help=f"stop before the LM call past this many{scope} "
                                                      f"(default: no limit)")
    parser.add_argument("--max-cost", type=float, help=f"stop before the LM call that could pass this many "
                                                       f"USD{scope} (default: no limit)")
    parser.add_argument("--price", metavar="IN,OUT",
                        help="USD per million prompt,completion tokens for a model LiteLLM has no price for "
                             "(needed for --max-cost on a local model)")
    parser.add_argument("--price-per-hour", type=float, metavar="USD",
                        help="USD per hour of a server rented by the hour (e.g. a vLLM GPU box): the run's cost "
                             "adds wall time x rate, shown apart from token cost, and --max-cost binds on it")


def add_tracking_args(parser: argparse.ArgumentParser) -> None:
    """--mlflow URI, --mlflow-traces: one definition for `compile`, `evaluate`, `sweep` and `reproduce`
    (read by `ragzoo.tracking.from_args`, not by the commands' config: nothing of them reaches a run folder)."""
    parser.add_argument("--mlflow", metavar="URI",
                        help="log this run to MLflow: a tracking server (http://host:port) or a local store "
                             "(sqlite:///mlflow.db); default $RAGZOO_MLFLOW; needs pip install 'ragzoo[mlflow]'")
    parser.add_argument("--mlflow-traces", action="store_true", default=None,
                        help="with --mlflow: also log DSPy's trace of every LM call (mlflow.dspy.autolog)")


def add_data_args(parser: argparse.ArgumentParser, *, split_help: str, n: bool = True) -> None:
    parser.add_argument("--dataset", help="dataset name (see ragzoo datasets)")
    parser.add_argument("--split", help=split_help)
    if n:
        parser.add_argument("-n", "--n", type=int, help="number of questions (default: the whole split; a seeded "
                                                       "sample, or the first n of an ordered paper split)")
    parser.add_argument("--data", metavar="FILE", help="a question file (JSONL/JSON/CSV/TSV) instead of --dataset")
    parser.add_argument("--field-map", help="fields of --data: question=q,answers=gold,id=qid "
                                            "(default: question, answers, id)")
    parser.add_argument("--preset", choices=("paper",),
                        help="paper: the papers' evaluation split, metric and answer mode for --dataset (StrategyQA: "
                             "yes/no answers scored by accuracy), and a compile pool disjoint from that split")


# ---------------------------------------------------------------------------------------------------------
# dataset defaults

def check_question_source(config: dict, required: bool = True) -> None:
    from ragzoo.errors import ConfigError

    if config.get("data") and config.get("dataset"):
        raise ConfigError("pass --dataset NAME or --data FILE, not both")
    if config.get("data") and config.get("split"):
        raise ConfigError("--split names a split of --dataset; a --data file has none")
    if config.get("dataset") and config.get("field_map"):
        raise ConfigError("--field-map names the fields of a --data file; a --dataset is read by its own schema")
    if required and not config.get("data") and not config.get("dataset"):
        raise ConfigError("no questions given; pass --dataset NAME (see ragzoo datasets) or --data FILE")
    if isinstance(config.get("data"), str):  # recorded as the file it is: a resume from another folder finds it
        config["data"] = os.path.abspath(os.path.expanduser(config["data"]))


def apply_dataset_defaults(config: dict, *, split_kind: str, metric_kind: str | None) -> dict:
    """Fill `config["split"]` (split_kind "eval" or "train") and `config["metric"]` (metric_kind "eval": the
    evaluation list, "headline": one metric, None: no metric) from the dataset's defaults when the user gave
    none. Returns (and stores as `config["defaults_used"]`) what was filled in, for the run record."""
    from ragzoo.data import dataset_defaults
    from ragzoo.errors import ConfigError

    defaults = dataset_defaults(config.get("dataset")) if not config.get("data") else dataset_defaults(None)
    if config.get("dataset"):
        from ragzoo.paths import is_demo_data, locate_data

        root, why = locate_data()
        if is_demo_data(root):  # a split's first questions only: never to be read as the benchmark's numbers
            print(f"note: {config['dataset']} comes from {why}; set RAGZOO_DATA to the full data folder",
                  file=sys.stderr)
    used: dict[str, Any] = {}
    paper = config.get("preset") == "paper"
    evaluated = (defaults.paper_split if paper else None) or defaults.eval_split
    if paper:
        used["preset"] = "paper"
        _preset_answer_mode(config, defaults.answer_mode, used)
    if config.get("dataset") and not config.get("split"):
        if split_kind == "train":
            config["split"] = used["split"] = defaults.train_split
            if paper and evaluated == defaults.train_split:
                raise ConfigError(f"--preset paper: {config['dataset']}'s compile split is its evaluation split; "
                                  f"name a --split to compile on")
            if paper and evaluated != defaults.eval_split:
                used["disjoint_from"] = evaluated  # another split than the one papers evaluate on
            elif defaults.exclude_eval:
                used["excluded_split"] = defaults.eval_split
            elif defaults.disjoint:
                used["disjoint_from"] = defaults.eval_split
            else:
                used["overlaps"] = defaults.eval_split
        else:
            config["split"] = used["split"] = evaluated
    if metric_kind is not None and not config.get("metric"):
        config["metric"] = used["metric"] = defaults.eval_metrics if metric_kind == "eval" else defaults.metric
    if used:
        config["defaults_used"] = used
    return used


def _preset_answer_mode(config: dict, answer_mode: str | None, used: dict) -> None:
    """`--preset paper` on a dataset whose papers use another answer mode: set the `answer_mode` knob of a
    `--method` that has it (a compiled `--program` keeps the mode it was compiled with)."""
    if not answer_mode or not config.get("method"):
        return
    from ragzoo import programs
    from ragzoo.config import knob_dict

    from ragzoo.errors import ConfigError

    knobs = knob_dict(config.get("knob"))
    if "answer_mode" in knobs or "answer_mode" not in programs.info(config["method"]).knobs:
        return
    try:
        programs.resolve_knobs(config["method"], {"answer_mode": answer_mode})
    except ConfigError:  # the method answers in another set of modes: leave it alone
        return
    config["knob"] = [*(config.get("knob") or []), f"answer_mode={answer_mode}"] \
        if not isinstance(config.get("knob"), dict) else {**config["knob"], "answer_mode": answer_mode}
    used["knob"] = f"answer_mode={answer_mode}"


def describe_defaults(command: str, config: dict) -> str | None:
    """The one stderr line that says which defaults a command used (None when it used none)."""
    used = config.get("defaults_used") or {}
    if not used:
        return None
    source = f"{config['dataset']}'s defaults" if config.get("dataset") else "the defaults for a question file"
    parts = []
    if "split" in used:
        split = f"--split {used['split']}"
        if "excluded_split" in used:
            split += f" without the questions of {used['excluded_split']} (the evaluation split)"
        elif "disjoint_from" in used:
            split += f" (disjoint from the evaluation split {used['disjoint_from']})"
        elif "overlaps" in used:
            split += f" (no other split on disk: it overlaps the evaluation split {used['overlaps']})"
        parts.append(split)
    if "metric" in used:
        parts.append(f"--metric {used['metric']}")
    if "knob" in used:
        parts.append(f"--knob {used['knob']}")
    if used.get("preset") == "paper":
        source = f"the paper preset of {config.get('dataset')}"
    return f"ragzoo {command}: used {source}: {', '.join(parts)} (pass --split/--metric to choose)"


def say_defaults(command: str, config: dict) -> None:
    line = describe_defaults(command, config)
    if line:
        print(line, file=sys.stderr)


def check_metrics(names: str, config: dict | None = None) -> None:
    """Unknown metric names fail before any work (and before any other line is printed). With `config`, an
    LM-judged metric gets its judge from `--judge-lm` / `--judge-api-base` first (`ragzoo.metrics.judge`)."""
    from ragzoo.metrics import JUDGED, get_metric

    if config is not None and any(name.strip() in JUDGED for name in str(names).split(",")):
        from ragzoo.lm import describe_lm, make_lm
        from ragzoo.metrics.judge import clear_judge, use_judge
        from ragzoo.usage import Meter

        clear_judge()
        if config.get("judge_lm"):
            lm = make_lm(config["judge_lm"], api_base=config.get("judge_api_base"),
                         **({"cache": False} if config.get("no_cache") else {}))
            use_judge(lm, config["judge_lm"], Meter(), describe_lm(lm))
    for name in str(names).split(","):
        if name.strip():
            get_metric(name.strip())


# ---------------------------------------------------------------------------------------------------------
# LM, retriever, questions, program

def build_lm(config: dict):
    from ragzoo.errors import ConfigError
    from ragzoo.lm import make_lm

    if not config.get("lm"):
        raise ConfigError("no LM given; pass --lm openai/gpt-4o-mini (key in the environment) or --lm dry-run")
    from ragzoo.engines import is_dry_run_spec
    from ragzoo.endpoints import preflight

    options = {}
    if config.get("no_cache"):
        options["cache"] = False
    if not is_dry_run_spec(str(config["lm"]).strip()):
        for key in ("max_concurrency", "timeout", "price", "price_per_hour"):
            if config.get(key) is not None:
                options[key] = config[key]
    lm = make_lm(config["lm"], api_base=config.get("api_base"), **options)
    preflight(lm)  # the key is there and the server answers, in one line, before anything is spent
    return lm


def build_adapter(config: dict):
    """The lenient adapter of `--adapter` / `--max-reasks` (see ragzoo.adapters)."""
    from ragzoo.adapters import DEFAULT_MAX_REASKS, make_adapter

    reasks = config.get("max_reasks")
    return make_adapter(config.get("adapter"), max_reasks=DEFAULT_MAX_REASKS if reasks is None else int(reasks))


def follow_recorded_adapter(args: argparse.Namespace, config: dict) -> None:
    """`--program`: the artifact runs under the adapter it was compiled with (its demos and instructions were
    chosen in that format), with its re-asks, unless --adapter is given (as a flag or in the --config file): an
    explicit choice wins, and `say_adapter_mismatch` says so. The one decision of `evaluate` and `ask`."""
    if not config.get("program"):
        return
    from ragzoo.adapters import ADAPTERS, EXTRA_ADAPTERS
    from ragzoo.artifacts import read_manifest, recorded_adapter
    from ragzoo.config import load_config_file

    in_file = set(load_config_file(args.config)) if getattr(args, "config", None) else set()
    try:
        manifest = read_manifest(config["program"])
        adapter, reasks = recorded_adapter(manifest)
    except Exception:  # noqa: BLE001 - the loader says what is wrong with the artifact
        return
    if manifest.get("adapter") is not None and adapter not in (*ADAPTERS, *EXTRA_ADAPTERS):  # as `load` refuses it
        from ragzoo.errors import ArtifactError

        raise ArtifactError(f"{config['program']} records an adapter this ragzoo cannot build "
                            f"({manifest.get('adapter')!r}); recompile the program")
    if getattr(args, "adapter", None) is not None or "adapter" in in_file or adapter is None:
        return
    config["adapter"] = adapter
    if reasks is not None and getattr(args, "max_reasks", None) is None and "max_reasks" not in in_file:
        config["max_reasks"] = reasks


def say_adapter_mismatch(command: str, config: dict, adapter) -> None:
    """A compiled program run under another adapter than its own (an explicit --adapter): one line on stderr.
    Not `ragzoo.adapters.warn_adapter_mismatch`, a Python warning, whose source line would reach the user too."""
    if not config.get("program"):
        return
    from ragzoo.adapters import adapter_name
    from ragzoo.artifacts import read_manifest, recorded_adapter

    try:
        compiled = recorded_adapter(read_manifest(config["program"]))[0]
    except Exception:  # noqa: BLE001 - the loader already said what is wrong with the artifact
        return
    running = adapter_name(adapter)
    if compiled and compiled != running:
        print(f"ragzoo {command}: warning: {config['program']} was compiled under the {compiled} adapter and runs "
              f"under {running}; pass --adapter {compiled} to run it as compiled", file=sys.stderr)


def lm_description(lm) -> dict:
    from ragzoo.lm import describe_lm

    return describe_lm(lm)


def is_fixed_spec(spec: str | None) -> bool:
    """True for the `fixed` retriever (replay of the passages recorded with each question)."""
    return isinstance(spec, str) and spec.strip().partition(":")[0].lower() == "fixed"


FIXED_NEEDS_QUESTIONS = ("the fixed retriever replays the passages recorded with a dataset's questions; pass "
                         "--dataset/--split (or --data) with a 'retrieved' field, e.g. --dataset nq_open --split "
                         "dev_activerag500")


def build_retriever(spec: str | None, *, examples: list | None = None):
    """The retriever of `spec` (default `DEFAULT_RETRIEVER`); `fixed` is built from `examples`."""
    from ragzoo.errors import ConfigError
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    spec = spec or DEFAULT_RETRIEVER
    if is_fixed_spec(spec):
        if not examples:
            raise ConfigError(FIXED_NEEDS_QUESTIONS)
        return make_retriever(spec, examples=examples)
    return make_retriever(spec)


def load_examples(config: dict, *, n: int | None = None, **load_options) -> list:
    """The questions of `--data FILE` or `--dataset/--split` (the split already defaulted), `n` of them
    (default `config["n"]`)."""
    from ragzoo import data

    check_question_source(config)
    n = config.get("n") if n is None else n
    if config.get("data"):
        return data.load_file(config["data"], n=n, seed=config.get("seed"),
                              **data.parse_field_map(config.get("field_map")))
    split = config.get("split") or data.default_split(config["dataset"])
    return data.load(config["dataset"], split, n=n, seed=config.get("seed"), **load_options)


def program_from_config(config: dict, examples: list | None = None):
    """(program, description) from `--program DIR` or `--method M` (+ `--knob`, `--retriever`). Knobs are
    coerced and validated once (`programs.resolve_knobs`) before any retriever or index is built; a `fixed`
    retriever replays the passages recorded on `examples`."""
    from ragzoo import programs
    from ragzoo.artifacts import load_artifact, read_manifest
    from ragzoo.config import knob_dict
    from ragzoo.errors import ConfigError

    knobs = knob_dict(config.get("knob"))
    if config.get("program"):
        manifest = read_manifest(config["program"])
        method = manifest["method"]
        uses_retrieval = method in programs.methods() and programs.info(method).uses_retrieval
        spec = config.get("retriever") or manifest.get("retriever")
        retriever = None
        if uses_retrieval and (config.get("retriever") or is_fixed_spec(spec)):
            retriever = build_retriever(spec, examples=examples)
        program, manifest = load_artifact(config["program"], retriever=retriever, method=config.get("method"),
                                          knobs=knobs or None, trust_retriever=bool(config.get("trust_retriever")))
        return program, {"program": str(config["program"]), "method": manifest["method"],
                         "knobs": manifest["knobs"], "retriever": config.get("retriever") or manifest.get("retriever")}
    if not config.get("method"):
        raise ConfigError("pass --program DIR (a compiled program) or --method M (see ragzoo methods)")
    method = config["method"]
    info = programs.info(method)
    resolved = programs.resolve_knobs(method, knobs)  # bad knobs fail before the index is built
    retriever = build_retriever(config.get("retriever"), examples=examples) if info.uses_retrieval else None
    program = programs.get(method, retriever=retriever, **resolved)
    return program, {"method": method, "knobs": resolved, "retriever": getattr(retriever, "spec", None)}


def budget_stop(command: str, error: BaseException) -> int:
    """A --max-calls/--max-cost stop: one line on stderr, exit 3 (as an evaluation stopped by its budget)."""
    print(f"ragzoo {command}: stopped: {error}", file=sys.stderr)
    return EXIT_STOPPED


def find_budget_error(error: BaseException | None) -> BaseException | None:
    """The `BudgetExceeded` in `error`'s cause/context chain (DSPy may wrap it), or None."""
    from ragzoo.errors import BudgetExceeded

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, BudgetExceeded):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
