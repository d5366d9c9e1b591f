"""Secrets never stored or printed (endpoints kept without credentials, any known secret value redacted from
every error text), and paid work never wasted (--out checked before the first LM call; an evaluation stops at
its first failed write, keeping what was written; a budget of 0 is refused instead of leaving an empty run)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from ragzoo.testing import JSONHandler, LoopbackHTTPServer

KEY = "plainsecretvalue0123456789"  # not shaped like a provider key: only its value can be recognised


class _EchoingServer(LoopbackHTTPServer):
    """An OpenAI-compatible server that refuses every completion, echoing the key it was sent (as OpenAI's
    'Incorrect API key provided: ...' does); /models answers so the endpoint check passes."""

    def __init__(self):
        outer = self
        self.completions = 0

        class Handler(JSONHandler):
            def do_GET(self):  # noqa: N802
                self.reply(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.completions += 1
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                self.reply(401, {"error": {"message": f"Incorrect API key provided: {key}. You can find your "
                                                      f"API key at {self.path}", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})

        super().__init__(Handler)


def _files_text(folder: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in folder.rglob("*") if path.is_file())


def test_a_key_echoed_by_the_server_is_neither_stored_nor_printed(tmp_path, cli, monkeypatch, questions_file):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with _EchoingServer() as server:
        common = ["--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--no-cache"]
        asked = cli("ask", "--method", "direct", "Who wrote it?", *common)
        ran = cli("evaluate", "--method", "direct", "--data", questions_file(2), *common, "--out", tmp_path / "run",
                  "--allow-failures")
        assert server.completions > 0  # the key really went to the server and came back in its errors
    assert asked.code == 1 and "Incorrect API key provided" in asked.out
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert records and all("Incorrect API key provided" in r["error"]["message"] for r in records)
    for text in (asked.out, asked.err, ran.out, ran.err, _files_text(tmp_path / "run")):
        assert KEY not in text


def test_endpoint_credentials_are_not_stored(tmp_path, cli, monkeypatch, questions_file):
    """A token in the --api-base path is kept out of config.json, summary.json and every error message."""
    from ragzoo.stubserver import StubLMServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    token = "tok3nAbCdEf0123456789xyzQ"
    with StubLMServer() as server:
        api_base = f"{server.base_url}/{token}/v1?tenant=acme42secret"
        result = cli("evaluate", "--method", "direct", "--data", questions_file(2), "--lm", "openai/stub",
                     "--api-base", api_base, "--no-cache", "--out", tmp_path / "run", "--allow-failures",
                     "--max-reasks", "0")
    stored = _files_text(tmp_path / "run")
    assert (tmp_path / "run" / "config.json").is_file(), result.err
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["api_base"].startswith(server.base_url) and "***" in config["api_base"]
    for secret in (token, "acme42secret"):  # a path token and a query value: never stored, never printed
        assert secret not in stored and secret not in result.err and secret not in result.out


def test_the_manifest_keeps_no_credential_of_the_retriever_endpoint(tmp_path):
    from ragzoo import programs
    from ragzoo.artifacts import save

    class Remote:
        spec = "colbertv2:http://reader:pa55word99@127.0.0.1:9/search?api_key=k3yvalue0001"

        def __call__(self, query, k):
            return []

    program = programs.get("rag", retriever=Remote())
    out = save(program, tmp_path / "art", config={"retriever": Remote.spec, "api_base": "http://h/v1?key=k3yvalue0001"})
    text = (out / "manifest.json").read_text()
    assert "pa55word99" not in text and "k3yvalue0001" not in text
    assert json.loads(text)["retriever"] == "colbertv2:http://127.0.0.1:9/search"


# ---------------------------------------------------------------------------------------------------------
# paid work


def _compile(out, server, *extra):
    return ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "3", "--dev-n", "0",
            "--optimizer", "bootstrap", "--lm", "openai/stub", "--api-base", server.base_url + "/v1", "--no-cache",
            "--out", out, *extra]


@pytest.mark.parametrize("case", ["out-under-a-file", "out-is-a-file", "force-over-a-folder-of-documents",
                                  "disk-full", "read-only-folder"])
def test_compile_checks_out_before_any_lm_call(case, tmp_path, cli, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("mine")
    out, extra = {"out-under-a-file": (blocker / "art", []), "out-is-a-file": (blocker, ["--force"]),
                  "force-over-a-folder-of-documents": (docs, ["--force"]),
                  "disk-full": (tmp_path / "art", []), "read-only-folder": (tmp_path / "art", [])}[case]
    if case == "read-only-folder":  # (the tests run as root, whom chmod does not stop: the check is what counts)
        import os

        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == tmp_path
                            else real_access(path, mode, *a, **k))
    if case == "disk-full":
        import shutil
        from collections import namedtuple

        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 4096, 4096))
    with StubLMServer() as server:
        result = cli(*_compile(out, server, *extra))
        assert server.requests == 0, "the compile paid for LM calls it could not save"
    assert result.code == 2 and len(result.err_lines) == 1 and "pickle" not in result.err, result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert (docs / "notes.txt").read_text() == "mine" and blocker.read_text() == "not a folder"


def test_evaluate_stops_at_the_first_failed_write_and_keeps_what_was_written(tmp_path, cli, monkeypatch,
                                                                              questions_file):
    from ragzoo import runs
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    original = runs.PredictionWriter.write
    calls = []

    def failing_write(self, record):
        calls.append(record["id"])
        if len(calls) >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, record)

    monkeypatch.setattr(runs.PredictionWriter, "write", failing_write)
    run = tmp_path / "run"
    with StubLMServer() as server:
        result = cli("evaluate", "--method", "direct", "--data", questions_file(6), "--lm", "openai/stub-model",
                     "--api-base", server.base_url + "/v1", "--no-cache", "--out", run)
        paid = server.requests
    assert paid == 2, f"{paid} examples paid for; writes failed from the 2nd on"
    errors = [line for line in result.err_lines if "error" in line]  # (plain progress lines may precede it)
    assert result.code == 2 and len(errors) == 1 and "--resume" in errors[0], result.err
    assert "No space left" in errors[0] and "Traceback" not in result.err
    lines = (run / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["id"] == "q0"


def test_a_program_state_that_is_not_json_is_refused_without_pickle_advice(tmp_path):
    import dspy

    from ragzoo import programs
    from ragzoo.artifacts import save
    from ragzoo.errors import ArtifactError

    program = programs.get("direct")
    predictor = next(p for _, p in program.named_predictors())
    predictor.demos = [dspy.Example(question="q", answer=object())]
    with pytest.raises(ArtifactError) as raised:
        save(program, tmp_path / "art")
    assert "pkl" not in str(raised.value) and "pickle" not in str(raised.value).replace("never a pickle", "")
    assert "JSON only" in str(raised.value)
    assert not (tmp_path / "art").exists()


@pytest.mark.parametrize("argv", [
    ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "2", "--lm", "dry-run", "--max-calls", "0"],
    ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "2", "--lm", "dry-run", "--max-cost", "0"],
    ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--lm", "dry-run",
     "--max-calls", "0"],
])
def test_a_zero_budget_is_refused_before_anything_is_written(argv, tmp_path, cli):
    out = tmp_path / "out"
    result = cli(*argv, "--out", out)
    assert result.code == 2 and len(result.err_lines) == 1 and "allows no LM call" in result.err, result.err
    assert "--resume" not in result.err
    assert not out.exists()


@pytest.mark.parametrize("name, argv_of", [
    ("manifest.json", lambda art, q, out: ["ask", "--program", art, "who?", "--lm", "dry-run"]),
    ("program.json", lambda art, q, out: ["ask", "--program", art, "who?", "--lm", "dry-run"]),
    ("q.jsonl", lambda art, q, out: ["evaluate", "--method", "direct", "--data", q, "--lm", "dry-run", "--out", out]),
    ("config.json", lambda art, q, out: ["report", out]),
])
def test_an_unreadable_file_is_one_line_saying_which(name, argv_of, tmp_path, cli, monkeypatch, questions_file):
    """Permission denied on a file ragzoo reads: one line naming the file, never an internal error. (Simulated:
    the tests run as root, whom chmod does not stop.)"""
    import builtins
    import io

    from ragzoo.cli import main

    art = tmp_path / "art"
    assert main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "none", "--lm", "dry-run", "--out", str(art)]) == 0
    out = tmp_path / "run"
    questions = questions_file(1, "q.jsonl")
    assert main(["evaluate", "--method", "direct", "--data", str(questions), "--lm", "dry-run", "--out", str(out)]) == 0
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).name == name:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)
    result = cli(*argv_of(art, questions, tmp_path / ("run2" if name == "q.jsonl" else "run")))
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert name in result.err and "Permission denied" in result.err and "internal error" not in result.err


@pytest.mark.parametrize("optimizer", ["labeled", "knn"])
def test_a_secret_quoted_by_the_training_questions_is_in_no_file_of_the_artifact(tmp_path, cli, monkeypatch,
                                                                                   optimizer):
    """The secrets rule covers everything ragzoo writes: program.json's demos and a KNN program's training set."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What does {KEY} unlock, item {i}?",
                                        "answer": f"door {i} {KEY}"}) + "\n" for i in range(6)))
    result = cli("compile", "--method", "direct", "--data", data, "--train-n", "4", "--dev-n", "0", "--optimizer",
                 optimizer, "--lm", "dry-run", "--out", tmp_path / "art")
    assert result.code == 0, result.err
    written = _files_text(tmp_path / "art")
    assert KEY not in written and "***" in written
