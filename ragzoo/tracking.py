"""MLflow tracking (`--mlflow URI` or `RAGZOO_MLFLOW`; the `[mlflow]` extra): one MLflow run per compile, per
evaluation and per grid cell (a grid's cells nested under one parent run).

What is logged is read back from what the command wrote (the run folder's config.json / summary.json /
predictions.jsonl, the artifact's manifest.json), after it wrote it: those files already went through
`ragzoo.secrets` (endpoints without credentials, every known key redacted), so MLflow gets nothing the run
folder does not hold, and a run folder stays the one record of a result. Every value is passed through
`secrets.scrub` once more on its way out. The folder's files are logged as the run's artifacts.

Params: method, knobs (knob.<name>), optimizer, LM, endpoint, adapter, retriever, data, seed. Metrics: the
run's metrics (em, f1, ...), usage (LM calls, tokens, cost), failures, and, when the records carry them
(`ragzoo.diagnostics`), stage diagnostics (stage.<stage>.<measure>) and attribution shares.

DSPy traces (`--mlflow-traces`) go through `mlflow.dspy.autolog` while the command works, the run active in
the command's thread. mlflow is imported only when the flag is given: without it nothing here runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

ENV = "RAGZOO_MLFLOW"
EXPERIMENT = "ragzoo"  # unless MLFLOW_EXPERIMENT_NAME says otherwise (MLflow's own variable)
INSTALL_HINT = "pip install 'ragzoo[mlflow]'"
_PARAM_CHARS = 6000  # MLflow's limit on a param value (longer values are refused by the server)
# a tracking server that does not answer should cost seconds, not MLflow's default of minutes of retries
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
                  "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


def uri_of(args) -> str | None:
    uri = getattr(args, "mlflow", None) or os.environ.get(ENV) or None
    return uri.strip() if isinstance(uri, str) and uri.strip() else None


def from_args(args, command: str) -> "Tracker":
    """The tracker of a command: a no-op one without `--mlflow`/`RAGZOO_MLFLOW`. With it, mlflow must be
    importable and the URI usable: a one-line ConfigError before any work."""
    uri = uri_of(args)
    traces = bool(getattr(args, "mlflow_traces", None))
    from ragzoo.errors import ConfigError

    if _grid_cells.active:  # a grid's cell: the grid logs it as one run nested under the grid's
        return Tracker(None, command)

    if uri is None:
        if traces:
            raise ConfigError(f"--mlflow-traces logs to MLflow: pass --mlflow URI too (or set {ENV})")
        return Tracker(None, command)
    try:
        import mlflow  # noqa: F401 - checked here so a missing extra is one line before any work
    except ImportError:
        raise ConfigError(f"--mlflow needs the mlflow package, which is not installed: {INSTALL_HINT}") from None
    from ragzoo.secrets import register_url

    register_url(uri, paths=False)  # a password in the tracking URI is hidden from every output
    artifact_root(uri, create=False)  # a user's folder where a new experiment would keep its artifacts: refused now
    for name, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    return Tracker(uri, command, traces=traces)


class _GridCells:
    active = 0  # cells of a tracked grid are running in this process (their commands log nothing themselves)


_grid_cells = _GridCells()


@contextlib.contextmanager
def grid_cells(track: "Tracker") -> Iterator[None]:
    """While a tracked grid runs its cells (in threads of this process): their compile and evaluate commands
    log no run of their own; the grid logs one run per cell."""
    if not track.enabled:
        yield
        return
    _grid_cells.active += 1
    try:
        yield
    finally:
        _grid_cells.active -= 1


def finish_grid(track: "Tracker", out: str | os.PathLike, states: dict, status: str = "FINISHED") -> None:
    """The grid's parent run: its own files (grid.json, results.*; the cells are their own runs) and totals."""
    if not track.enabled:
        return
    try:
        run_id = track.start(track.name_of(out))
        from mlflow.entities import Metric

        import time

        now = int(time.time() * 1000)
        values = list(states.values())
        totals = {"cells": len(values), "cells_done": sum(1 for s in values if s.get("status") == "done"),
                  "questions": sum(s.get("done", 0) for s in values), "cost": sum(s.get("cost", 0.0) for s in values),
                  "lm_calls": sum(s.get("lm_calls", 0) for s in values)}
        track.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in totals.items()])
        for path in sorted(Path(out).iterdir()):
            if path.is_file() and not path.name.startswith("."):
                track.client.log_artifact(run_id, str(path))
        track.end(status)
    except Exception as error:  # noqa: BLE001
        print(f"ragzoo {track.command}: warning: not logged to MLflow: {_tracking_error(track.uri, error)}",
              file=sys.stderr)
        track.end("FAILED")  # not left RUNNING, as if the grid went on


class Tracker:
    """One command's MLflow run: `working()` around the work (traces; a failure ends the run FAILED), then
    `finish(folder)` logs what the command wrote and ends it FINISHED. Off (`uri` None): both do nothing."""

    def __init__(self, uri: str | None, command: str, *, traces: bool = False, parent: str | None = None,
                 experiment_id: str | None = None):
        self.uri, self.command, self.traces, self.parent = uri, command, traces, parent
        self.experiment_id = experiment_id
        self.run_id: str | None = None
        self._client = None

    @property
    def enabled(self) -> bool:
        return self.uri is not None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _experiment(self) -> str:
        if self.experiment_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
            try:
                found = self.client.get_experiment_by_name(name)
            except Exception as error:  # noqa: BLE001 - MLflow raises several kinds for an unusable server
                raise _tracking_error(self.uri, error) from None
            if found is not None:
                self.experiment_id = found.experiment_id
            else:
                location = artifact_root(self.uri)  # refused in one line before MLflow writes anything
                try:
                    self.experiment_id = self.client.create_experiment(name, artifact_location=location)
                except Exception as error:  # noqa: BLE001
                    raise _tracking_error(self.uri, error) from None
        return self.experiment_id

    def start(self, name: str, tags: dict | None = None) -> str:
        """Create the MLflow run (once); returns its id."""
        if self.run_id is None:
            tags = {"ragzoo.command": self.command, **(tags or {})}
            if self.parent:
                tags["mlflow.parentRunId"] = self.parent  # how MLflow nests a run under another
            try:
                run = self.client.create_run(self._experiment(), run_name=name, tags=_scrubbed(tags))
            except Exception as error:  # noqa: BLE001
                raise _tracking_error(self.uri, error) from None
            self.run_id = run.info.run_id
        return self.run_id

    @contextlib.contextmanager
    def working(self, folder: str | os.PathLike) -> Iterator[None]:
        """Around the command's work: the run is started (and, with traces, active in this thread while DSPy's
        autolog records the calls); an exception ends it FAILED (KILLED on Ctrl-C) and goes on."""
        if not self.enabled:
            yield
            return
        self.start(self.name_of(folder))
        try:
            with self._tracing():
                yield
        except BaseException as error:
            self.end("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
            raise

    @contextlib.contextmanager
    def _tracing(self) -> Iterator[None]:
        if not self.traces:
            yield
            return
        import dspy
        import mlflow
        from mlflow.dspy.callback import MlflowCallback

        from mlflow.tracing.config import get_config

        mlflow.set_tracking_uri(self.uri)
        mlflow.set_experiment(experiment_id=self._experiment())
        mlflow.dspy.autolog(log_traces=True, silent=True)
        # the command's dspy.context took its settings before autolog added its callback: add it in this one
        callbacks = [c for c in dspy.settings.callbacks if not isinstance(c, MlflowCallback)] + [MlflowCallback()]
        # a span holds what the LM was sent and answered, which the run folder's records hold scrubbed: scrubbed
        # the same way as each span ends, before MLflow exports it (its previews are made from the root span)
        processors = [*get_config().span_processors, scrub_span]
        try:
            with mlflow.start_run(run_id=self.run_id, nested=bool(mlflow.active_run()), log_system_metrics=False), \
                    dspy.context(callbacks=callbacks), mlflow.tracing.configure(span_processors=processors):
                yield
        finally:
            mlflow.dspy.autolog(disable=True, silent=True)
            with contextlib.suppress(Exception):
                mlflow.flush_trace_async_logging()

    def finish(self, folder: str | os.PathLike | None, name: str | None = None, status: str = "FINISHED") -> None:
        """Log what `folder` (a run folder, an artifact folder, or a grid cell holding both) holds, then end the
        run. A server that fails now costs a warning, not the result: the folder on disk is complete."""
        if not self.enabled:
            return
        try:
            self.start(name or self.name_of(folder))
            if folder is not None and Path(folder).is_dir():
                log_folder(self.client, self.run_id, Path(folder))
            self.end(status)
        except Exception as error:  # noqa: BLE001
            print(f"ragzoo {self.command}: warning: not logged to MLflow: {_tracking_error(self.uri, error)}",
                  file=sys.stderr)
            self.end("FAILED")  # not left RUNNING, as if the work went on

    def name_of(self, folder) -> str:
        return f"{self.command} {Path(folder).name}" if folder else self.command

    def end(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            with contextlib.suppress(Exception):
                self.client.set_terminated(self.run_id, status=status)

    def cell(self, folder: str | os.PathLike) -> "Tracker":
        """A grid cell's run, nested under the grid's and started: a tracking server that fails in the middle of a
        grid costs a warning and this cell runs untracked (its folder on disk is whole); the grid goes on (the
        failure had failed the cell, and every later one)."""
        if not self.enabled:
            return self
        try:
            cell = self.child("cell")
            cell.start(cell.name_of(folder))
            return cell
        except Exception as error:  # noqa: BLE001 - MLflow raises several kinds for an unusable server
            print(f"ragzoo {self.command}: warning: cell {Path(folder).name} not logged to MLflow: "
                  f"{_tracking_error(self.uri, error)}", file=sys.stderr)
            return Tracker(None, "cell")

    def child(self, command: str) -> "Tracker":
        """A tracker whose run is nested under this one's (a grid's cell under the grid's run)."""
        return Tracker(self.uri, command, traces=self.traces, parent=self.start(self.command),
                       experiment_id=self._experiment())


def _tracking_error(uri: str | None, error: BaseException):
    from ragzoo.errors import ConfigError
    from ragzoo.secrets import redact, strip_url

    if isinstance(error, ConfigError):  # said once already
        return error
    text = redact(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
    return ConfigError(f"MLflow tracking at {strip_url(uri)} failed: {text[:300]}")


# ---------------------------------------------------------------------------------------------------------
# what is logged, read from the folders the commands wrote

def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def artifact_root(uri: str, *, create: bool = True) -> str | None:
    """Where a new experiment of a local SQLite tracking database keeps its artifacts: the folder
    `<database>-artifacts` beside it, ragzoo's (`ownership`: a new folder, marked; a user's is refused). MLflow's
    own default there is `./mlruns` in the current folder, which ragzoo never writes into. None for a tracking
    server or a file store, which decide it themselves. `create=False`: only the refusal (`from_args`, before
    MLflow creates the database)."""
    from ragzoo.ownership import claim, mark, sqlite_file

    name = sqlite_file(uri)
    database = Path(name).expanduser() if name is not None else None
    if database is None or not database.name or database.name == ":memory:":
        return None

    folder = claim(database.with_name(database.name + "-artifacts"), "mlflow-artifacts", flag="--mlflow",
                   remedy="move it away, or give --mlflow another database").path
    if create:
        folder.mkdir(parents=True, exist_ok=True)
        mark(folder, "mlflow-artifacts")
    return folder.resolve().as_uri()


def scrub_span(span) -> None:
    """An MLflow span processor: every input, output and attribute of `span` as `secrets.scrub` writes a record
    (an echoed key, a registered endpoint credential: hidden). Spans without a secret are left as they are."""
    from ragzoo.secrets import holds_secret, scrub

    inputs, outputs = span.inputs, span.outputs
    if holds_secret(inputs):
        span.set_inputs(scrub(inputs))
    if holds_secret(outputs):
        span.set_outputs(scrub(outputs))
    for key, value in (span.attributes or {}).items():
        if key not in ("mlflow.spanInputs", "mlflow.spanOutputs") and holds_secret(value):
            span.set_attribute(key, scrub(value))


def _scrubbed(value: Any) -> Any:
    from ragzoo.secrets import scrub

    return scrub(value)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:_PARAM_CHARS]


def _metric_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", str(name))


def params_of(config: dict, manifest: dict) -> dict[str, str]:
    """The params of a run from its config.json and/or its artifact's manifest.json (both already stored
    without secrets): method, knobs, optimizer, LM, endpoint, adapter, retriever, data, seed."""
    from ragzoo.secrets import strip_url

    source = {**manifest, **{k: v for k, v in config.items() if v is not None}}
    lm = source.get("lm") if isinstance(source.get("lm"), dict) else {"model": source.get("lm")}
    params: dict[str, Any] = {
        "method": source.get("method"), "program": config.get("program"),
        "optimizer": manifest.get("optimizer") or config.get("optimizer"),
        "lm": lm.get("model"), "endpoint": strip_url(source.get("api_base") or lm.get("api_base")),
        "adapter": source.get("adapter") if not isinstance(source.get("adapter"), dict)
        else source["adapter"].get("name"),
        "retriever": source.get("retriever"), "dataset": source.get("dataset"), "split": source.get("split"),
        "data": source.get("data"), "n": config.get("n"), "seed": source.get("seed"),
        "metric": source.get("metric") if not isinstance(source.get("metric"), list) else ",".join(source["metric"]),
    }
    for name, value in (source.get("knobs") or {}).items() if isinstance(source.get("knobs"), dict) else []:
        params[f"knob.{name}"] = value
    for name, value in (manifest.get("optimizer_settings") or {}).items():
        params[f"optimizer.{name}"] = value
    return {name: _text(value) for name, value in _scrubbed(params).items() if value is not None and value != ""}


def metrics_of(summary: dict, manifest: dict, records: list[dict] | None, *,
               placeholder: bool = False) -> dict[str, float]:
    """Numbers of a run: the evaluation's metrics and usage (summary.json), the compile's score and usage
    (manifest.json), and, when the records carry stage records, the stage diagnostics and attribution.
    `placeholder` (a dry run's placeholder answers): no score of any answer, only the usage it estimates."""
    found: dict[str, Any] = {}
    for name, value in (summary.get("metrics") or {}).items() if not placeholder else ():
        found[name] = value
    usage = summary.get("usage") or {}
    for name in ("lm_calls", "prompt_tokens", "completion_tokens", "cost", "cached_calls", "retrievals",
                 "lm_calls_per_question", "tokens_per_question", "latency_mean"):
        found[name] = usage.get(name)
    for name in ("n", "n_expected", "failures", "reasks", "degradations", "wall_seconds"):
        found[name] = summary.get(name)
    if manifest:
        found["compile.score"] = manifest.get("score") if not placeholder else None
        found["compile.cost"] = manifest.get("cost")
        for name in ("lm_calls", "prompt_tokens", "completion_tokens", "cached_calls"):
            found[f"compile.{name}"] = (manifest.get("usage") or {}).get(name)
    if records and not placeholder:
        found.update(_diagnostics(records))
    return {_metric_name(name): float(value) for name, value in found.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value}


def _diagnostics(records: list[dict]) -> dict[str, Any]:
    if not any(isinstance(record.get("stages"), dict) for record in records):
        return {}
    try:
        from ragzoo import diagnostics
    except ImportError:  # an older tree without stage diagnostics
        return {}
    found: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # diagnostics are extra numbers; they never fail a logged run
        for stage, stats in diagnostics.stage_summary(records).items():
            for measure, value in stats.items():
                found[f"stage.{stage}.{measure}"] = value
    with contextlib.suppress(Exception):
        summary = diagnostics.attribution_summary(records)
        for klass, stats in summary.get("classes", {}).items():
            found[f"attribution.{klass}.share"] = stats.get("share")
            found[f"attribution.{klass}.count"] = stats.get("count")
    return found


def log_folder(client, run_id: str, folder: Path) -> None:
    """Params, metrics and artifacts of a run folder, an artifact folder, or a grid cell folder (run/ and
    artifact/ inside)."""
    from ragzoo.artifacts import MANIFEST_FILE
    from ragzoo.runs import CONFIG_FILE, PREDICTIONS_FILE, SUMMARY_FILE, read_predictions

    run = folder / "run" if (folder / "run" / CONFIG_FILE).is_file() else folder
    artifact = folder / "artifact" if (folder / "artifact" / MANIFEST_FILE).is_file() else folder
    config = _read_json(run / CONFIG_FILE)
    summary = _read_json(run / SUMMARY_FILE)
    manifest = _read_json(artifact / MANIFEST_FILE)
    records = read_predictions(run / PREDICTIONS_FILE) if (run / PREDICTIONS_FILE).is_file() else None
    import time

    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    params = [Param(name, value) for name, value in params_of(config, manifest).items()]
    placeholder = any(isinstance(source.get("lm"), dict) and source["lm"].get("dry_run")
                      for source in (config, manifest))
    metrics = [Metric(name, value, now, 0)
               for name, value in metrics_of(summary, manifest, records, placeholder=placeholder).items()]
    tags = [RunTag("ragzoo.folder", str(folder.resolve()))]
    if placeholder:  # its em/f1 would sit beside real runs' in MLflow's comparisons
        tags.append(RunTag("ragzoo.dry_run", "true"))
    if summary.get("stopped") or summary.get("aborted"):
        tags.append(RunTag("ragzoo.stopped", _text(summary.get("stopped") or summary.get("aborted"))))
    if isinstance(summary.get("lost"), dict):  # questions that ended with no record (a worker killed): not whole
        tags.append(RunTag("ragzoo.lost", _text(f"{summary['lost'].get('questions')}: {summary['lost'].get('why')}")))
    for start in range(0, max(len(params), len(metrics), 1), 100):  # MLflow's batch limit is 100 params
        client.log_batch(run_id, metrics=metrics[start:start + 100], params=params[start:start + 100],
                         tags=tags if start == 0 else [])
    for path in sorted(folder.rglob("*")):  # the files as they are on disk (already scrubbed by their writers)
        if path.is_file() and not path.name.startswith(".") and not path.is_symlink():
            where = path.parent.relative_to(folder).as_posix()
            client.log_artifact(run_id, str(path), artifact_path=None if where == "." else where)
