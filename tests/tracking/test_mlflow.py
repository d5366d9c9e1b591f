"""`--mlflow URI` against a real `mlflow server` (SQLite backend, loopback, artifacts in tmp_path), read back
through MLflow's own client: one run per evaluation, per compile and per grid cell (nested under the grid's
run), with params, metrics and the run folder's files as artifacts; and no key anywhere in what MLflow
stored (its database and artifact store, grepped byte-wise)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragzoo.cli import main

FAKE_KEY = "sk-fake-" + "Zq7mRk2Lw9" * 3  # the environment's key: sent to the stub LM, never to MLflow
OTHER_SECRET = "tok-" + "Pq8nXv3Jd6" * 3  # any *_TOKEN of the environment is a secret too

GRID = """
[grid]
name = "tiny-mlflow"
n = 2
lms = ["dry-run"]

[[datasets]]
name = "nq_open"
split = "dev_activerag500"
retriever = "fixed"
metrics = ["em", "f1"]
label = "NQ"

[[methods]]
id = "direct"
label = "Direct"

[[methods]]
id = "rag"
label = "RAG"
knobs = { k = 2 }
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'ragzoo[mlflow]')")
    root = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    # no job runner: it serves GenAI scorer jobs, none of which these tests start, and loading them imports LiteLLM
    # (the server's start-up: 11 s of CPU with it, 8 s without)
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("OPENAI_API_KEY", None)  # the server never sees the key either way; it must not hold it by accident
    log = open(root / "server.log", "wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
         "--workers", "1"], cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)
    try:
        yield {"uri": uri, "root": root}
    finally:
        # the server and its uvicorn child at once: a graceful stop took the 5 s it was given, and nothing here
        # reads what the server would do on its way out
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        log.close()


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", OTHER_SECRET)
    monkeypatch.delenv("RAGZOO_MLFLOW", raising=False)


@pytest.fixture
def stub():
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        yield server


def _client(server):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=server["uri"])


def _run_of(client, folder: Path):
    experiment = client.get_experiment_by_name("ragzoo")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`ragzoo.folder` = '{folder.resolve()}'")
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for entry in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, entry.path) if entry.is_dir else {entry.path}
    return found


@pytest.mark.slow
def test_evaluate_logs_one_run_with_params_metrics_and_the_run_folder(mlflow_server, env, stub, tmp_path):
    out = tmp_path / "run-rag"
    code = main(["evaluate", "--method", "rag", "--knob", "k=3", "--dataset", "nq_open", "--split", "dev_activerag500",
                 "--retriever", "fixed", "-n", "3",
                 "--lm", "openai/stub", "--api-base", f"{stub.base_url}/v1", "--seed", "7",
                 "--out", str(out), "--mlflow", mlflow_server["uri"]])
    assert code == 0
    client = _client(mlflow_server)
    run = _run_of(client, out)
    assert run.info.status == "FINISHED" and run.info.run_name == "evaluate run-rag"
    params = run.data.params
    assert params["method"] == "rag" and params["knob.k"] == "3" and params["seed"] == "7"
    assert params["lm"] == "openai/stub" and params["endpoint"] == f"{stub.base_url}/v1"
    assert params["dataset"] == "nq_open" and params["split"] == "dev_activerag500"
    assert params["adapter"] == "chat" and params["retriever"] == "fixed"
    metrics = run.data.metrics
    assert {"em", "f1", "cost", "lm_calls", "prompt_tokens", "failures"} <= set(metrics)
    assert metrics["lm_calls"] == 3 and metrics["n"] == 3 and metrics["failures"] == 0
    if any(name.startswith("stage.") for name in metrics):  # records with stage records: their diagnostics too
        assert any(name.startswith("attribution.") for name in metrics)
    assert {"config.json", "predictions.jsonl", "summary.json"} <= _artifacts(client, run.info.run_id)


@pytest.mark.slow
def test_compile_logs_its_artifact(mlflow_server, env, tmp_path):
    out = tmp_path / "art"
    code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "none", "--lm", "dry-run", "--out", str(out), "--mlflow", mlflow_server["uri"]])
    assert code == 0
    client = _client(mlflow_server)
    run = _run_of(client, out)
    assert run.info.status == "FINISHED" and run.data.tags["ragzoo.command"] == "compile"
    assert run.data.params["method"] == "direct" and run.data.params["optimizer"] == "none"
    assert "manifest.json" in _artifacts(client, run.info.run_id)


@pytest.mark.slow
def test_sweep_logs_a_parent_run_with_one_nested_run_per_cell(mlflow_server, env, tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID, encoding="utf-8")
    out = tmp_path / "grid-out"
    code = main(["sweep", str(grid), "--out", str(out), "--quiet", "--mlflow", mlflow_server["uri"]])
    assert code == 0
    client = _client(mlflow_server)
    experiment = client.get_experiment_by_name("ragzoo")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`ragzoo.grid` = 'tiny-mlflow'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.metrics["cells_done"] == 2
    assert {"grid.json", "results.md", "results.csv", "results.json"} <= _artifacts(client, parent.info.run_id)
    children = client.search_runs([experiment.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(child.data.params["method"] for child in children) == ["direct", "rag"]
    for child in children:
        assert child.info.status == "FINISHED" and child.data.metrics["n"] == 2
        assert {"run/config.json", "run/predictions.jsonl", "run/summary.json"} <= _artifacts(client, child.info.run_id)
    # the cells' commands logged no runs of their own: the grid's and its cells' are all there is of this grid
    cells = client.search_runs([experiment.experiment_id], filter_string="tags.`ragzoo.command` = 'evaluate'")
    assert not [run for run in cells if str(out) in run.data.tags.get("ragzoo.folder", "")]


@pytest.mark.slow
def test_traces_on_request_and_no_key_anywhere_in_mlflow(mlflow_server, env, tmp_path):
    """With an LM that echoes the key it was sent in every answer (the stub's "echo" fault): the spans' outputs,
    and the trace previews made from them, are scrubbed before MLflow stores them, as the run folder is."""
    import mlflow

    from ragzoo.stubserver import StubLMServer

    out = tmp_path / "traced"
    with StubLMServer(faults=lambda index, body: "echo") as stub:
        code = main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "2", "--lm", "openai/stub",
                     "--api-base", f"{stub.base_url}/v1", "--out", str(out), "--mlflow", mlflow_server["uri"],
                     "--mlflow-traces", "--no-cache"])
        assert code == 0 and stub.requests >= 2  # the LM answered, echoing the key, each question
    client = _client(mlflow_server)
    run = _run_of(client, out)
    experiment = client.get_experiment_by_name("ragzoo")
    traces = client.search_traces(locations=[experiment.experiment_id], max_results=50)
    assert traces, "no DSPy trace was logged with --mlflow-traces"
    assert any("***" in str(trace.data.spans[-1].outputs) for trace in traces)  # what was echoed, scrubbed
    assert mlflow.__version__  # the server really stored something: now grep all it stored
    stored = [path for path in Path(mlflow_server["root"]).rglob("*") if path.is_file() and path.name != "server.log"]
    assert any(path.name == "mlflow.db" for path in stored) and any(path.name == "config.json" for path in stored)
    for path in stored:
        data = path.read_bytes()
        for secret in (FAKE_KEY, OTHER_SECRET):
            assert secret.encode() not in data, f"{secret[:8]}... in {path}"
    assert run.info.status == "FINISHED"


def test_without_mlflow_installed_the_flag_is_one_line_and_nothing_is_written(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run",
                 "--out", str(out), "--mlflow", "http://127.0.0.1:9"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and "pip install 'ragzoo[mlflow]'" in err
    assert "Traceback" not in err and not out.exists()


# with the tests of the server fixture (tests/conftest.py names their group after this module): the worker that runs
# them has imported mlflow (1.8 s of CPU), which this test imports too
@pytest.mark.xdist_group("test_mlflow")
def test_a_tracking_server_that_does_not_answer_is_one_line_before_the_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'ragzoo[mlflow]')")
    # ragzoo's retries, without their back-off waits (2.5 s here; MLflow's own variable, which ragzoo leaves alone)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run",
                 "--out", str(out), "--mlflow", f"http://127.0.0.1:{_free_port()}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.count("MLflow tracking at") == 1, err
    assert "Traceback" not in err and not out.exists()


def test_without_the_flag_mlflow_is_not_even_imported(tmp_path, monkeypatch):
    # in this process, with every mlflow module taken out of sys.modules for the run (put back afterwards): the
    # same question as a fresh interpreter's, without starting one
    monkeypatch.delenv("RAGZOO_MLFLOW", raising=False)
    for name in [name for name in sys.modules if name == "mlflow" or name.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run",
                 "--out", str(out)])
    assert code == 0 and "mlflow" not in sys.modules


@pytest.mark.xdist_group("test_mlflow")
def test_a_local_database_keeps_its_artifacts_beside_it_not_in_the_current_folder(tmp_path, capsys, monkeypatch, env):
    """`--mlflow sqlite:///DB`: MLflow's default artifact root is ./mlruns in the current folder (found by review:
    a user's mlruns/ got the run's files). The experiment keeps them in `DB-artifacts`, a folder ragzoo marks; a
    folder of the user's by that name is refused in one line before the run."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'ragzoo[mlflow]')")
    from ragzoo.ownership import kind_of

    here = tmp_path / "here"
    (here / "mlruns").mkdir(parents=True)
    (here / "mlruns" / "NOTES.md").write_text("mine\n")
    monkeypatch.chdir(here)
    database = tmp_path / "db" / "ml.db"
    database.parent.mkdir()
    argv = ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run", "--mlflow",
            f"sqlite:///{database}"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    artifacts = tmp_path / "db" / "ml.db-artifacts"
    assert kind_of(artifacts) == "mlflow-artifacts"
    assert {path.name for path in artifacts.rglob("*")} >= {"config.json", "summary.json", "predictions.jsonl"}
    assert sorted(path.name for path in here.rglob("*")) == ["NOTES.md", "mlruns"]  # the current folder: untouched
    # a second database whose artifact folder is a user's: refused before the run
    (tmp_path / "db" / "other.db-artifacts").mkdir()
    (tmp_path / "db" / "other.db-artifacts" / "NOTES.md").write_text("mine\n")
    argv[-1] = f"sqlite:///{tmp_path / 'db' / 'other.db'}"
    capsys.readouterr()
    code = main([*argv, "--out", str(tmp_path / "run2")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "other.db-artifacts" in err and "Traceback" not in err, err
    assert not (tmp_path / "run2").exists()
    assert sorted(path.name for path in (tmp_path / "db" / "other.db-artifacts").iterdir()) == ["NOTES.md"]


@pytest.mark.xdist_group("test_mlflow")
def test_a_dry_run_logs_no_score_and_a_run_whose_logging_failed_ends_failed(tmp_path, capsys, monkeypatch, env):
    """Review: a `--lm dry-run` evaluation logged its placeholder em/f1 (0.0) as real metrics beside real runs; and
    a tracking store failing at the end left the MLflow run RUNNING for ever, as if the work went on."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'ragzoo[mlflow]')")
    from mlflow.tracking import MlflowClient

    from ragzoo import tracking

    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    argv = ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "2", "--lm", "dry-run", "--mlflow", uri]
    assert main([*argv, "--out", str(tmp_path / "dry")]) == 0, capsys.readouterr().err
    client = MlflowClient(tracking_uri=uri)
    run = _run_of(client, tmp_path / "dry")
    assert not {"em", "f1"} & set(run.data.metrics) and run.data.metrics["lm_calls"] == 2
    assert run.data.tags["ragzoo.dry_run"] == "true"

    def refused(*args, **kwargs):
        raise RuntimeError("the artifact store refused the upload")

    from tests.lost_question import first_question_lost

    with first_question_lost(monkeypatch):  # a run that lost a question is tagged so, not a clean FINISHED run
        assert main([*argv, "--out", str(tmp_path / "lost")]) == 4
    tag = _run_of(client, tmp_path / "lost").data.tags["ragzoo.lost"]
    assert tag.startswith("1: example ") and tag.endswith(": an internal error"), tag
    monkeypatch.setattr(tracking, "log_folder", refused)
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "broken")]) == 0  # the run folder is complete: a warning only
    assert "not logged to MLflow" in capsys.readouterr().err
    experiment = client.get_experiment_by_name("ragzoo")
    broken = client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'evaluate broken'")
    assert len(broken) == 1 and broken[0].info.status == "FAILED"


@pytest.mark.xdist_group("test_mlflow")
def test_a_tracking_server_failing_mid_grid_costs_a_warning_not_the_cells(tmp_path, capsys, monkeypatch, env):
    """Grid review: the tracking database broken after the first cell failed every later cell ("cell ... failed:
    ConfigError: MLflow tracking ... failed", the rest not run, exit 1). Cells run untracked, with a warning."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'ragzoo[mlflow]')")
    from mlflow.tracking import MlflowClient

    from tests.grid.conftest import write_tiny

    created = MlflowClient.create_run
    cells = []

    def breaks_after_the_first_cell(self, experiment_id, *args, run_name=None, **kwargs):
        if str(run_name).startswith("cell "):
            cells.append(run_name)
            if len(cells) > 1:
                raise RuntimeError("database disk image is malformed")
        return created(self, experiment_id, *args, run_name=run_name, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_run", breaks_after_the_first_cell)
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    code = main(["sweep", str(grid), "--out", str(out), "--quiet", "--mlflow", f"sqlite:///{tmp_path / 'ml.db'}"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert len(cells) == 2 and err.count("not logged to MLflow") == 1, err
    table = json.loads((out / "results.json").read_text())
    statuses = {row["method"]: row["cells"]["HotPotQA"].get("status") for row in table["rows"]}
    assert statuses["direct"] == statuses["rag"] == "done"
