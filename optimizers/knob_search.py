"""Knob search: Optuna over a method's knobs (k, filter on/off, agent, depth, ...) jointly with the optimizer
preset, each trial compiling on the train split and scoring on the dev split.

    result = search_knobs("rag", retriever, {"k": [3, 5, 10]}, trainset=train, valset=dev,
                          optimizers=["none", "bootstrap"], n_trials=6, seed=0)
    result.best_knobs, result.best_optimizer, result.best_score, result.best_program

A trial whose knob combination raises a configuration error scores 0; trials are sequential and seeded
(TPE sampler with `seed`), so the same inputs give the same search. `max_calls`/`max_cost` are budgets of
the whole search, over all trials: one meter is open around the study, every trial's compile runs inside it,
and once the budget is reached the search stops; a trial cut short by the budget is recorded but never
chosen (its score was computed with calls refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ragzoo.errors import BudgetExceeded, ConfigError


@dataclass
class KnobSearchResult:
    best_knobs: dict[str, Any]
    best_optimizer: str
    best_score: float
    best_program: Any
    trials: list[dict] = field(default_factory=list)
    stopped: str | None = None


def search_knobs(method: str, retriever, space: dict[str, list], *, trainset: list, valset: list,
                 optimizers: list[str] | tuple[str, ...] = ("bootstrap",), metric: str | Callable = "em",
                 n_trials: int = 10, seed: int = 0, threads: int = 1, max_calls: int | None = None,
                 max_cost: float | None = None) -> KnobSearchResult:
    import optuna

    from ragzoo import programs
    from ragzoo.optimizers.compiler import compile_program
    from ragzoo.optimizers.presets import get_preset
    from ragzoo.usage import exceeded_budget, metering

    programs.info(method)
    for name, values in space.items():
        if not values:
            raise ConfigError(f"knob search: {name!r} has no values to try")
        for value in values:
            programs.resolve_knobs(method, {name: value})
    for name in optimizers:
        get_preset(name)
    if n_trials < 1:
        raise ConfigError("knob search needs at least one trial")
    if not valset:
        raise ConfigError("knob search needs a dev split to score trials; raise --dev-n")

    best: dict[str, Any] = {"score": -1.0}
    trials: list[dict] = []
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: "optuna.Trial") -> float:
        knobs = {name: trial.suggest_categorical(name, list(values)) for name, values in space.items()}
        optimizer = trial.suggest_categorical("optimizer", list(optimizers))
        try:
            program = programs.get(method, retriever=retriever, **knobs)
            result = compile_program(program, trainset=trainset, valset=valset, optimizer=optimizer, metric=metric,
                                     seed=seed, threads=threads)
            score = result.score or 0.0
        except BudgetExceeded as error:
            trials.append({"knobs": knobs, "optimizer": optimizer, "score": 0.0, "stopped": str(error)})
            trial.study.stop()
            return 0.0
        except ConfigError as error:
            trials.append({"knobs": knobs, "optimizer": optimizer, "score": 0.0, "error": str(error)})
            return 0.0
        record = {"knobs": knobs, "optimizer": optimizer, "score": score, "lm_calls": result.usage.lm_calls}
        if result.stopped or exceeded_budget():
            record["stopped"] = result.stopped or exceeded_budget()
            trials.append(record)
            trial.study.stop()
            return score
        trials.append(record)
        if score > best["score"]:
            best.update(score=score, knobs=knobs, optimizer=optimizer, program=result.program)
        return score

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    with metering(max_calls, max_cost) as meter:
        study.optimize(objective, n_trials=n_trials)
    if "program" not in best:
        if meter.exceeded:
            raise BudgetExceeded(f"knob search stopped before any trial finished: {meter.exceeded}")
        raise ConfigError("knob search: no trial succeeded; check the knob values")
    return KnobSearchResult(best["knobs"], best["optimizer"], best["score"], best["program"], trials,
                            stopped=meter.exceeded)
