"""Compile a program with an optimizer preset, measure each stage, stop cleanly at a budget.

`compile_program` runs two stages under one meter (`ragzoo.usage.metering`): `compile` (the teleprompter) and
`validation` (the compiled program scored on the dev split with the metric), preceded by the method's own
compile stages (`stage:<name>`, see `ragzoo.optimizers.stages`) when it declares them. With `max_calls`/`max_cost`,
every LM call checks the budget first; when it is reached the compile stops and keeps the best program so far:
- bootstrap: the demos bootstrapped before the stop (DSPy's own `_train` step over the traces collected);
- bootstrap-rs / ensemble: candidates are tried one at a time (DSPy's `restrict=`), the best fully scored one
  is kept, a candidate cut short by the budget is discarded;
- other optimizers keep no usable intermediate state: the uncompiled program is kept, and the result says so.
The active LM is `dspy.settings.lm` (use `dspy.context(lm=...)`); with the dry-run LM the same code gives the
cost estimate.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import dspy

from ragzoo.engines import dry_run_metric
from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.leakage import mark_seen
from ragzoo.metrics.scoring import SafeMetric, safe_metric
from ragzoo.optimizers.presets import OptimizerPreset, get_preset
from ragzoo.optimizers.stages import program_stages, restore_staged, run_stages
from ragzoo.usage import Budget, StageUsage, Usage, exceeded_budget, metering

logger = logging.getLogger(__name__)


@dataclass
class CompileResult:
    program: Any
    optimizer: str
    settings: dict
    metric: str
    score: float | None
    val_n: int
    stages: list[StageUsage] = field(default_factory=list)
    stopped: str | None = None
    notes: list[str] = field(default_factory=list)
    staged: list[dict] = field(default_factory=list)  # one record per compile stage of the method
    selection_score: bool = False  # the dev score is also what the optimizer selected on (optimistic)

    @property
    def usage(self) -> Usage:
        total = Usage()
        for stage in self.stages:
            total.merge(stage.usage)
        return total

    def stage(self, name: str) -> StageUsage | None:
        return next((s for s in self.stages if s.stage == name), None)


def _jsonable_settings(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if isinstance(v, (str, int, float, bool, type(None), list, dict))}


def score_program(program, examples: list, metric: SafeMetric, threads: int = 1) -> float:
    """Mean metric of `program` over `examples`; a failing example scores 0. Budget stops propagate."""
    from dspy.utils.parallelizer import ParallelExecutor

    if not examples:
        return 0.0
    budget: list[BudgetExceeded] = []

    def run_one(example):
        if budget:
            return 0.0
        try:
            prediction = program(**example.inputs())
        except BudgetExceeded as error:
            budget.append(error)
            return 0.0
        except Exception as error:  # parse errors, LM errors: scored 0, the validation goes on
            logger.debug("validation example failed: %s", error)
            return 0.0
        return metric(example, prediction)

    executor = ParallelExecutor(num_threads=max(1, threads), max_errors=len(examples) + 1,
                                disable_progress_bar=True, timeout=0)
    scores = executor.execute(run_one, list(examples))
    if budget:
        raise budget[0]
    return sum(s or 0.0 for s in scores) / len(examples)


def _check_settings(preset_name: str, teleprompter_class, settings: dict, own: set[str]) -> None:
    """Unknown optimizer settings fail with the valid names, before any LM call."""
    import inspect

    accepted = {name for name in inspect.signature(teleprompter_class.__init__).parameters if name != "self"}
    accepted = (accepted | own) - {"metric", "num_threads", "seed"}
    unknown = sorted(set(settings) - accepted)
    if unknown:
        raise ConfigError(f"optimizer {preset_name!r} has no setting {', '.join(map(repr, unknown))}; "
                          f"its settings: {', '.join(sorted(accepted))}")


def build_teleprompter(preset: OptimizerPreset, settings: dict, metric: SafeMetric, threads: int, seed: int,
                       trainset: list):
    """The DSPy teleprompter object of `preset` with `settings` (constructor signatures of DSPy 3.4.1)."""
    import dspy.teleprompt as tp

    name = preset.teleprompter
    if name and name != "KNNFewShot":
        own = {"size"} if name == "Ensemble" else set()
        target = "BootstrapFewShotWithRandomSearch" if name == "Ensemble" else name
        _check_settings(preset.name, getattr(tp, target), settings, own)
    if name == "LabeledFewShot":
        return tp.LabeledFewShot(k=settings.get("k", 3))
    if name == "BootstrapFewShot":
        return tp.BootstrapFewShot(metric=metric, **settings)
    if name in ("BootstrapFewShotWithRandomSearch", "Ensemble"):
        allowed = {k: v for k, v in settings.items() if k != "size"}
        return tp.BootstrapFewShotWithRandomSearch(metric=metric, num_threads=threads, **allowed)
    if name == "BootstrapFewShotWithOptuna":
        return tp.BootstrapFewShotWithOptuna(metric=metric, num_threads=threads, **settings)
    if name == "MIPROv2":
        return tp.MIPROv2(metric=metric, num_threads=threads, seed=seed, **settings)
    if name == "GEPA":
        options = dict(settings)
        options.setdefault("reflection_lm", dspy.settings.lm)
        return tp.GEPA(metric=metric, num_threads=threads, seed=seed, **options)
    if name == "SIMBA":
        options = dict(settings)
        options["bsize"] = max(1, min(int(options.get("bsize", 32)), len(trainset)))
        return tp.SIMBA(metric=metric, num_threads=threads, **options)
    raise ConfigError(f"optimizer {preset.name!r} cannot be built")  # pragma: no cover


def compile_program(program, *, trainset: list, valset: list | None = None, optimizer: str = "bootstrap",
                    metric: str | Callable = "em", seed: int = 0, threads: int = 1, settings: dict | None = None,
                    max_calls: int | None = None, max_cost: float | None = None,
                    validate: bool = True, stages: bool = True, stage_resources: dict | None = None
                    ) -> CompileResult:
    """Compile `program` with the optimizer preset `optimizer` on `trainset`, score it on `valset`.

    With `stages` (default), a program that declares `compile_stages()` first has those predictors compiled
    on their own labels (`ragzoo.optimizers.stages`), then the whole program end to end.
    `stage_resources` hands stages what building their labels may need (e.g. {"logprob_fn": ...})."""
    Budget(max_calls, max_cost)  # a bad budget fails before any work
    preset, preset_settings = get_preset(optimizer)
    preset_settings.update(settings or {})
    safe = safe_metric(metric)
    # the optimizer's metric: under the dry-run LM every trace passes, so an estimate counts the demos a capable
    # model would get bootstrapped; the validation score keeps the real metric (placeholders score 0)
    optimizer_metric = safe_metric(dry_run_metric(safe))
    if dspy.settings.lm is None and preset.teleprompter not in ("", "LabeledFewShot"):
        raise ConfigError("no LM configured; pass --lm (or use dspy.context(lm=...))")
    if not trainset and preset.teleprompter:
        raise ConfigError(f"optimizer {optimizer!r} needs training examples; raise --train-n")
    valset = list(valset or [])
    result = CompileResult(program=program, optimizer=optimizer, settings=_jsonable_settings(preset_settings),
                           metric=safe.name, score=None, val_n=len(valset))
    random.seed(seed)
    with metering(max_calls, max_cost) as meter:  # nested in a caller's meter, its budget applies too
        staged_demos: dict = {}
        declared = program_stages(program) if stages and preset.teleprompter else []
        if declared:
            usages, result.staged, staged_demos = run_stages(
                program, declared, list(trainset), _stage_compiler(preset, preset_settings), meter,
                preset.teleprompter, stage_resources, _budget_stop)
            result.stages.extend(usages)
            for record in result.staged:
                if "skipped" in record:
                    result.notes.append(f"compile stage {record['stage']!r} skipped: {record['skipped']}")
                if "stopped" in record:
                    result.stopped = f"budget reached during compile stage {record['stage']!r}"
                    result.notes.append("the staged demos compiled before the budget are kept; no end-to-end "
                                        "compile ran")
            if result.stopped:
                return result
        started, before = time.perf_counter(), meter.usage.snapshot()
        try:
            result.program = _run(preset, preset_settings, program, list(trainset), valset, optimizer_metric, seed,
                                  threads, result)
            restore_staged(result.program, staged_demos)
        finally:
            result.stages.append(StageUsage("compile", meter.usage.minus(before), time.perf_counter() - started))
        if result.stopped is None and exceeded_budget():
            result.stopped = "budget reached during compile"
        if validate and valset and result.stopped is None:
            started, before = time.perf_counter(), meter.usage.snapshot()
            try:
                result.score = score_program(result.program, valset, safe, threads)
            except BudgetExceeded as error:
                result.stopped = f"{error} during validation; the score is missing"
            finally:
                result.stages.append(StageUsage("validation", meter.usage.minus(before),
                                                time.perf_counter() - started))
    if safe.failures:
        result.notes.append(f"the metric raised on {safe.failures} call(s); those scored 0")
    if valset and preset.teleprompter in _SELECTS_ON_VALSET and result.score is not None:
        result.selection_score = True
        result.notes.append(f"{optimizer} selected its program on these dev questions, so the dev score is a "
                            f"selection score (optimistic): evaluate on questions the compile never saw")
    mark_seen(result.program, trainset, valset)  # evaluations on these questions are flagged as not held out
    return result


# Optimizers that choose among candidates by their score on the valset.
_SELECTS_ON_VALSET = {"BootstrapFewShotWithRandomSearch", "Ensemble", "BootstrapFewShotWithOptuna", "MIPROv2", "GEPA"}


def _stage_compiler(preset, settings: dict):
    """How a stage compiles its predictor: the labelled examples as demos for "labeled", else
    BootstrapFewShot with the preset's demo counts and the stage's metric (a stage is one predictor with
    its own labels: no random search or instruction proposals there)."""
    import dspy.teleprompt as tp

    def compile_one(module, examples: list, metric):
        if preset.teleprompter == "LabeledFewShot":
            return tp.LabeledFewShot(k=settings.get("k", 3)).compile(module, trainset=examples)
        teleprompter = tp.BootstrapFewShot(metric=metric,
                                           max_bootstrapped_demos=settings.get("max_bootstrapped_demos", 3),
                                           max_labeled_demos=settings.get("max_labeled_demos", 3))
        return teleprompter.compile(module, trainset=examples)

    return compile_one


def _budget_stop(error: Exception) -> bool:
    return isinstance(error, BudgetExceeded) or exceeded_budget() is not None


def _run(preset, settings, program, trainset, valset, metric, seed, threads, result):
    name = preset.teleprompter
    if not name:
        return program
    if name in ("BootstrapFewShotWithRandomSearch", "Ensemble"):
        return _random_search(preset, settings, program, trainset, valset, metric, seed, threads, result)
    if name == "KNNFewShot":
        from ragzoo.optimizers.knn import KNNProgram

        bootstrap = {k: v for k, v in settings.items() if k not in ("k", "embedder")}
        bootstrap["metric"] = metric.name  # re-resolved by name when a saved KNN program is loaded
        return KNNProgram(program, trainset, k=int(settings.get("k", 3)), bootstrap=bootstrap,
                          metric=metric, **({"embedder": settings["embedder"]} if "embedder" in settings else {}))
    teleprompter = build_teleprompter(preset, settings, metric, threads, seed, trainset)
    try:
        if name == "LabeledFewShot":
            return teleprompter.compile(program, trainset=trainset)
        if name == "BootstrapFewShot":
            return teleprompter.compile(program, trainset=trainset)
        if name == "BootstrapFewShotWithOptuna":
            return teleprompter.compile(program, trainset=trainset, valset=valset or None,
                                        max_demos=settings.get("max_bootstrapped_demos", 3))
        if name == "MIPROv2":
            return teleprompter.compile(program, trainset=trainset, valset=valset or None, seed=seed)
        if name == "GEPA":
            return teleprompter.compile(program, trainset=trainset, valset=valset or None)
        if name == "SIMBA":
            return teleprompter.compile(program, trainset=trainset, seed=seed)
    except Exception as error:
        if not _budget_stop(error):
            raise
        result.stopped = f"{error if isinstance(error, BudgetExceeded) else 'budget reached'} during compile"
        salvaged = _salvage(teleprompter, program)
        if salvaged is None:
            result.notes.append(f"{preset.name} keeps no intermediate program; the uncompiled program is kept")
            return program
        result.notes.append("kept the demos bootstrapped before the budget was reached")
        return salvaged
    raise ConfigError(f"optimizer {preset.name!r} cannot be run")  # pragma: no cover


def _salvage(teleprompter, program):
    """BootstrapFewShot stopped mid-way: build the student from the traces gathered so far."""
    if not hasattr(teleprompter, "name2traces") or not hasattr(teleprompter, "student"):
        return None
    if not hasattr(teleprompter, "validation"):
        teleprompter.validation = []
    try:
        compiled = teleprompter._train()
        compiled._compiled = True
        return compiled
    except Exception:  # DSPy internals changed: fall back to the uncompiled program
        return None


def _random_search(preset, settings, program, trainset, valset, metric, seed, threads, result):
    """BootstrapFewShotWithRandomSearch one candidate at a time, so a budget stop keeps the best so far."""
    teleprompter = build_teleprompter(preset, settings, metric, threads, seed, trainset)
    candidates: list[tuple[float, int, Any]] = []
    for candidate_seed in range(-3, teleprompter.num_candidate_sets):
        try:
            best = teleprompter.compile(program, trainset=trainset, valset=valset or None,
                                        restrict=[candidate_seed])
        except Exception as error:
            if not _budget_stop(error):
                raise
            result.stopped = "budget reached during compile"
            break
        if exceeded_budget():  # its score was computed with calls refused: not trustworthy
            result.stopped = "budget reached during compile"
            break
        score = best.candidate_programs[0]["score"]
        best.__dict__.pop("candidate_programs", None)  # it refers to the program itself
        candidates.append((score, candidate_seed, best))
    if not candidates:
        result.notes.append("no candidate finished before the budget; the uncompiled program is kept")
        return program
    if result.stopped:
        result.notes.append(f"kept the best of the {len(candidates)} candidate(s) scored before the budget")
    ranked = sorted(candidates, key=lambda item: -item[0])  # stable: ties keep the earlier seed
    result.settings["candidate_scores"] = {str(s): round(score, 4) for score, s, _ in candidates}
    if preset.teleprompter == "Ensemble":
        from ragzoo.optimizers.ensemble import EnsembleProgram

        size = max(1, int(settings.get("size", 3)))
        members = []
        for _, _, candidate in ranked[:size]:
            members.append(candidate.deepcopy())
        return EnsembleProgram(members)
    return ranked[0][2]
