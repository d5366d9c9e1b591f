"""`ragzoo compile`: compile a method's prompts with an optimizer preset and save the artifact.

`--dry-run` runs the same compile with the dry-run LM (placeholder answers, real retrieval, counted prompts)
and prints the LM calls, tokens and estimated cost per stage (a request identical to an earlier one counted as
served from the response cache, as a real run sends it, and what a `--no-cache` run would send), then saves
nothing. `--max-calls` / `--max-cost` stop a real compile cleanly, keeping the best program so far (the manifest
says so); with `--search` they are totals over all trials. A method that declares compile stages (FILCO's filter
on oracle labels, RA-ISF's gates with gate_stages=true, SKR's memory) has them run first; the manifest records each one
(`compile_stages`, and its usage under `stages`), see docs/staged_compilation.md. Questions come from
`--dataset [--split]` or `--data FILE`; without `--split`/`--metric` the dataset's defaults apply (a training
split on disk, disjoint from its evaluation split where possible), recorded in the manifest (`defaults_used`)
and named on stderr.

A real compile keeps its optimizer's progress in `<out>.checkpoint/` (bootstrap: the demos so far, after each
training example; GEPA: its own state) until the artifact is saved; after Ctrl-C, an error or a budget stop,
`--resume` continues from it (refused, naming what differs, if the method, knobs, optimizer, data, seed, LM or
adapter changed). See `ragzoo.optimizers.compiler.CompileCheckpoint`."""

from __future__ import annotations

import argparse
import contextlib
import sys

from ragzoo.commands.common import DATA_DEFAULTS, LM_DEFAULTS, add_data_args, add_lm_args, add_tracking_args

DEFAULTS = {
    "method": None, **{k: v for k, v in DATA_DEFAULTS.items() if k != "n"}, "dev_split": None, "train_n": 50,
    "dev_n": 50, "optimizer": "bootstrap", "metric": None, **LM_DEFAULTS, "out": None, "dry_run": False,
    "threads": 1, "force": False, "optimizer_setting": [], "search": [], "trials": 10,
    "storage": None, "resume": False,
}


class _Interrupted:
    """What an interrupted compile keeps (the CLI prints `str(INTERRUPTED)` on Ctrl-C): the checkpoint of the
    compile under way, if it kept anything."""

    NOTHING = ("nothing was saved: a compile writes --out only when it finishes (with --search --storage URL "
               "the finished trials are kept: rerun the same command to continue)")

    def __init__(self) -> None:
        self.checkpoint = None

    def __str__(self) -> str:
        checkpoint = self.checkpoint
        if checkpoint is None or not checkpoint.has_progress():
            return self.NOTHING
        return (f"nothing was saved to --out (a compile writes it only when it finishes); kept: {checkpoint.kept()}: "
                f"rerun the same command with --resume to continue")


# What an interrupted run keeps (the CLI prints it on Ctrl-C and on SIGTERM).
INTERRUPTED = _Interrupted()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", help="method id (see ragzoo methods)")
    add_data_args(parser, n=False, split_help="training split (default: the dataset's, always on disk and "
                                              "disjoint from its evaluation split where possible, e.g. "
                                              "hotpotqa: train, nq_open: efficientqa_dev; see ragzoo datasets)")
    parser.add_argument("--dev-split", help="validation split (default: held out of --split or --data, disjoint "
                                            "from training)")
    parser.add_argument("--train-n", type=int, help="training questions (default 50)")
    parser.add_argument("--dev-n", type=int, help="validation questions (default 50; 0 = no validation)")
    parser.add_argument("--optimizer", help="optimizer preset (default bootstrap; see ragzoo optimizers)")
    parser.add_argument("--optimizer-setting", action="append", metavar="K=V",
                        help="override a preset setting, e.g. num_candidate_programs=4")
    parser.add_argument("--metric", help="metric: em, f1, acc, contains (default: the dataset's: em; "
                                         "strategyqa: acc)")
    parser.add_argument("--out", help="artifact directory to write")
    parser.add_argument("--dry-run", action="store_true", default=None,
                        help="estimate LM calls, tokens and cost of the compile without an LM; saves nothing")
    parser.add_argument("--threads", type=int, help="parallel examples in the optimizer (default 1)")
    parser.add_argument("--force", action="store_true", default=None, help="replace an existing --out")
    parser.add_argument("--search", action="append", metavar="KNOB=V1,V2",
                        help="knob search: values to try for a knob (repeatable); Optuna searches them jointly "
                             "with the optimizers given as --optimizer a,b and saves the best program")
    parser.add_argument("--trials", type=int, help="knob search trials (default 10; at most the grid's size: "
                                                   "each point is tried once)")
    parser.add_argument("--storage", help="knob search in an Optuna storage (sqlite:///search.db, journal:PATH, "
                                          "postgresql://...): workers started with the same command share the "
                                          "search, and a rerun resumes it")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="continue an interrupted compile from its checkpoint <out>.checkpoint (bootstrap's "
                             "demos so far, GEPA's state); refused if the method, knobs, optimizer, data, seed, "
                             "LM or adapter differ. A budget stop saved its artifact at --out: add --force to "
                             "replace it (the budget counts what the earlier runs spent)")
    add_lm_args(parser)
    add_tracking_args(parser)


def _fingerprint(config: dict, knobs: dict, train: list, dev: list, lm: dict | None = None) -> dict:
    """What a compile checkpoint is a checkpoint of: a resumed compile must match it key by key. The options that
    change answers come from the list evaluate's resume checks too (`ragzoo.config.answer_view`; `lm` is the LM's
    description), then what only a compile has: its question samples."""
    import hashlib
    import json

    from ragzoo.config import answer_view

    def digest(examples: list) -> str:
        text = json.dumps([dict(example.toDict()) for example in examples], sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    answers = {**config, "knobs": knobs, "optimizer_settings": _settings(config.get("optimizer_setting")),
               "metrics": [name.strip() for name in str(config.get("metric") or "").split(",") if name.strip()],
               "adapter": config.get("adapter") or "chat"}
    return {**answer_view(answers, lm if lm is not None else {"model": config.get("lm")}),
            "dev_split": config.get("dev_split"), "train_n": config.get("train_n"), "dev_n": config.get("dev_n"),
            "train_questions": digest(train), "dev_questions": digest(dev)}


def _search_study_name(config: dict, space: dict, optimizers: list[str], train: list, dev: list, lm: dict) -> str:
    """The Optuna study of a knob search: named by the search space and everything a checkpoint is of."""
    import hashlib
    import json

    blob = json.dumps({"space": space, "optimizers": optimizers, **_fingerprint(config, {}, train, dev, lm)},
                      sort_keys=True, default=str)
    return f"ragzoo-search-{config['method']}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


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
    """The stage table: every call count beside how many of those calls the response cache served (they spend
    no tokens and nothing is sent), then, when any was, what the same calls would use without the cache."""
    out = out or sys.stdout
    label = "estimate" if estimate else "used"
    width = max([16, *(len(stage.stage) + 2 for stage in result.stages)])  # stage:self_knowledge is 20 long
    print(f"{'stage':<{width}}{'LM calls':>10}{'from cache':>12}{'prompt tok':>12}{'compl. tok':>12}{'cost USD':>11}",
          file=out)
    for stage in [*result.stages]:
        u = stage.usage
        print(f"{stage.stage:<{width}}{u.lm_calls:>10}{u.cached_calls:>12}{u.prompt_tokens:>12}{u.completion_tokens:>12}"
              f"{u.cost:>11.4f}", file=out)
    t = result.usage
    print(f"{'total ' + label:<{width}}{t.lm_calls:>10}{t.cached_calls:>12}{t.prompt_tokens:>12}{t.completion_tokens:>12}"
          f"{t.cost:>11.4f}", file=out)
    sent = t.lm_calls - t.cached_calls
    if t.cached_calls:
        print(f"{t.cached_calls} of {t.lm_calls} LM calls {'would be' if estimate else 'were'} served from the "
              f"response cache (identical requests: no tokens, no cost); {sent} "
              f"{'would be' if estimate else 'were'} sent. Without the cache (--no-cache): {t.lm_calls} calls sent, "
              f"{t.prompt_tokens + t.cached_prompt_tokens} prompt + "
              f"{t.completion_tokens + t.cached_completion_tokens} completion tokens, "
              f"${t.cost + t.cached_cost:.4f}", file=out)
    if t.server_seconds or t.server_cost:  # --price-per-hour: the server's wall time, apart from the tokens
        rented = f"{t.server_seconds:.0f} s of a server rented by the hour"
        print(f"{'server':<{width}}{rented:>46}{t.server_cost:>11.4f}", file=out)
        print(f"{'total cost':<{width}}{'':>46}{t.total_cost:>11.4f}", file=out)
    for note in getattr(result, "notes", None) or []:  # a stage skipped or labelled otherwise is never silent
        if note.startswith("compile stage ") or "dev question(s) failed" in note:
            print(f"note: {note}", file=out)


def load_train_dev(config: dict) -> tuple[list, list]:
    """Training and validation questions. Without --dev-split, validation is held out of the training split
    (or the --data file), disjoint from the training sample, so compiling never peeks at the dev sets papers
    report on. A defaulted split that overlaps the dataset's evaluation split drops those questions."""
    from ragzoo import data
    from ragzoo.commands.common import load_examples
    from ragzoo.errors import ConfigError

    train_n, dev_n = int(config["train_n"]), int(config["dev_n"] or 0)
    if train_n < 1 or dev_n < 0:
        raise ConfigError("--train-n must be at least 1 and --dev-n at least 0")
    exclude = (config.get("defaults_used") or {}).get("excluded_split")
    options = {"exclude_split": exclude} if exclude else {}
    dev_split = config.get("dev_split") or config.get("split")
    if config.get("data"):
        if config.get("dev_split"):
            raise ConfigError("--dev-split names a split of --dataset; with --data the validation questions are "
                              "held out of the file")
    elif dev_split != config["split"]:
        train = load_examples(config, n=train_n, **options)
        dev = data.load(config["dataset"], dev_split, n=dev_n, seed=config["seed"]) if dev_n else []
        return train, dev
    pool = load_examples(config, n=train_n + dev_n, **options)
    return pool[:train_n], pool[train_n:]


def search_space(pairs: list[str]) -> dict[str, list[str]]:
    """`["k=3,5", "filter=true,false"]` -> `{"k": ["3", "5"], "filter": ["true", "false"]}`."""
    from ragzoo.config import knob_dict

    return {name: [v.strip() for v in str(values).split(",") if v.strip()]
            for name, values in knob_dict(pairs).items()}


def _run_search(config: dict, lm, retriever, train: list, dev: list, space: dict[str, list[str]],
                optimizers: list[str], dry_run: bool, track=None) -> int:
    from pathlib import Path

    import dspy

    from ragzoo.artifacts import save
    from ragzoo.commands.common import EXIT_STOPPED, build_adapter, lm_description, say_defaults
    from ragzoo.engines import is_dry_run
    from ragzoo.optimizers import search_knobs
    from ragzoo.optimizers.knob_search import claim_once

    storage = None if dry_run else config.get("storage")  # an estimate is not a search to share or resume
    # rerunning the same command resumes its study in --storage; with other options that change answers (adapter,
    # re-asks, LM, endpoint, ...: the list every resume checks) it is another study, never these trials
    study = _search_study_name(config, space, optimizers, train, dev, lm_description(lm)) if storage else None
    with dspy.context(lm=lm, adapter=build_adapter(config)), contextlib.redirect_stdout(sys.stderr):
        found = search_knobs(config["method"], retriever, space, trainset=train, valset=dev, optimizers=optimizers,
                             metric=config["metric"], n_trials=int(config["trials"]), seed=int(config["seed"]),
                             threads=int(config["threads"]), storage=storage, study_name=study,
                             # budgets are totals over all trials (search_knobs meters the whole search)
                             max_calls=config.get("max_calls"), max_cost=config.get("max_cost"))
    placeholder = is_dry_run(lm)
    if found.capped:
        print(f"note: --trials {config['trials']} is more than the grid's {found.grid_size} points; each point is "
              f"tried once", file=sys.stderr)
    for trial in found.trials:
        shown = ", ".join(f"{k}={v}" for k, v in trial["knobs"].items())
        score = "n/a" if placeholder else f"{trial['score']:.3f}"
        if not placeholder and trial.get("ci"):
            score += f" [95% CI {trial['ci'][0]:.3f}, {trial['ci'][1]:.3f}]"
        note = f"  stopped: {trial['stopped']}" if trial.get("stopped") else (
            f"  error: {trial['error']}" if trial.get("error") else "")
        print(f"trial {shown}  {trial['optimizer']}  dev {config['metric']}={score}  "
              f"LM calls {trial.get('lm_calls', (trial.get('spent') or {}).get('lm_calls', 0))}{note}")
    calls = sum(trial.get("lm_calls", 0) for trial in found.trials)
    best = ", ".join(f"{k}={v}" for k, v in found.best_knobs.items())
    score = "n/a (dry-run: placeholder answers)" if placeholder else f"{found.best_score:.3f}"
    where = f", {found.ran_here} run here; study {found.study_name} in {storage}" if storage else ""
    tied = [] if placeholder else [trial for trial in found.trials if not trial.get("error")
                                   and not trial.get("stopped") and abs(trial["score"] - found.best_score) < 1e-12]
    head = f"knob search over {len(found.trials)} trials of a {found.grid_size}-point grid ({calls} LM calls{where})"
    if len(tied) > 1:  # the dev questions cannot tell these apart: naming one "best" would be a coin toss
        names = "; ".join(f"{', '.join(f'{k}={v}' for k, v in t['knobs'].items())} with {t['optimizer']}"
                          for t in tied)
        print(f"{head}: no best, {len(tied)} trials tie at dev {config['metric']}={score} ({names}); saving the "
              f"first in the search's seeded order, {best} with {found.best_optimizer} (more --dev-n may separate them)")
    else:
        print(f"{head}: best {best} with {found.best_optimizer}, dev {config['metric']}={score}")
    stopped = getattr(found, "stopped", None)
    if dry_run:
        say_defaults("compile", config)
        return 0
    if found.pending and not stopped:
        print(f"ragzoo compile: {found.pending} trial(s) still running in other workers of this search; the worker "
              f"that finishes last saves {config['out']}", file=sys.stderr)
        return 0
    if stopped and storage:  # a search others can finish: only the one that finishes it saves --out
        print(f"ragzoo compile: stopped: {stopped}; the search is not finished and saved nothing: its finished "
              f"trials are kept in {storage}, and the run that finishes the search saves {config['out']}: rerun the "
              f"same command with a larger --max-calls/--max-cost (the budget counts what the search's stored "
              f"trials spent)", file=sys.stderr)
        return EXIT_STOPPED
    if found.best_program is None:  # the best trial ran before, and the budget left none to compile it again
        print(f"ragzoo compile: stopped: {stopped}; the finished trials are kept in the search's storage: rerun "
              f"with a larger --max-calls/--max-cost to compile the best one and save {config['out']}",
              file=sys.stderr)
        return 3
    if storage and not config["force"] and not claim_once(storage, f"{found.study_name}:saved:"
                                                                   f"{Path(config['out']).resolve()}") \
            and Path(config["out"]).exists():
        print(f"ragzoo compile: search complete; another worker saved {config['out']}", file=sys.stderr)
        return 0
    save(found.best_program, config["out"], method=config["method"], knobs=found.best_knobs,
         overwrite=bool(config["force"]), dataset=config["dataset"], split=config["split"],
         data=config.get("data"), dev_split=_dev_split_label(config),
         sizes={"train": len(train), "dev": len(dev)}, optimizer=found.best_optimizer, metric=config["metric"],
         score=found.best_score, lm=lm_description(lm), seed=config["seed"],
         knob_search={"space": found.space or space, "optimizers": optimizers, "trials": found.trials,
                      "grid_size": found.grid_size, "study": found.study_name if storage else None,
                      "best_recompiled": found.recompiled_best},
         defaults_used=config.get("defaults_used"), stopped=stopped,
         config={k: v for k, v in config.items() if k not in ("force",)})
    if track is not None:
        track.finish(config["out"])
    print(f"saved {config['out']}: {config['method']} with {best}")
    say_defaults("compile", config)
    if stopped:
        print(f"ragzoo compile: stopped early: {stopped}; the best program so far is saved", file=sys.stderr)
        return EXIT_STOPPED
    return 0


def _dev_split_label(config: dict) -> str:
    if config.get("dev_split"):
        return config["dev_split"]
    return f"{config.get('split') or config.get('data')} (held out)"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import dspy

    from ragzoo import programs
    from ragzoo.artifacts import save
    from ragzoo.adapters import adapter_name
    from ragzoo.commands.common import (EXIT_STOPPED, apply_dataset_defaults, budget_stop, build_adapter, build_lm,
                                        build_retriever, check_metrics, check_question_source,
                                        find_budget_error, lm_description, say_defaults)
    from ragzoo.config import knob_dict, resolve
    from ragzoo.engines import is_dry_run, is_dry_run_spec
    from ragzoo.errors import ArtifactError, ConfigError
    from ragzoo.optimizers import compile_program, get_preset

    INTERRUPTED.checkpoint = None
    config = resolve(args, DEFAULTS)
    if not config.get("method"):
        raise ConfigError("--method is required (see ragzoo methods)")
    check_question_source(config)
    # `--lm dry-run` without --out means the estimate; with --out it compiles (placeholders) and saves,
    # which is what an offline demo of the whole pipeline needs
    dry_run = bool(config["dry_run"]) or (is_dry_run_spec(config.get("lm")) and not config.get("out"))
    if not dry_run and not config.get("out"):
        raise ConfigError("no --out given; name the artifact directory to write (or use --dry-run)")
    from ragzoo import tracking

    # an estimate saves nothing: there is no run to track
    track = tracking.from_args(args, "compile") if not dry_run else tracking.Tracker(None, "compile")
    if not dry_run:  # before any LM call: a result that cannot be saved must not be paid for
        from ragzoo.artifacts import check_replaceable
        from ragzoo.config import check_out_writable

        check_out_writable(config["out"])
        check_replaceable(config["out"], bool(config["force"]))
    if not dry_run and Path(config["out"]).exists() and not config["force"]:
        raise ArtifactError(f"{config['out']} already exists; choose another --out or pass --force to replace it")
    optimizers = [name.strip() for name in str(config["optimizer"]).split(",") if name.strip()]
    if config.get("resume") and (dry_run or config.get("search")):
        raise ConfigError("--resume continues an interrupted compile from <out>.checkpoint; a dry run keeps none, "
                          "and a knob search resumes from its --storage (rerun the same command)")
    if not config.get("search") and (config.get("storage") or getattr(args, "trials", None) is not None):
        raise ConfigError("--storage and --trials belong to a knob search (--search KNOB=V1,V2); a single compile "
                          "resumes from <out>.checkpoint with --resume")
    if len(optimizers) > 1 and not config.get("search"):
        raise ConfigError("several optimizers are only searched with --search KNOB=V1,V2; pass one --optimizer")
    for name in optimizers:
        get_preset(name)
    apply_dataset_defaults(config, split_kind="train", metric_kind="headline")
    check_metrics(config["metric"], config)  # and builds an LM judge for --metric judge
    if any(name.partition(":")[0] == "knn" for name in optimizers):  # a KNN artifact keeps its metric by name
        from ragzoo.optimizers.knn import bootstrap_problem

        problem = bootstrap_problem({"metric": str(config["metric"]).split(",")[0].strip()})
        if problem:
            raise ConfigError(f"--optimizer knn: {problem}; pass a built-in --metric")
    info = programs.info(config["method"])
    knobs = knob_dict(config.get("knob"))
    resolved = programs.resolve_knobs(config["method"], knobs)  # unknown/mistyped knobs fail before any work
    space = search_space(config["search"]) if config.get("search") else None  # before the index is built
    if space is not None and knobs:
        raise ConfigError("--knob and --search cannot be combined; give fixed knobs as a single value, "
                          "e.g. --search k=5")
    if dry_run:
        lm_spec = config.get("lm") or "dry-run"
        if not is_dry_run_spec(lm_spec):
            lm_spec = f"dry-run:{lm_spec}"  # price the estimate at the real model's list price
        lm = build_lm({**config, "lm": lm_spec, "api_base": None})
        # price what would be sent: a repeated identical request is answered by the response cache, unless the
        # run is --no-cache
        lm.engine.start_estimate(model_cache=not config.get("no_cache"))
    else:
        lm = build_lm(config)
    train, dev = load_train_dev(config)
    # after the questions: a `fixed` retriever replays the passages recorded with them
    retriever = build_retriever(config.get("retriever"), examples=[*train, *dev]) if info.uses_retrieval else None
    if config.get("search"):
        try:
            return _run_search(config, lm, retriever, train, dev, space, optimizers, dry_run, track)
        except Exception as error:
            budget = find_budget_error(error)
            if budget is None:
                raise
            return budget_stop("compile", budget)
    program = programs.get(config["method"], retriever=retriever, **resolved)
    adapter = build_adapter(config)
    checkpoint = None
    if not dry_run:  # the optimizer's progress, kept beside --out until the artifact is saved
        from ragzoo.optimizers.compiler import CompileCheckpoint, checkpoint_path

        checkpoint = CompileCheckpoint.open(checkpoint_path(config["out"]),
                                            _fingerprint(config, resolved, train, dev, lm_description(lm)),
                                            resume=bool(config.get("resume")), force=bool(config["force"]))
        if checkpoint.resumed:
            print(f"ragzoo compile: resuming from {checkpoint.kept()}", file=sys.stderr)
    INTERRUPTED.checkpoint = checkpoint  # Ctrl-C from here on says what the checkpoint kept
    # a resumed compile's earlier runs were paid: they count against --max-calls/--max-cost and in the manifest
    from ragzoo.usage import Usage, metering

    earlier = checkpoint.spent() if checkpoint is not None and checkpoint.resumed else Usage()
    max_calls, max_cost = config.get("max_calls"), config.get("max_cost")  # less `earlier`: `usage.Budget`
    with metering() as this_run:  # what this run sends, however it ends
        try:
            with dspy.context(lm=lm, adapter=adapter), contextlib.redirect_stdout(sys.stderr), \
                    track.working(config.get("out")):  # optimizers print
                result = compile_program(program, trainset=train, valset=dev, optimizer=config["optimizer"],
                                         metric=config["metric"], seed=int(config["seed"]),
                                         threads=int(config["threads"]),
                                         settings=_settings(config.get("optimizer_setting")),
                                         max_calls=max_calls, max_cost=max_cost,
                                         earlier=(earlier.lm_calls - earlier.cached_calls, earlier.total_cost),
                                         stage_resources={"dataset": config.get("dataset")},
                                         **({"checkpoint": checkpoint} if checkpoint is not None else {}))
        except BaseException:
            if checkpoint is not None and not checkpoint.has_progress():
                checkpoint.remove()  # a compile that failed before keeping anything leaves no folder behind
            elif checkpoint is not None:
                checkpoint.add_spent(this_run.usage)
            raise
    if checkpoint is not None and result.stopped:
        checkpoint.add_spent(this_run.usage)
    usage = result.usage
    if earlier.lm_calls or earlier.total_cost:
        usage.merge(earlier)
        result.notes.append(f"resumed: the usage counts the earlier runs' {earlier.lm_calls} LM call(s) and "
                            f"${earlier.total_cost:.4f}; this run: {result.usage.lm_calls} call(s)")
    source = config.get("dataset") or config.get("data")
    if dry_run:
        priced = getattr(lm, "priced_model", "")
        print(f"dry run of {config['method']} + {config['optimizer']} on {source} "
              f"(train {len(train)}, dev {len(dev)}), priced as {priced}:")
        print_stages(result, estimate=True)
        print("note: under the dry-run LM every trace passes the metric, as with a model that answers the training "
              "questions right: the estimate counts the bootstrapped demos in every later prompt")
        if not config.get("no_cache"):
            print("note: a request identical to an earlier one (same prompt and options) is counted as served from "
                  "the response cache, as a real run sends it; real answers differ from placeholders, so the "
                  "requests that depend on them may repeat more or less")
        say_defaults("compile", config)
        return 0
    save(result.program, config["out"], overwrite=bool(config["force"]),
         dataset=config["dataset"], data=config.get("data"), split=config.get("split"),
         dev_split=_dev_split_label(config), defaults_used=config.get("defaults_used"),
         sizes={"train": len(train), "dev": len(dev)}, optimizer=config["optimizer"],
         optimizer_settings=result.settings, metric=result.metric, score=result.score,
         val_failures=result.val_failures, lm=lm_description(lm), seed=config["seed"], usage=usage.to_dict(),
         stages=[stage.to_dict() for stage in result.stages], cost=round(usage.cost, 6),
         stopped=result.stopped, notes=result.notes, compile_stages=result.staged,
         adapter=adapter_name(adapter), max_reasks=getattr(adapter, "max_reasks", None),
         config={k: v for k, v in config.items() if k not in ("force",)})
    track.finish(config["out"])
    score = "n/a" if result.score is None else f"{result.score:.3f}"
    if is_dry_run(lm):
        score = "n/a (dry-run: placeholder answers)"
    INTERRUPTED.checkpoint = None
    if checkpoint is not None:
        if result.stopped and checkpoint.has_progress():
            print(f"ragzoo compile: kept {checkpoint.kept()}: rerun with --resume --force and a larger budget to "
                  f"continue", file=sys.stderr)
        else:
            checkpoint.remove()  # the artifact is saved: nothing left to resume
    print(f"saved {config['out']}: {config['method']} compiled with {config['optimizer']}, "
          f"dev {result.metric}={score}")
    print_stages(result)
    say_defaults("compile", config)
    if result.stopped:
        print(f"stopped early: {result.stopped}; {' '.join(result.notes)}", file=sys.stderr)
        return EXIT_STOPPED
    return 0
