"""`ragzoo compile`: compile a method's prompts with an optimizer preset and save the artifact.

`--dry-run` runs the same compile with the dry-run LM (placeholder answers, real retrieval, counted prompts)
and prints the LM calls, tokens and estimated cost per stage, then saves nothing. `--max-calls` /
`--max-cost` stop a real compile cleanly, keeping the best program so far (the manifest says so)."""

from __future__ import annotations

import argparse
import contextlib
import sys

DEFAULTS = {
    "method": None, "dataset": None, "split": "train", "dev_split": None, "train_n": 50, "dev_n": 50,
    "optimizer": "bootstrap", "metric": "em", "lm": None, "api_base": None, "retriever": None, "knob": [],
    "out": None, "dry_run": False, "max_calls": None, "max_cost": None, "seed": 0, "threads": 1,
    "no_cache": False, "force": False, "optimizer_setting": [], "search": [], "trials": 10,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.commands.evaluate import add_common

    parser.add_argument("--method", help="method id (see ragzoo methods)")
    parser.add_argument("--dataset", help="dataset name (see ragzoo datasets)")
    parser.add_argument("--split", help="training split (default train)")
    parser.add_argument("--dev-split", help="validation split (default: held out of --split, disjoint from training)")
    parser.add_argument("--train-n", type=int, help="training questions (default 50)")
    parser.add_argument("--dev-n", type=int, help="validation questions (default 50; 0 = no validation)")
    parser.add_argument("--optimizer", help="optimizer preset (default bootstrap; see ragzoo optimizers)")
    parser.add_argument("--optimizer-setting", action="append", metavar="K=V",
                        help="override a preset setting, e.g. num_candidate_programs=4")
    parser.add_argument("--metric", help="metric (em, f1, acc, contains; default em)")
    parser.add_argument("--out", help="artifact directory to write")
    parser.add_argument("--dry-run", action="store_true", default=None,
                        help="estimate LM calls, tokens and cost of the compile without an LM; saves nothing")
    parser.add_argument("--threads", type=int, help="parallel examples in the optimizer (default 1)")
    parser.add_argument("--force", action="store_true", default=None, help="replace an existing --out")
    parser.add_argument("--search", action="append", metavar="KNOB=V1,V2",
                        help="knob search: values to try for a knob (repeatable); Optuna searches them jointly "
                             "with the optimizers given as --optimizer a,b and saves the best program")
    parser.add_argument("--trials", type=int, help="knob search trials (default 10)")
    add_common(parser)


def _settings(pairs) -> dict:
    import json

    from ragzoo.config import knob_dict

    settings = {}
    for name, value in knob_dict(pairs).items():
        try:
            settings[name] = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            settings[name] = value
    return settings


def print_stages(result, out=None, estimate: bool = False) -> None:
    out = out or sys.stdout
    label = "estimate" if estimate else "used"
    print(f"{'stage':<12}{'LM calls':>10}{'prompt tok':>12}{'compl. tok':>12}{'cost USD':>11}", file=out)
    for stage in [*result.stages]:
        u = stage.usage
        print(f"{stage.stage:<12}{u.lm_calls:>10}{u.prompt_tokens:>12}{u.completion_tokens:>12}{u.cost:>11.4f}",
              file=out)
    t = result.usage
    print(f"{'total ' + label:<12}{t.lm_calls:>10}{t.prompt_tokens:>12}{t.completion_tokens:>12}{t.cost:>11.4f}",
          file=out)


def load_train_dev(config: dict) -> tuple[list, list]:
    """Training and validation questions. Without --dev-split, validation is held out of the training split
    (disjoint from the training sample), so compiling never peeks at the dev sets papers report on."""
    from ragzoo import data
    from ragzoo.errors import ConfigError

    train_n, dev_n = int(config["train_n"]), int(config["dev_n"] or 0)
    if train_n < 1 or dev_n < 0:
        raise ConfigError("--train-n must be at least 1 and --dev-n at least 0")
    dev_split = config.get("dev_split") or config["split"]
    if dev_split != config["split"]:
        train = data.load(config["dataset"], config["split"], n=train_n, seed=config["seed"])
        dev = data.load(config["dataset"], dev_split, n=dev_n, seed=config["seed"]) if dev_n else []
        return train, dev
    pool = data.load(config["dataset"], config["split"], n=train_n + dev_n, seed=config["seed"])
    return pool[:train_n], pool[train_n:]


def search_space(pairs: list[str]) -> dict[str, list[str]]:
    """`["k=3,5", "filter=true,false"]` -> `{"k": ["3", "5"], "filter": ["true", "false"]}`."""
    from ragzoo.config import knob_dict

    return {name: [v.strip() for v in str(values).split(",") if v.strip()]
            for name, values in knob_dict(pairs).items()}


def _run_search(config: dict, lm, retriever, train: list, dev: list, knobs: dict, optimizers: list[str],
                dry_run: bool) -> int:
    import dspy

    from ragzoo.artifacts import save
    from ragzoo.commands.evaluate import lm_description
    from ragzoo.errors import ConfigError
    from ragzoo.optimizers import search_knobs

    if knobs:
        raise ConfigError("--knob and --search cannot be combined; give fixed knobs as a single value, "
                          "e.g. --search k=5")
    space = search_space(config["search"])
    with dspy.context(lm=lm), contextlib.redirect_stdout(sys.stderr):
        found = search_knobs(config["method"], retriever, space, trainset=train, valset=dev, optimizers=optimizers,
                             metric=config["metric"], n_trials=int(config["trials"]), seed=int(config["seed"]),
                             threads=int(config["threads"]), max_calls=config.get("max_calls"))
    calls = sum(trial.get("lm_calls", 0) for trial in found.trials)
    best = ", ".join(f"{k}={v}" for k, v in found.best_knobs.items())
    lm_is_dry = str(config.get("lm") or "").startswith("dry-run") or dry_run
    score = "n/a (dry-run: placeholder answers)" if lm_is_dry else f"{found.best_score:.3f}"
    print(f"knob search over {len(found.trials)} trials ({calls} LM calls): best {best} with "
          f"{found.best_optimizer}, dev {config['metric']}={score}")
    if dry_run:
        return 0
    save(found.best_program, config["out"], method=config["method"], knobs=found.best_knobs,
         overwrite=bool(config["force"]), dataset=config["dataset"], split=config["split"],
         dev_split=config["dev_split"] or f"{config['split']} (held out)",
         sizes={"train": len(train), "dev": len(dev)}, optimizer=found.best_optimizer, metric=config["metric"],
         score=found.best_score, lm=lm_description(lm), seed=config["seed"],
         knob_search={"space": space, "optimizers": optimizers, "trials": found.trials},
         config={k: v for k, v in config.items() if k not in ("force",)})
    print(f"saved {config['out']}: {config['method']} with {best}")
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import dspy

    from ragzoo import programs
    from ragzoo.artifacts import build_program, save
    from ragzoo.commands.evaluate import build_lm, build_retriever, lm_description
    from ragzoo.config import knob_dict, resolve
    from ragzoo.errors import ArtifactError, ConfigError
    from ragzoo.optimizers import compile_program, get_preset

    config = resolve(args, DEFAULTS)
    for name in ("method", "dataset"):
        if not config.get(name):
            raise ConfigError(f"--{name} is required (see ragzoo {name}s)")
    lm_is_dry = str(config.get("lm") or "").startswith("dry-run")
    # `--lm dry-run` without --out means the estimate; with --out it compiles (placeholders) and saves,
    # which is what an offline demo of the whole pipeline needs
    dry_run = bool(config["dry_run"]) or (lm_is_dry and not config.get("out"))
    if not dry_run and not config.get("out"):
        raise ConfigError("no --out given; name the artifact directory to write (or use --dry-run)")
    if not dry_run and Path(config["out"]).exists() and not config["force"]:
        raise ArtifactError(f"{config['out']} already exists; choose another --out or pass --force to replace it")
    optimizers = [name.strip() for name in str(config["optimizer"]).split(",") if name.strip()]
    if len(optimizers) > 1 and not config.get("search"):
        raise ConfigError("several optimizers are only searched with --search KNOB=V1,V2; pass one --optimizer")
    for name in optimizers:
        get_preset(name)
    info = programs.info(config["method"])
    knobs = knob_dict(config.get("knob"))
    programs.resolved_knobs(config["method"], **knobs)  # unknown/mistyped knobs fail before any work
    if dry_run:
        lm_spec = config.get("lm") or "dry-run"
        if not lm_spec.startswith("dry-run"):
            lm_spec = f"dry-run:{lm_spec}"  # price the estimate at the real model's list price
        lm = build_lm({**config, "lm": lm_spec, "api_base": None})
    else:
        lm = build_lm(config)
    retriever = build_retriever(config.get("retriever"), config["method"], info.uses_retrieval)
    train, dev = load_train_dev(config)
    if config.get("search"):
        return _run_search(config, lm, retriever, train, dev, knobs, optimizers, dry_run)
    program = build_program(config["method"], retriever=retriever, **knobs)
    with dspy.context(lm=lm), contextlib.redirect_stdout(sys.stderr):  # DSPy optimizers print progress
        result = compile_program(program, trainset=train, valset=dev, optimizer=config["optimizer"],
                                 metric=config["metric"], seed=int(config["seed"]), threads=int(config["threads"]),
                                 settings=_settings(config.get("optimizer_setting")),
                                 max_calls=config.get("max_calls"), max_cost=config.get("max_cost"))
    if dry_run:
        priced = getattr(lm, "priced_model", "")
        print(f"dry run of {config['method']} + {config['optimizer']} on {config['dataset']} "
              f"(train {len(train)}, dev {len(dev)}), priced as {priced}:")
        print_stages(result, estimate=True)
        print("note: placeholder answers rarely pass the metric, so bootstrap-style optimizers try every training "
              "example: the compile estimate is close to the upper bound")
        return 0
    save(result.program, config["out"], overwrite=bool(config["force"]),
         dataset=config["dataset"], split=config["split"], dev_split=config["dev_split"] or f"{config['split']} (held out)",
         sizes={"train": len(train), "dev": len(dev)}, optimizer=config["optimizer"],
         optimizer_settings=result.settings, metric=result.metric, score=result.score,
         lm=lm_description(lm), seed=config["seed"], usage=result.usage.to_dict(),
         stages=[stage.to_dict() for stage in result.stages], cost=round(result.usage.cost, 6),
         stopped=result.stopped, notes=result.notes,
         config={k: v for k, v in config.items() if k not in ("force",)})
    score = "n/a" if result.score is None else f"{result.score:.3f}"
    if lm_is_dry:
        score = "n/a (dry-run: placeholder answers)"
    print(f"saved {config['out']}: {config['method']} compiled with {config['optimizer']}, "
          f"dev {result.metric}={score}")
    print_stages(result)
    if result.stopped:
        print(f"stopped early: {result.stopped}; {' '.join(result.notes)}", file=sys.stderr)
        return 3
    return 0
