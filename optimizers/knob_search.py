"""Knob search: a grid over a method's knobs (k, filter on/off, agent, depth, ...) jointly with the optimizer
preset, each trial compiling on the train split and scoring on the dev split.

    result = search_knobs("rag", retriever, {"k": [3, 5, 10]}, trainset=train, valset=dev,
                          optimizers=["none", "bootstrap"], n_trials=6, seed=0)
    result.best_knobs, result.best_optimizer, result.best_score, result.best_program

The space is always a grid (categorical values, typed by `ragzoo.programs.resolve_knobs`: k=5 is an int,
filter=false a bool), so every point is visited at most once: the grid (knob values x optimizers) is shuffled
with `seed` and its first min(n_trials, grid size) points are the trials (`result.grid_size`,
`result.capped` when n_trials was larger). A sampler (TPE) would only help for continuous or huge spaces,
which `--search KNOB=V1,V2` cannot express; it repeated points (12 trials gave 7 distinct configurations).

Trials are recorded in an Optuna study (`storage`: an Optuna storage URL, `sqlite:///s.db`, or
`journal:PATH` for `JournalStorage` + `JournalFileBackend`; None = in memory). Its name is derived from the
method, the typed space, the optimizers, the metric, the questions, the LM's model name and the seed, so every worker started with
the same command joins the same search, and a rerun resumes it. Why not Optuna's `GridSampler`: its
distributed mode lets workers "occasionally suggest the same parameter configuration" (its docs), and its
trial-number-to-point mapping breaks when an interrupted trial is redone. Instead each point is claimed by
creating a marker study `<name>:claim:<point>:<attempt>` in the same storage: creating a study with a taken
name fails atomically (a unique key in the RDB storages, the log order in the journal), so exactly one worker
runs each point. A claim is given up when its trial is interrupted (Ctrl-C, an error, a budget stop) or when
its worker died (same host, process gone); the next run or worker then claims the next attempt. A finished
trial is stored COMPLETE with its record (knobs, optimizer, score, LM calls) and is never redone.

The best program: if the best trial ran in this process its compiled program is kept; otherwise (it ran in an
earlier run or another worker) its configuration is compiled again once at the end, without re-validating
(its stored score stands), which costs that optimizer's compile calls (none for `none`/`labeled`).

`max_calls`/`max_cost` are budgets of the search, over all its trials: one meter is open around the loop, every
trial's compile runs inside it, and once the budget is reached the search stops; a trial cut short by the budget
is recorded (in `result.trials`, and FAIL in the study, so a rerun redoes it) but never chosen (its score was
computed with calls refused). Each stored trial keeps what it sent (`record["spent"]`), and a run that resumes a
study in `storage` counts what its stored trials spent against the budget (`result.spent_before`), as a
resumed compile counts its checkpoint's: the same budget does not pay again. Workers running at the same time
each count the trials stored when they started, not each other's calls in flight.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.storage import open_storage

_ACTIVE_CLAIMS: set[str] = set()  # claims held by searches running in this process


@dataclass
class KnobSearchResult:
    best_knobs: dict[str, Any]
    best_optimizer: str
    best_score: float
    best_program: Any
    trials: list[dict] = field(default_factory=list)
    stopped: str | None = None
    grid_size: int = 0
    n_trials: int = 0  # trials of the search: min(requested, grid size)
    capped: bool = False  # more trials were requested than the grid has points
    ran_here: int = 0  # trials run by this call (the rest were done before or by other workers)
    pending: int = 0  # trials not finished yet (running in other workers, or given up)
    study_name: str = ""
    recompiled_best: bool = False
    space: dict[str, list] = field(default_factory=dict)  # the knob values tried, typed (k=5 an int)
    spent_before: dict = field(default_factory=dict)  # {"lm_calls", "cost"} of the study's stored trials at start


def _storable(record: dict) -> dict:
    """A trial's record as the storage keeps it: its texts (an error, a stop reason) `scrub`bed of secrets, its
    knobs as they are (they are the point: the best one is compiled again from them)."""
    from ragzoo.secrets import scrub

    return {**scrub(record), "knobs": record["knobs"]}


def _dev_ci(scores: list[float]) -> list[float] | None:
    """[low, high] of the trial's seeded 95% bootstrap CI over its dev questions: how far apart trials must be
    to be told apart."""
    from ragzoo import stats

    if not scores:
        return None
    interval = stats.bootstrap_ci(scores)
    return [interval.low, interval.high]


def grid_points(space: dict[str, list], optimizers, seed: int) -> list[dict]:
    """Every (knobs, optimizer) point of the grid once, shuffled with `seed`."""
    names = list(space)
    points = [{"knobs": dict(zip(names, values[:-1])), "optimizer": values[-1]}
              for values in itertools.product(*space.values(), list(optimizers))]
    random.Random(seed).shuffle(points)
    return points


def _key(point: dict) -> str:
    return json.dumps(point, sort_keys=True, default=str)


def _param(value: Any) -> Any:
    """An Optuna categorical choice: scalars as they are, anything else (a list knob) as its JSON text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value)


def _params(knobs: dict, optimizer: str) -> dict:
    return {**{name: _param(value) for name, value in knobs.items()}, "optimizer": optimizer}


def _fingerprint(examples: list) -> list:
    return [str(getattr(e, "id", None) or getattr(e, "question", None) or e) for e in examples]


def study_name_for(method: str, space: dict, optimizers, metric, trainset, valset, seed: int,
                   lm: str | None = None) -> str:
    metric_name = metric if isinstance(metric, str) else getattr(metric, "__name__", "metric")
    blob = json.dumps({"method": method, "space": space, "optimizers": list(optimizers), "metric": metric_name,
                       "lm": lm,
                       "train": _fingerprint(trainset), "dev": _fingerprint(valset), "seed": seed},
                      sort_keys=True, default=str)
    return f"ragzoo-search-{method}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(attrs: dict) -> bool:
    """A claim whose trial was given up, or whose worker (on this host) is gone."""
    if attrs.get("released"):
        return True
    if attrs.get("host") != socket.gethostname() or "pid" not in attrs:
        return False  # another machine's (or a claim being written): assume it is alive
    if attrs["pid"] == os.getpid():
        return attrs.get("claim") not in _ACTIVE_CLAIMS
    return not _alive(int(attrs["pid"]))


def _claim(storage, name: str, index: int) -> "optuna.Study | None":
    """Claim grid point `index` of study `name`: the marker study of the first attempt not given up."""
    import optuna

    for attempt in itertools.count():
        claim_name = f"{name}:claim:{index}:{attempt}"
        try:
            marker = optuna.create_study(study_name=claim_name, storage=storage)
        except optuna.exceptions.DuplicatedStudyError:
            marker = optuna.load_study(study_name=claim_name, storage=storage)
            if _stale(marker.user_attrs):
                continue
            return None
        _ACTIVE_CLAIMS.add(claim_name)
        for attr, value in (("host", socket.gethostname()), ("pid", os.getpid()), ("claim", claim_name)):
            marker.set_user_attr(attr, value)
        return marker
    return None  # unreachable


def claim_once(storage: str, name: str) -> bool:
    """True for exactly one caller per `name` in `storage` (e.g. the one worker that saves the result)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        optuna.create_study(study_name=name, storage=open_storage(storage))
    except optuna.exceptions.DuplicatedStudyError:
        return False
    return True


def _stored_spend(study) -> tuple[int, float]:
    """(LM calls sent, USD) of every trial stored in `study` (finished or cut by a budget)."""
    calls, cost = 0, 0.0
    for trial in study.get_trials(deepcopy=False):
        spent = (trial.user_attrs.get("record") or {}).get("spent") or {}
        calls += int(spent.get("lm_calls", 0))
        cost += float(spent.get("cost", 0.0))
    return calls, cost


def _release(marker) -> None:
    name = marker.study_name
    try:
        marker.set_user_attr("released", True)
    finally:
        _ACTIVE_CLAIMS.discard(name)


def search_knobs(method: str, retriever, space: dict[str, list], *, trainset: list, valset: list,
                 optimizers: list[str] | tuple[str, ...] = ("bootstrap",), metric: str | Callable = "em",
                 n_trials: int = 10, seed: int = 0, threads: int = 1, max_calls: int | None = None,
                 max_cost: float | None = None, storage: str | None = None,
                 study_name: str | None = None) -> KnobSearchResult:
    import dspy
    import optuna

    from ragzoo import programs
    from ragzoo.knobs import as_json
    from ragzoo.optimizers.compiler import compile_program
    from ragzoo.optimizers.presets import get_preset
    from ragzoo.usage import exceeded_budget, metering

    programs.info(method)
    typed: dict[str, list] = {}
    for name, values in space.items():
        if not values:
            raise ConfigError(f"knob search: {name!r} has no values to try")
        typed[name] = []
        for value in values:
            coerced = as_json({name: programs.resolve_knobs(method, {name: value})[name]})[name]
            if coerced not in typed[name]:
                typed[name].append(coerced)
    optimizers = list(dict.fromkeys(optimizers))
    for name in optimizers:
        get_preset(name)
    if n_trials < 1:
        raise ConfigError("knob search needs at least one trial")
    if not valset:
        raise ConfigError("knob search needs a dev split to score trials; raise --dev-n")

    points = grid_points(typed, optimizers, seed)
    todo = points[:n_trials]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(storage)
    lm_name = getattr(dspy.settings.lm, "model", None)  # a dry-run's placeholders never count for a real LM
    name = study_name or study_name_for(method, typed, optimizers, metric, trainset, valset, seed, lm_name)
    study = optuna.create_study(study_name=name, storage=store, direction="maximize", load_if_exists=True)
    distributions = {**{k: optuna.distributions.CategoricalDistribution([_param(x) for x in v])
                        for k, v in typed.items()},
                     "optimizer": optuna.distributions.CategoricalDistribution(optimizers)}

    spent_calls, spent_cost = _stored_spend(study) if storage else (0, 0.0)  # the budget is what is left

    def finished() -> dict[str, Any]:
        return {t.user_attrs.get("point"): t for t in study.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.COMPLETE and "point" in t.user_attrs}

    programs_here: dict[str, Any] = {}
    stopped_here: list[dict] = []
    ran_here = 0
    with metering(max_calls, max_cost, earlier=(spent_calls, spent_cost)) as meter:
        for index, point in enumerate(todo):
            key = _key(point)
            if key in finished():
                continue
            marker = _claim(store, name, index)
            if marker is None:
                continue  # another worker has it
            if key in finished():  # finished between the check and the claim
                _release(marker)
                continue
            knobs, optimizer = point["knobs"], point["optimizer"]
            record: dict[str, Any] = {"knobs": knobs, "optimizer": optimizer}
            ran_here += 1
            sent_before, cost_before = meter.usage.lm_calls - meter.usage.cached_calls, meter.usage.total_cost
            try:
                program = programs.get(method, retriever=retriever, **knobs)
                result = compile_program(program, trainset=trainset, valset=valset, optimizer=optimizer,
                                         metric=metric, seed=seed, threads=threads)
                record.update(score=result.score or 0.0, lm_calls=result.usage.lm_calls, ci=_dev_ci(result.val_scores))
                stop = result.stopped or exceeded_budget()
            except BudgetExceeded as error:
                record.update(score=0.0, stopped=str(error))
                stop = str(error)
            except ConfigError as error:  # a knob combination the constructor refuses: scored 0, kept
                record.update(score=0.0, error=str(error))
                stop, result = None, None
            except BaseException:  # Ctrl-C or a crash: give the point up so a rerun redoes it
                try:
                    if storage:  # what the cut trial sent is paid: a rerun's budget counts it (`_stored_spend`)
                        record["spent"] = {"lm_calls": meter.usage.lm_calls - meter.usage.cached_calls - sent_before,
                                           "cost": meter.usage.total_cost - cost_before}
                        record["stopped"] = "interrupted"
                        study.add_trial(optuna.trial.create_trial(
                            params=_params(knobs, optimizer), distributions=distributions,
                            state=optuna.trial.TrialState.FAIL,
                            user_attrs={"point": key, "record": _storable(record)}))
                finally:
                    _release(marker)
                raise
            record["spent"] = {"lm_calls": meter.usage.lm_calls - meter.usage.cached_calls - sent_before,
                               "cost": meter.usage.total_cost - cost_before}
            if stop:
                record["stopped"] = stop
                stopped_here.append(record)
                study.add_trial(optuna.trial.create_trial(
                    params=_params(knobs, optimizer), distributions=distributions,
                    state=optuna.trial.TrialState.FAIL, user_attrs={"point": key, "record": _storable(record)}))
                _release(marker)
                break
            study.add_trial(optuna.trial.create_trial(
                params=_params(knobs, optimizer), distributions=distributions, value=record["score"],
                user_attrs={"point": key, "record": _storable(record)}))
            _ACTIVE_CLAIMS.discard(marker.study_name)
            if result is not None and "error" not in record:
                programs_here[key] = result.program

        done = finished()
        trials = [t.user_attrs["record"] for t in sorted(done.values(), key=lambda t: t.number)] + stopped_here
        candidates = [t for t in done.values() if "error" not in t.user_attrs["record"]]
        summary = dict(grid_size=len(points), n_trials=len(todo), capped=n_trials > len(points),
                       ran_here=ran_here, pending=sum(_key(p) not in done for p in todo), study_name=name,
                       spent_before={"lm_calls": spent_calls, "cost": spent_cost})
        if not candidates:
            if meter.exceeded:
                raise BudgetExceeded(f"knob search stopped before any trial finished: {meter.exceeded}")
            if summary["pending"] and not stopped_here:
                raise ConfigError(f"knob search: no trial finished yet; {summary['pending']} still running in "
                                  f"other workers of study {name}")
            raise ConfigError("knob search: no trial succeeded; check the knob values")
        # highest score; ties go to the earlier point of the grid
        order = {_key(p): i for i, p in enumerate(points)}
        best = max(candidates, key=lambda t: (t.value, -order.get(t.user_attrs["point"], 0)))
        record, key = best.user_attrs["record"], best.user_attrs["point"]
        program, recompiled = programs_here.get(key), False
        if program is None and not meter.exceeded:
            # the best trial ran earlier or in another worker: compile its configuration once more (inside the
            # search's budget), without re-validating: its stored score stands
            program = programs.get(method, retriever=retriever, **record["knobs"])
            program = compile_program(program, trainset=trainset, valset=valset, optimizer=record["optimizer"],
                                      metric=metric, seed=seed, threads=threads, validate=False).program
            recompiled = True
    return KnobSearchResult(dict(record["knobs"]), record["optimizer"], float(best.value), program, trials,
                            stopped=meter.exceeded, recompiled_best=recompiled, space=typed, **summary)
