"""Staged compilation: a method compiles some predictors on their own labels before the end-to-end compile.

A program opts in by defining `compile_stages(self) -> list[Stage]` (`Stage` is declared in
`ragzoo.programs.base`, so programs never import the optimizers). `compile_program` (with `stages=True`, the
default) then runs, in order:

1. each stage: `stage.build_trainset(trainset)` turns the training questions into labelled examples for the
   stage's predictor(s) (FILCO: oracle-labelled filter inputs; RA-ISF: gate labels built from data), and the
   preset's optimizer compiles a small module holding only those predictors against `stage.metric`;
2. the end-to-end compile of the whole program, as without stages. The staged predictors' demos are then
   put back: the end-to-end compile tunes the other predictors (FILCO's generator), the staged ones keep
   what their own labels taught them (the paper trains M_ctx on silver labels, M_gen afterwards).

Every stage is metered (`StageUsage("stage:<name>")`) and described in `CompileResult.staged` (name,
predictors, labels, examples built, demos kept, skipped and why), which the manifest records.

`build_trainset` may return a list carrying a `record` dict (`ragzoo.programs.filco_oracle.LabelledExamples`):
it is copied into the stage's manifest record. FILCO's says which oracle measure labelled the filter's
examples (`measure`), where CXMI's log-probabilities came from (`cxmi_source`, `logprob_requests`), or, when
the LM could not give them, `asked` and `fallback` (why, and which declared measure trained the filter);
the compile's notes repeat a fallback, and `ragzoo compile` prints it, so no label source changes silently.

A "memory" stage (`Stage.mode`) builds labelled examples and stores them as the predictor's demos as they
are (SKR's nearest-neighbour memory), with no optimizer run.

Which optimizers stage: those that compile demos from a trainset with a metric (bootstrap, bootstrap-rs,
optuna, mipro, labeled: the labels are the demos). "none" compiles nothing, so there is no stage; "knn"
picks demos per question at run time, so its stage is skipped (noted). A stage whose labels need something
the compile does not have (`needs`, e.g. CXMI's log-probability scorer) is skipped with a note.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import dspy

from ragzoo.programs.base import Stage, StageSkipped  # declared by programs: they never import optimizers
from ragzoo.usage import StageUsage

# Teleprompters a stage runs with its own metric; others skip stages (named in the note).
STAGEABLE = ("LabeledFewShot", "BootstrapFewShot", "BootstrapFewShotWithRandomSearch", "Ensemble",
             "BootstrapFewShotWithOptuna", "MIPROv2")


class _StageModule(dspy.Module):
    """One staged predictor as a module an optimizer can compile, under the name it has in the program (so
    the calls are named as in the program), called with the labelled example's inputs."""

    def __init__(self, name: str, predictor):
        super().__init__()
        object.__setattr__(self, "_stage_name", name)
        setattr(self, name, predictor)

    def forward(self, **inputs):
        return getattr(self, self._stage_name)(**inputs)


def program_stages(program) -> list[Stage]:
    stages = getattr(program, "compile_stages", None)
    return list(stages()) if callable(stages) else []


def run_stages(program, stages: list[Stage], trainset: list, compile_one: Callable, meter, teleprompter: str,
               resources: dict | None = None, is_budget_stop: Callable[[Exception], bool] = lambda error: False
               ) -> tuple[list[StageUsage], list[dict], dict[str, list]]:
    """Run each stage on `program` in place. `compile_one(module, trainset, metric)` compiles a module with
    the preset's optimizer. Returns the usage per stage, the manifest records and the staged demos per
    predictor name (to restore after the end-to-end compile). A budget stop ends the stages; its record
    says "stopped"."""
    usages: list[StageUsage] = []
    records: list[dict] = []
    staged: dict[str, list] = {}
    for stage in stages:
        record = {"stage": stage.name, "predictors": list(stage.predictors), "labels": stage.labels,
                  "metric": getattr(stage.metric, "__name__", str(stage.metric))}
        resources = resources or {}
        missing = [need for need in stage.needs if resources.get(need) is None]
        if teleprompter not in STAGEABLE:
            record["skipped"] = f"optimizer {teleprompter or 'none'} does not compile demos from a trainset"
        elif missing:
            record["skipped"] = f"building its labels needs {', '.join(missing)}"
        if "skipped" in record:
            records.append(record)
            continue
        started, before = time.perf_counter(), meter.usage.snapshot()
        try:
            given = {name: resources[name] for name in (*stage.needs, *stage.uses) if resources.get(name) is not None}
            examples = stage.build_trainset(trainset, **given)
            record.update(getattr(examples, "record", None) or {})  # how the labels were built (FILCO's measure)
            record["examples"] = len(examples)
            _stop_if_over_budget()
            for name in stage.predictors:
                predictor = _predictor(program, name)
                if not examples:
                    record["skipped"] = "no labelled example could be built"
                    break
                if stage.mode == "memory":
                    predictor.demos = list(examples)
                    staged[name] = list(predictor.demos)
                    record.setdefault("demos", {})[name] = len(predictor.demos)
                    continue
                compiled = compile_one(_StageModule(name, predictor), examples, stage.metric)
                predictor.demos = list(getattr(compiled, name).demos)
                staged[name] = list(predictor.demos)
                record.setdefault("demos", {})[name] = len(predictor.demos)
                _stop_if_over_budget()  # DSPy's bootstrap takes a refused call for one example's error, and goes on
        except StageSkipped as skipped:
            record.update(getattr(skipped, "record", None) or {})
            record["skipped"] = str(skipped)
        except _OverBudget as over:
            record["stopped"] = f"budget reached: {over}"
        except Exception as error:
            if not is_budget_stop(error):
                raise
            record["stopped"] = f"budget reached: {error}"
        finally:
            usages.append(StageUsage(f"stage:{stage.name}", meter.usage.minus(before), time.perf_counter() - started))
        records.append(record)
        if "stopped" in record:
            break
    return usages, records, staged


class _OverBudget(Exception):
    """A budget was reached inside a stage though nothing raised it to here (a bootstrap swallows refused calls)."""


def _stop_if_over_budget() -> None:
    from ragzoo.usage import exceeded_budget

    reason = exceeded_budget()
    if reason:
        raise _OverBudget(reason)


def restore_staged(program, staged: dict[str, list]) -> None:
    """Put the staged demos back on the (end-to-end compiled) program: every predictor named like a staged
    one, also inside an ensemble's members (`programs[i].filter`)."""
    if not staged or not hasattr(program, "named_predictors"):
        return
    for name, predictor in program.named_predictors():
        bare = name.split(".", 1)[1] if name.startswith("programs[") else name
        if bare in staged:
            predictor.demos = list(staged[bare])


def _predictor(program, name: str):
    for found, predictor in program.named_predictors():
        if found == name:
            return predictor
    raise KeyError(f"{type(program).__name__} has no predictor {name!r} for its compile stage")
