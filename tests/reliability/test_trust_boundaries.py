"""Trust boundaries of a compiled artifact: loading one never reads a path outside what the user named (their
RAGZOO_DATA, their --retriever) and never contacts a host the user did not name, unless the user confirms the
artifact's retriever with --trust-retriever (Python: trust_retriever=True); the refusal names what the artifact
asked for. Every size, count and nesting depth read from an artifact is bounded."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

DRY = ["--lm", "dry-run"]


@pytest.fixture(scope="module")
def rag_artifact(tmp_path_factory, small_corpus):
    """A `rag` artifact whose manifest names a corpus outside RAGZOO_DATA (an absolute tmp path)."""
    from ragzoo.cli import main

    out = tmp_path_factory.mktemp("trust") / "rag"
    code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "none", *DRY, "--retriever", f"bm25:{small_corpus}", "--out", str(out)])
    assert code == 0
    assert json.loads((out / "manifest.json").read_text())["retriever"] == f"bm25:{small_corpus}"
    return out


def _copy(artifact: Path, tmp_path: Path, **manifest_changes) -> Path:
    copy = tmp_path / "art"
    shutil.copytree(artifact, copy)
    if manifest_changes:
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest.update(manifest_changes)
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


class _Listener:
    """A loopback TCP port that counts connections (a host the user never named)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/api/search"

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


def test_an_artifact_corpus_outside_the_data_folder_is_refused_until_trusted(rag_artifact, small_corpus, tmp_path,
                                                                              cli, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGZOO_CACHE", str(cache))
    result = cli("ask", "--program", rag_artifact, "What is item 3?", *DRY)
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert f"bm25:{small_corpus}" in line and "outside RAGZOO_DATA" in line and "--trust-retriever" in line
    assert not cache.exists() or not any(cache.rglob("*")), "the artifact's corpus was indexed before the refusal"
    trusted = cli("ask", "--program", rag_artifact, "What is item 3?", *DRY, "--trust-retriever")
    assert trusted.code == 0, trusted.err
    chosen = cli("ask", "--program", rag_artifact, "What is item 3?", *DRY, "--retriever", f"bm25:{small_corpus}")
    assert chosen.code == 0, chosen.err  # naming the retriever yourself is the other way


@pytest.mark.parametrize("spec_of", [
    lambda url: f"colbertv2:{url}",
    lambda url: f"colbertv2:{url}?token=abc",
])
def test_an_artifact_url_retriever_is_never_contacted_without_trust(rag_artifact, tmp_path, cli, spec_of):
    listener = _Listener()
    try:
        art = _copy(rag_artifact, tmp_path, retriever=spec_of(listener.url))
        questions = tmp_path / "q.jsonl"
        questions.write_text(json.dumps({"id": "a", "question": "What is item 3?", "answers": ["x"]}) + "\n")
        result = cli("evaluate", "--program", art, "--data", questions, *DRY, "--out", tmp_path / "run")
        assert result.code == 2 and len(result.err_lines) == 1, result.err
        assert "sends every question to" in result.err and listener.url in result.err
        assert "token=abc" not in result.err  # the refusal names the host, not its credentials
        assert listener.connections == 0
        assert not (tmp_path / "run").exists()
    finally:
        listener.close()


def test_python_load_follows_the_same_rule_and_trust_is_a_keyword(rag_artifact):
    import ragzoo
    from ragzoo.errors import ArtifactError

    with pytest.raises(ArtifactError, match="trust_retriever=True"):
        ragzoo.load(rag_artifact)
    program = ragzoo.load(rag_artifact, trust_retriever=True)
    assert program.ragzoo_manifest["method"] == "rag"


def test_what_stays_inside_the_data_folder_needs_no_trust(tmp_path, monkeypatch):
    from ragzoo.artifacts import untrusted_retriever

    data = tmp_path / "data"
    (data / "hotpotqa").mkdir(parents=True)
    (data / "hotpotqa" / "c.jsonl").write_text("{}\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("private")
    (data / "link.jsonl").symlink_to(outside)
    monkeypatch.setenv("RAGZOO_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    assert untrusted_retriever("bm25:hotpotqa/c.jsonl") is None
    assert untrusted_retriever("bm25:hotpotqa/c.jsonl?k1=1.2&b=0.5") is None
    assert untrusted_retriever("fixed") is None
    for spec in (f"bm25:{outside}", "bm25:../secret.txt", "bm25:hotpotqa/../../secret.txt", "bm25:~/notes.jsonl",
                 "bm25:link.jsonl", "bm25:secret.txt", "dense:hotpotqa/c.jsonl?model=/tmp/evil",
                 "colbertv2:http://10.0.0.1:8893/", "colbert:/var/index", "mystery:thing"):
        assert untrusted_retriever(spec), spec


def _knn_artifact(tmp_path, *, bootstrap=None, embedder=None) -> Path:
    """A `direct` artifact rewritten as a KNN program with the given bootstrap settings and embedder."""
    from ragzoo.cli import main

    out = tmp_path / "direct"
    assert main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "none", *DRY, "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    state = json.loads((out / "program.json").read_text())
    import hashlib

    state = {f"program.{name}": value for name, value in state.items() if name != "metadata"}
    data = json.dumps(state).encode()
    structure = {"kind": "knn", "members": 1, "k": 3, "bootstrap": bootstrap or {}}
    if embedder is not None:
        structure["embedder"] = embedder
    manifest.update(structure=structure, program_sha256=hashlib.sha256(data).hexdigest())
    (out / "program.json").write_bytes(data)
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "knn_trainset.json").write_text(json.dumps([{"fields": {"question": "q", "answer": "a"},
                                                         "inputs": ["question"]}]))
    return out


@pytest.mark.parametrize("bootstrap, named", [
    ({"metric": "builtins:print"}, "builtins:print"),  # loading would import and call any function
    ({"metric": "this:s"}, "this:s"),
    ({"metric": "em", "max_rounds": 1000}, "max_rounds"),  # one question would cost a thousand passes
    ({"metric": "em", "teacher_settings": "x"}, "teacher_settings"),
    ({"metric": "em", "max_errors": 2.5}, "max_errors"),
])
def test_a_knn_artifact_s_bootstrap_settings_import_no_code_and_are_bounded(tmp_path, cli, bootstrap, named):
    out = _knn_artifact(tmp_path, bootstrap=bootstrap)
    result = cli("ask", "--program", out, "who?", *DRY)
    assert result.code == 2 and len(result.err_lines) == 1 and named in result.err, result.err
    assert "Zen of Python" not in result.out


def test_knn_settings_that_would_not_load_are_refused_at_compile(tmp_path, cli):
    result = cli("compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "knn", "--optimizer-setting", "max_rounds=11", *DRY, "--out", tmp_path / "k")
    assert result.code == 2 and "max_rounds" in result.err and not (tmp_path / "k").exists(), result.err
    result = cli("compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "2",
                 "--optimizer", "knn", "--metric", "metrics.answer:exact_match", *DRY, "--out", tmp_path / "k")
    assert result.code == 2 and "built-in --metric" in result.err and not (tmp_path / "k").exists(), result.err


def test_a_knn_program_with_a_function_as_its_metric_compiles_but_is_not_saved(tmp_path):
    """Review of the fix: a KNN compile from Python with one's own metric function was refused, though the program
    in memory keeps the function; only saving it (a saved program names its metric) is refused."""
    import dspy

    from ragzoo import programs
    from ragzoo.errors import ArtifactError
    from ragzoo.lm import make_dry_run_lm
    from ragzoo.optimizers import compile_program

    def my_metric(example, prediction, trace=None):
        return 1.0

    examples = [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answers=[f"answer {i}"],
                             answer=f"answer {i}").with_inputs("question") for i in range(6)]
    with dspy.context(lm=make_dry_run_lm()):
        result = compile_program(programs.get("direct"), trainset=examples[:4], valset=[],  # nothing embedded
                                 optimizer="knn", metric=my_metric)
    assert result.program.bootstrap_settings["metric"] and result.program._metric is not None
    from ragzoo import save

    with pytest.raises(ArtifactError, match="cannot save this KNN program.*built-in metric"):
        save(result.program, tmp_path / "k", method="direct")
    assert not (tmp_path / "k").exists()


def test_a_knn_artifact_cannot_name_its_own_embedding_model(tmp_path, cli):
    """The KNN embedder is a model load (a path or a hub download): only the default, unless trusted."""
    out = _knn_artifact(tmp_path, embedder="https://example.invalid/evil-model")
    result = cli("ask", "--program", out, "who?", *DRY)
    assert result.code == 2 and len(result.err_lines) == 1 and "evil-model" in result.err, result.err
    assert "--trust-retriever" in result.err


def test_a_huge_ensemble_is_refused_at_once(rag_artifact, tmp_path, cli):
    import time

    art = _copy(rag_artifact, tmp_path, structure={"kind": "ensemble", "members": 100_000_000})
    started = time.monotonic()
    result = cli("ask", "--program", art, "who?", *DRY, "--trust-retriever")
    assert result.code == 2 and "members" in result.err and len(result.err_lines) == 1, result.err
    assert time.monotonic() - started < 10


def test_endpoint_credentials_are_redacted_from_refusals(rag_artifact, tmp_path, cli):
    secret = "Zq9xTOKENvalue0123456789abcdef"
    art = _copy(rag_artifact, tmp_path, retriever=f"colbertv2:http://user:{secret}@127.0.0.1:9/{secret}/search")
    result = cli("ask", "--program", art, "who?", *DRY)
    assert result.code == 2 and secret not in result.err and secret not in result.out, result.err
    assert os.environ.get("RAGZOO_DEBUG") is None


def test_an_absolute_corpus_path_inside_ragzoo_data_is_followed(tmp_path, monkeypatch):
    """Review: `index build --corpus $RAGZOO_DATA/...` printed an absolute spec, and an artifact compiled with it was
    refused as reading a file "outside RAGZOO_DATA", which it was not. An absolute path in RAGZOO_DATA is followed;
    one outside is refused, saying it is absolute."""
    from ragzoo.artifacts import untrusted_retriever

    data = tmp_path / "data"
    (data / "hotpotqa").mkdir(parents=True)
    (data / "hotpotqa" / "c.jsonl").write_text("{}\n")
    (tmp_path / "elsewhere.jsonl").write_text("{}\n")
    monkeypatch.setenv("RAGZOO_DATA", str(data))
    assert untrusted_retriever(f"bm25:{data}/hotpotqa/c.jsonl") is None
    assert untrusted_retriever("bm25:hotpotqa/c.jsonl") is None
    assert untrusted_retriever(f"bm25:{tmp_path}/elsewhere.jsonl") == (
        f"reads '{tmp_path}/elsewhere.jsonl', an absolute path outside RAGZOO_DATA")
    assert "outside RAGZOO_DATA" in untrusted_retriever(f"bm25:{data}/../elsewhere.jsonl")


def test_a_fixed_retriever_without_recorded_passages_names_the_split_that_has_them(capsys):
    """Review: the refusal said only "use another --retriever"; for nq_open, --split dev_activerag500 works."""
    from ragzoo.cli import main

    assert main(["ask", "--method", "rag", "--retriever", "fixed", "--dataset", "nq_open", "--lm", "dry-run",
                 "where does the thames river begin and end"]) == 2
    assert "use --split dev_activerag500 (recorded passages), or another --retriever" in capsys.readouterr().err
