"""Compile a program with an optimizer preset, measure each stage, stop cleanly at a budget.

`compile_program` runs two stages under one meter (`ragzoo.usage.metering`): `compile` (the teleprompter) and
`validation` (the compiled program scored on the dev split with the metric), preceded by the method's own
compile stages (`stage:<name>`, see `ragzoo.optimizers.stages`) when it declares them. With `max_calls`/`max_cost`,
every LM call checks the budget first; when it is reached the compile stops and keeps the best program so far:
- bootstrap: the demos bootstrapped before the stop (DSPy's own `_train` step over the traces collected);
- bootstrap-rs / ensemble: candidates are tried one at a time (DSPy's `restrict=`), the best fully scored one
  is kept, a candidate cut short by the budget is discarded;
- other optimizers keep no usable intermediate state: the uncompiled program is kept, and the result says so.

Interruption (`checkpoint=CompileCheckpoint`, the CLI's `<out>.checkpoint/`): what DSPy lets ragzoo keep is
written there atomically as the compile goes, and a compile given the same checkpoint continues from it:
- bootstrap: after each training example, the demos bootstrapped so far per predictor (DSPy's own demo
  serialisation) and how far the examples were tried; a resumed compile skips the examples already tried
  and starts from those traces, so it makes only the remaining LM calls and ends with the demos of an
  uninterrupted compile. An example cut short by a budget or Ctrl-C is not recorded (it is tried again).
- GEPA: its own state (`log_dir=<checkpoint>/gepa`), from which GEPA resumes by itself.
- other optimizers (random search, MIPRO, SIMBA, Optuna) and a method's compile stages keep nothing there:
  they run again (LM calls already made are served from DSPy's cache when it is on).
A checkpoint records what it is a checkpoint of (`fingerprint`: method, knobs, optimizer, data, seed, ...);
opening it for a different compile is refused, naming what differs.
The active LM is `dspy.settings.lm` (use `dspy.context(lm=...)`); with the dry-run LM the same code gives the
cost estimate.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable

import dspy

from ragzoo.adapters import stamp_compiled_adapter
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
    val_scores: list[float] = field(default_factory=list)  # per dev question, in valset order (for a CI)
    val_failures: int = 0  # dev questions that got no answer (an LM or parse error), scored 0

    @property
    def usage(self) -> Usage:
        total = Usage()
        for stage in self.stages:
            total.merge(stage.usage)
        return total

    def stage(self, name: str) -> StageUsage | None:
        return next((s for s in self.stages if s.stage == name), None)


# ---------------------------------------------------------------------------------------------------------
# Checkpoints of an interrupted compile

CHECKPOINT_SUFFIX = ".checkpoint"
_CHECKPOINT_FILE = "checkpoint.json"
_BOOTSTRAP_FILE = "bootstrap.json"
_SPENT_FILE = "spent.json"  # what the runs that kept this progress spent (`Usage.to_dict`), summed


def checkpoint_path(out) -> Path:
    """Where the compile writing `out` keeps its checkpoint: the folder `<out>.checkpoint` beside it."""
    out = Path(out)
    return out.with_name(out.name + CHECKPOINT_SUFFIX)


def _normal(value):
    from ragzoo.files import jsonable

    return json.loads(json.dumps(jsonable(value), sort_keys=True))


class CompileCheckpoint:
    """A compile's checkpoint folder, a marked folder of kind "checkpoint" (`ragzoo.ownership`): `checkpoint.json`
    (what it is a checkpoint of) and what the optimizer kept so far (`bootstrap.json`, `gepa/`). Written
    atomically (`ragzoo.files`). A folder at that place that is not one (a user's) is refused whatever the flags,
    and starting over (`--force`) or finishing removes only ragzoo's files, keeping and naming anything else."""

    def __init__(self, path, fingerprint: dict):
        self.path = Path(path)
        self.fingerprint = _normal(fingerprint)
        self.resumed = False

    @classmethod
    def open(cls, path, fingerprint: dict, *, resume: bool = False, force: bool = False) -> "CompileCheckpoint":
        """The checkpoint at `path`: continued with `resume` (it must exist and be of the same compile), else
        started afresh (an existing one that kept progress is only replaced with `force`). Nothing is written
        until the optimizer keeps something, so a compile that fails at once leaves no folder."""
        checkpoint = cls(path, fingerprint)
        checkpoint._claim()  # before --resume/--force are weighed: they never apply to a folder that is not ours
        meta = checkpoint.path / _CHECKPOINT_FILE
        if resume:
            if not meta.is_file():
                raise ConfigError(f"--resume: no checkpoint at {checkpoint.path}, so nothing to resume; run the "
                                  f"compile without --resume")
            try:
                saved = json.loads(meta.read_text(encoding="utf-8"))["fingerprint"]
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise ConfigError(f"--resume: the checkpoint at {checkpoint.path} cannot be read ({error}); "
                                  f"run without --resume and with --force to start over") from None
            from ragzoo.config import answer_differences  # options named as flags, as evaluate's resume does

            differs = answer_differences(saved, checkpoint.fingerprint)
            if differs:
                raise ConfigError(f"--resume: the checkpoint at {checkpoint.path} is of another compile: "
                                  f"{'; '.join(differs)}. Rerun with the same options, or without --resume and "
                                  f"with --force to start over")
            checkpoint.resumed = True
            return checkpoint
        if meta.is_file():
            if not force and checkpoint.has_progress():
                raise ConfigError(f"{checkpoint.path} holds the checkpoint of an interrupted compile; pass --resume "
                                  f"to continue it, or --force to start over (discarding it)")
            checkpoint.remove()  # with --force, or one that kept nothing yet
        return checkpoint  # the folder appears with the first thing the optimizer keeps

    def _claim(self):
        from ragzoo import ownership

        # the user chooses --out, not this folder: say what to do about it
        return ownership.claim(self.path, "checkpoint", flag="the checkpoint folder",
                               remedy="move it away or choose another --out (a compile keeps its checkpoint beside "
                                      "--out)", read_only_remedy="make it writable or choose another --out")

    def _own(self, name: str) -> None:
        """Claim the folder (it may have appeared since `open`), then list `name` as ragzoo's in its marker before
        writing it: whatever is cut short, what the folder holds of ragzoo's is named by the marker."""
        from ragzoo import ownership
        from ragzoo.files import atomic_write_json

        meta = self.path / _CHECKPOINT_FILE
        if not meta.is_file():
            self._claim()
            self.path.mkdir(parents=True, exist_ok=True)
            ownership.mark(self.path, "checkpoint", [_CHECKPOINT_FILE])
            atomic_write_json(meta, {"version": 1, "fingerprint": self.fingerprint})
        names = {name}
        if ownership.read_marker(self.path) is None:  # an earlier version's checkpoint: its files are ragzoo's
            names |= {entry.name for entry in self.path.iterdir()} & ownership.ragzoo_files(self.path, "checkpoint")
        ownership.mark(self.path, "checkpoint", names)  # no write when already listed

    def read(self, name: str) -> Any:
        path = self.path / name
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise self.damaged(name, error) from None

    def damaged(self, name: str, error: Exception) -> ConfigError:
        return ConfigError(f"--resume: {self.path / name} cannot be read ({' '.join(str(error).split())[:160]}); "
                           f"run without --resume and with --force to start over")

    def write(self, name: str, value: Any) -> None:
        from ragzoo.files import atomic_write_json
        from ragzoo.secrets import scrub  # bootstrapped traces are LM outputs: an echoed key is kept as ***

        self._own(name)
        atomic_write_json(self.path / name, scrub(value))

    def folder(self, name: str) -> Path:
        self._own(name)
        path = self.path / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def has_progress(self) -> bool:
        """Whether the optimizer kept anything here yet (beyond what the checkpoint is of)."""
        from ragzoo import ownership

        if not self.path.is_dir():
            return False
        kept = ownership.ragzoo_files(self.path, "checkpoint") - {ownership.MARKER, _CHECKPOINT_FILE, _SPENT_FILE}
        return any(entry.name in kept and not (entry.is_dir() and not any(entry.iterdir()))
                   for entry in self.path.iterdir())

    def spent(self) -> Usage:
        """What the earlier runs of this compile spent (their calls were made; a resumed compile counts them)."""
        try:
            return Usage.from_dict(self.read(_SPENT_FILE) or {})
        except (ConfigError, AttributeError, TypeError, ValueError):
            return Usage()  # a damaged spend record: the compile goes on, counting from here

    def add_spent(self, usage: Usage) -> None:
        """Add a run's spend to the record, once the optimizer kept progress here (nothing to resume otherwise)."""
        if self.has_progress():
            total = self.spent()
            total.merge(usage)
            self.write(_SPENT_FILE, total.to_dict())

    def kept(self) -> str:
        """What the checkpoint holds, in words (for Ctrl-C and budget stops)."""
        try:
            state = self.read(_BOOTSTRAP_FILE) if self.path.is_dir() else None
            demos = sum(len(v) for v in state.get("name2traces", {}).values()) if state else 0
        except (ConfigError, AttributeError, TypeError):
            return f"a damaged bootstrap checkpoint in {self.path}"
        if state:
            return (f"bootstrap progress in {self.path} ({state.get('next_index', 0)} training example(s) tried, "
                    f"{demos} demo(s) kept)")
        if (self.path / "gepa").is_dir() and any((self.path / "gepa").iterdir()):
            return f"GEPA's state in {self.path / 'gepa'}"
        return f"no optimizer progress yet in {self.path}"

    def remove(self) -> None:
        """Remove what ragzoo wrote here (a user's file in the folder is kept, and named)."""
        from ragzoo import ownership

        try:
            ownership.clear(self.path, "checkpoint")
        except OSError as error:  # also run while another error is on its way out: never hide that one
            logger.warning("could not remove the compile checkpoint %s (%s); it stays marked as ragzoo's, so the "
                           "next compile with this --out takes it over", self.path, error.strerror or error)


def _demo_dict(demo) -> dict:
    """A demo as DSPy saves it (`Predict.dump_state`): each value through `serialize_object`."""
    from dspy.predict.predict import serialize_object

    demo = demo.copy()
    for name in demo:
        demo[name] = serialize_object(demo[name])
    return demo.toDict()


def _checkpointed_bootstrap_class():
    import dspy.teleprompt as tp

    class CheckpointedBootstrapFewShot(tp.BootstrapFewShot):
        """DSPy's BootstrapFewShot whose bootstrap loop (DSPy 3.4.1 `_bootstrap`, same order and rules) records
        its traces after each training example, and starts from them when the checkpoint has some."""

        def __init__(self, *args, checkpoint: CompileCheckpoint, **kwargs):
            super().__init__(*args, **kwargs)
            self.checkpoint = checkpoint
            self.resumed_at = 0

        def _save(self, next_index: int, bootstrapped: dict, attempts: int) -> None:
            self.checkpoint.write(_BOOTSTRAP_FILE, {
                "next_index": next_index, "bootstrapped": sorted(bootstrapped), "attempts": attempts,
                "error_count": self.error_count, "trainset_size": len(self.trainset),
                "name2traces": {name: [_demo_dict(demo) for demo in demos]
                                for name, demos in self.name2traces.items()}})

        def _bootstrap(self, *, max_bootstraps=None):
            max_bootstraps = max_bootstraps or self.max_bootstrapped_demos
            self.name2traces = {name: [] for name in self.name2predictor}
            bootstrapped: dict[int, bool] = {}
            attempts, start = 0, 0
            state = self.checkpoint.read(_BOOTSTRAP_FILE)
            if state:
                try:
                    fits = state.get("trainset_size") == len(self.trainset) and not (
                        set(state["name2traces"]) - set(self.name2traces))
                    if fits:
                        start, attempts = int(state["next_index"]), int(state["attempts"])
                        bootstrapped = {int(index): True for index in state["bootstrapped"]}
                        self.error_count = int(state.get("error_count", 0))
                        for name, demos in state["name2traces"].items():
                            self.name2traces[name] = [dspy.Example(**demo) for demo in demos]
                except (AttributeError, KeyError, TypeError, ValueError) as error:  # edited or damaged
                    raise self.checkpoint.damaged(_BOOTSTRAP_FILE, error) from None
                if not fits:
                    raise ConfigError(f"the bootstrap checkpoint in {self.checkpoint.path} does not fit this compile "
                                      f"(other training questions or predictors); start over with --force")
                self.resumed_at = start
            for example_idx, example in enumerate(self.trainset):
                if example_idx < start:
                    continue  # tried before the interruption: its traces are in the checkpoint
                if len(bootstrapped) >= max_bootstraps:
                    break
                for round_idx in range(self.max_rounds):
                    attempts += 1
                    if self._bootstrap_one_example(example, round_idx):
                        bootstrapped[example_idx] = True
                        break
                reason = exceeded_budget()
                if reason:  # calls of this example were refused: its outcome is not kept, it is tried again
                    raise BudgetExceeded(reason)
                self._save(example_idx + 1, bootstrapped, attempts)
            self.validation = [x for idx, x in enumerate(self.trainset) if idx not in bootstrapped]
            random.Random(0).shuffle(self.validation)

    return CheckpointedBootstrapFewShot


def _jsonable_settings(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if isinstance(v, (str, int, float, bool, type(None), list, dict))}


def score_program(program, examples: list, metric: SafeMetric, threads: int = 1) -> float:
    """Mean metric of `program` over `examples`; a failing example scores 0. Budget stops propagate."""
    scores = score_examples(program, examples, metric, threads)
    return sum(scores) / len(scores) if scores else 0.0


def score_examples(program, examples: list, metric: SafeMetric, threads: int = 1,
                   failures: list[str] | None = None) -> list[float]:
    """The metric of `program` on each of `examples`, in their order; a failing example scores 0 (and its error,
    one line, goes to `failures`)."""
    from dspy.utils.parallelizer import ParallelExecutor

    from ragzoo.errors import error_line

    if not examples:
        return []
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
            if failures is not None:
                failures.append(f"{type(error).__name__}: {error_line(error)}")
            return 0.0
        return metric(example, prediction)

    executor = ParallelExecutor(num_threads=max(1, threads), max_errors=len(examples) + 1,
                                disable_progress_bar=True, timeout=0)
    scores = executor.execute(run_one, list(examples))
    if budget:
        raise budget[0]
    return [float(s or 0.0) for s in scores]


# settings whose least value is not 0 (DSPy's random search tries num_candidate_programs + 3 programs: seeds -3..)
_LEAST = {"num_candidate_programs": -2, "size": 1, "k": 1, "bsize": 1}


def _check_settings(preset_name: str, teleprompter_class, settings: dict, own: dict[str, Any]) -> None:
    """Unknown optimizer settings fail with the valid names, and a value of the wrong type or range (the type of
    the teleprompter's default or annotation: DSPy 3.4.1) with what it takes, before any LM call: `size=abc` had
    failed after every ensemble candidate was compiled and paid for."""
    import inspect

    parameters = {name: parameter for name, parameter in inspect.signature(teleprompter_class.__init__).parameters
                  .items() if name != "self"}
    accepted = (set(parameters) | set(own)) - {"metric", "num_threads", "seed"}
    unknown = sorted(set(settings) - accepted)
    if unknown:
        raise ConfigError(f"optimizer {preset_name!r} has no setting {', '.join(map(repr, unknown))}; "
                          f"its settings: {', '.join(sorted(accepted))}")
    for name, value in settings.items():
        parameter = parameters.get(name)
        default = own[name] if name in own else parameter.default
        annotation = parameter.annotation if parameter is not None else inspect.Parameter.empty
        problem = _setting_problem(name, value, None if default is inspect.Parameter.empty else default, annotation)
        if problem:
            raise ConfigError(f"optimizer {preset_name!r}: setting {name}={value!r} {problem}")


def _setting_problem(name: str, value: Any, default: Any, annotation: Any) -> str | None:
    """Why `value` cannot be setting `name` (None: it can, or nothing is known of the type)."""
    import typing

    options = [arg for arm in (typing.get_args(annotation) or (annotation,))
               for arg in (typing.get_args(arm) if typing.get_origin(arm) is typing.Literal else ())]
    if options:
        if value in options or (value is None and type(None) in typing.get_args(annotation)):
            return None
        return f"must be one of {', '.join(map(repr, options))}"
    names = {getattr(arm, "__name__", str(arm)) for arm in (typing.get_args(annotation) or (annotation,))}
    kind = type(default) if default is not None else next(
        (t for t in (bool, int, float, str) if t.__name__ in names or (isinstance(annotation, str)
                                                                      and annotation.split(" |")[0] == t.__name__)),
        None)
    if kind is None or (value is None and (default is None or type(None) in typing.get_args(annotation))):
        return None  # no type known, or None where the setting takes it (GEPA's max_merge_invocations: int | None)
    if kind is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number"
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
    elif kind is str:
        return None if isinstance(value, str) else "must be a string"
    least = _LEAST.get(name, 0 if kind is int else None)  # counts are not negative; a score may be (failure_score)
    if least is not None and value < least:
        return f"must be at least {least}"
    return None


def check_preset_settings(preset: OptimizerPreset, settings: dict) -> None:
    """`_check_settings` for a preset: its teleprompter's own settings; an ensemble's `size`; KNN's `k` and
    `embedder` beside the BootstrapFewShot settings it passes on (an unknown one made every question fail)."""
    import dspy.teleprompt as tp

    name = preset.teleprompter
    if not name:
        return
    own: dict[str, Any] = {"size": 3} if name == "Ensemble" else {"k": 3, "embedder": "minilm"} \
        if name == "KNNFewShot" else {}
    target = {"Ensemble": "BootstrapFewShotWithRandomSearch", "KNNFewShot": "BootstrapFewShot"}.get(name, name)
    _check_settings(preset.name, getattr(tp, target), settings, own)


def _stop_at_budget(gepa_state=None) -> bool:
    """A GEPA stopper (`gepa.utils.StopperProtocol`): the compile's budget is reached."""
    return exceeded_budget() is not None


def build_teleprompter(preset: OptimizerPreset, settings: dict, metric: SafeMetric, threads: int, seed: int,
                       trainset: list, checkpoint: CompileCheckpoint | None = None):
    """The DSPy teleprompter object of `preset` with `settings` (constructor signatures of DSPy 3.4.1); with a
    `checkpoint`, bootstrap records its progress there and GEPA keeps its state there (`log_dir`)."""
    import dspy.teleprompt as tp

    name = preset.teleprompter
    check_preset_settings(preset, settings)
    if name == "LabeledFewShot":
        return tp.LabeledFewShot(k=settings.get("k", 3))
    if name == "BootstrapFewShot":
        if checkpoint is not None:
            return _checkpointed_bootstrap_class()(metric=metric, checkpoint=checkpoint, **settings)
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
        if checkpoint is not None:
            options.setdefault("log_dir", str(checkpoint.folder("gepa")))  # GEPA resumes from its own state
        from ragzoo.optimizers.feedback import feedback_metric

        # a budget stop ends GEPA at its next iteration: the refused calls are caught inside DSPy's evaluation and
        # scored as failures, so without this it spent its whole rollout budget on them and saved that state in
        # the checkpoint (a resume then had nothing left to search)
        extra = dict(options.pop("gepa_kwargs", None) or {})
        stoppers = extra.get("stop_callbacks") or []
        stoppers = list(stoppers) if isinstance(stoppers, (list, tuple)) else [stoppers]
        extra["stop_callbacks"] = [*stoppers, _stop_at_budget]
        # GEPA's reflection reads why an answer was wrong (EM/F1 and the stage records), not only its score
        return tp.GEPA(metric=feedback_metric(metric), num_threads=threads, seed=seed, gepa_kwargs=extra,
                       **options)
    if name == "SIMBA":
        options = dict(settings)
        options["bsize"] = max(1, min(int(options.get("bsize", 32)), len(trainset)))
        return tp.SIMBA(metric=metric, num_threads=threads, **options)
    raise ConfigError(f"optimizer {preset.name!r} cannot be built")  # pragma: no cover


def compile_program(program, *, trainset: list, valset: list | None = None, optimizer: str = "bootstrap",
                    metric: str | Callable = "em", seed: int = 0, threads: int = 1, settings: dict | None = None,
                    max_calls: int | None = None, max_cost: float | None = None,
                    validate: bool = True, stages: bool = True, stage_resources: dict | None = None,
                    checkpoint: CompileCheckpoint | None = None,
                    earlier: tuple[int, float] = (0, 0.0)) -> CompileResult:
    """Compile `program` with the optimizer preset `optimizer` on `trainset`, score it on `valset`.

    With `stages` (default), a program that declares `compile_stages()` first has those predictors compiled
    on their own labels (`ragzoo.optimizers.stages`), then the whole program end to end.
    `stage_resources` hands stages what building their labels may need (e.g. {"logprob_fn": ...}).
    `checkpoint` keeps the optimizer's progress where DSPy allows and continues from it (see the module doc).
    `earlier`: (calls, USD) earlier runs of this compile spent of `max_calls`/`max_cost`: the budget is what is left
    (`ragzoo.usage.Budget`)."""
    Budget(max_calls, max_cost)  # a bad budget fails before any work
    preset, preset_settings = get_preset(optimizer)
    preset_settings.update(settings or {})
    check_preset_settings(preset, preset_settings)  # before any LM call, stages' included
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
    with metering(max_calls, max_cost, earlier=earlier) as meter:  # nested in a caller's meter, its budget too
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
                if "fallback" in record:  # its labels come from another measure than the one asked for
                    result.notes.append(f"compile stage {record['stage']!r}: {record['fallback']}")
                if "stopped" in record:
                    result.stopped = f"budget reached during compile stage {record['stage']!r}"
                    kept = [f"{name} ({count})" for staged in result.staged
                            for name, count in (staged.get("demos") or {}).items() if count]
                    result.notes.append(f"no end-to-end compile ran; the staged demos kept: {', '.join(kept)}"
                                        if kept else "no end-to-end compile ran, and no stage kept a demo")
            if result.stopped:  # its staged demos are made of these questions too
                _finish(result.program, trainset, valset, optimizer)
                return result
        started, before = time.perf_counter(), meter.usage.snapshot()
        try:
            result.program = _run(preset, preset_settings, program, list(trainset), valset, optimizer_metric, seed,
                                  threads, result, checkpoint)
            restore_staged(result.program, staged_demos)
        finally:
            result.stages.append(StageUsage("compile", meter.usage.minus(before), time.perf_counter() - started))
        if result.stopped is None and exceeded_budget():
            result.stopped = "budget reached during compile"
        if validate and valset and result.stopped is None:
            started, before = time.perf_counter(), meter.usage.snapshot()
            failed: list[str] = []
            try:
                result.val_scores = score_examples(result.program, valset, safe, threads, failed)
                result.score = sum(result.val_scores) / len(result.val_scores)
                if failed:  # scored 0 as wrong answers would be: said, never only a low score
                    result.val_failures = len(failed)
                    result.notes.append(f"{len(failed)} of {len(valset)} dev question(s) failed (no answer: "
                                        f"{failed[0]}{' ...' if len(failed) > 1 else ''}); they score 0 in the dev "
                                        f"score")
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
    _finish(result.program, trainset, valset, optimizer)
    return result


def _finish(program, trainset: list, valset: list, optimizer: str) -> None:
    """What every compiled program carries, however the compile ended: the questions it saw (evaluations on them
    are flagged as not held out), and what `ragzoo.save` records of a compile its caller does not describe (a
    Python compile-then-save): the adapter it ran under (`load` runs the program so) and the optimizer."""
    mark_seen(program, trainset, valset)
    stamp_compiled_adapter(program)
    program.ragzoo_optimizer = optimizer


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
        # under the dry-run LM every trace passes, as the end-to-end compile's estimate models (`dry_run_metric`)
        teleprompter = tp.BootstrapFewShot(metric=dry_run_metric(metric),
                                           max_bootstrapped_demos=settings.get("max_bootstrapped_demos", 3),
                                           max_labeled_demos=settings.get("max_labeled_demos", 3))
        return teleprompter.compile(module, trainset=examples)

    return compile_one


def _budget_stop(error: Exception) -> bool:
    return isinstance(error, BudgetExceeded) or exceeded_budget() is not None


def _run(preset, settings, program, trainset, valset, metric, seed, threads, result, checkpoint=None):
    name = preset.teleprompter
    if not name:
        return program
    if name in ("BootstrapFewShotWithRandomSearch", "Ensemble"):
        return _random_search(preset, settings, program, trainset, valset, metric, seed, threads, result)
    if name == "KNNFewShot":
        from ragzoo.optimizers.knn import KNNProgram, bootstrap_problem

        bootstrap = {k: v for k, v in settings.items() if k not in ("k", "embedder")}
        bootstrap["metric"] = metric.name  # re-resolved by name when a saved KNN program is loaded
        # the counts bound what one question may cost; the metric may be any function here (the program in memory
        # keeps it), only a saved program must name a built-in one (`ragzoo.artifacts.save`)
        problem = bootstrap_problem({k: v for k, v in bootstrap.items() if k != "metric"})
        if problem:
            raise ConfigError(f"optimizer {preset.name!r}: {problem}")
        return KNNProgram(program, trainset, k=int(settings.get("k", 3)), bootstrap=bootstrap,
                          metric=metric, **({"embedder": settings["embedder"]} if "embedder" in settings else {}))
    teleprompter = build_teleprompter(preset, settings, metric, threads, seed, trainset, checkpoint)
    try:
        if name == "LabeledFewShot":
            return teleprompter.compile(program, trainset=trainset)
        if name == "BootstrapFewShot":
            compiled = teleprompter.compile(program, trainset=trainset)
            if getattr(teleprompter, "resumed_at", 0):
                result.notes.append(f"resumed from the checkpoint: {teleprompter.resumed_at} training example(s) "
                                    f"were tried before the interruption")
            return compiled
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
