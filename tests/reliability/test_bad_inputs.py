"""The bad-input catalogue: every CLI command with a user mistake. Each case: non-zero exit, exactly ONE
non-blank line on stderr saying what to do, no traceback, no 'internal error', and nothing written that a
later run would trust (the test folder is unchanged, or the out directory is absent).

argparse usage errors (unknown flag, wrong flag type) exit 2 and print `usage: ...` (possibly wrapped over
several lines) followed by one `ragzoo X: error: ...` line. We count them as compliant: the usage block is
argparse's standard preamble, the message itself is one line. `_message_lines` drops that block.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234567890abcd"


def _message_lines(err: str) -> list[str]:
    lines = [line for line in err.splitlines() if line.strip()]
    if lines and lines[0].startswith("usage:"):
        errors = [i for i, line in enumerate(lines) if ": error: " in line]
        if errors:
            lines = lines[errors[0]:]
    return lines


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """One compiled artifact (dry-run LM, no demos) that the artifact cases copy and damage."""
    from ragzoo.cli import main

    out = tmp_path_factory.mktemp("art") / "direct"
    code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0",
                 "--optimizer", "none", "--lm", "dry-run", "--out", str(out)])
    assert code == 0 and (out / "manifest.json").is_file()
    return out


class Ctx:
    def __init__(self, root: Path, artifact: Path):
        self.root = root
        self.corpus = root.parent / f"{root.name}-corpus.jsonl"  # outside the snapshot folder
        self.corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": f"text {i}"}) + "\n"
                                       for i in range(5)))
        self._artifact = artifact

    def file(self, name: str, content: bytes | str) -> str:
        path = self.root / name
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return str(path)

    def dir(self, name: str, with_file: bool = False) -> str:
        path = self.root / name
        path.mkdir()
        if with_file:
            (path / "notes.txt").write_text("mine")
        return str(path)

    def questions(self) -> str:
        return self.file("q.jsonl", json.dumps({"id": "a", "question": "who?", "answers": ["x"]}) + "\n")

    def art(self, damage=None) -> str:
        path = self.root / "art"
        shutil.copytree(self._artifact, path)
        if damage:
            damage(path)
        return str(path)

    def run_dir(self, config: bytes | None = None) -> str:
        path = self.root / "run"
        path.mkdir()
        (path / "config.json").write_bytes(config if config is not None else b'{"n": 1}')
        (path / "predictions.jsonl").write_text("")
        return str(path)

    def out(self) -> str:
        return str(self.root / "out")


def _edit_manifest(**changes):
    def damage(path: Path):
        manifest = json.loads((path / "manifest.json").read_text())
        manifest.update(changes)
        (path / "manifest.json").write_text(json.dumps(manifest))
    return damage


def _truncate(name):
    def damage(path: Path):
        data = (path / name).read_bytes()
        (path / name).write_bytes(data[: len(data) // 2])
    return damage


def _remove(name):
    return lambda path: (path / name).unlink()


def _edit_program(path: Path):
    state = json.loads((path / "program.json").read_text())
    text = json.dumps(state).replace("Answer", "Answr", 1)
    (path / "program.json").write_text(text if text != json.dumps(state) else json.dumps({**state, "x": 1}))


def _edit_state(change):
    """Edit program.json and keep the manifest's sha256 in step: what only the shape checks can catch."""
    def damage(path: Path):
        import hashlib

        state = json.loads((path / "program.json").read_text())
        data = json.dumps(change(state)).encode()
        (path / "program.json").write_bytes(data)
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["program_sha256"] = hashlib.sha256(data).hexdigest()
        (path / "manifest.json").write_text(json.dumps(manifest))
    return damage


def _first_predictor(state: dict) -> str:
    return next(name for name in state if name != "metadata")


def _deep_manifest(path: Path):
    (path / "manifest.json").write_text("[" * 50_000 + "]" * 50_000)


def _program_is_dir(path: Path):
    (path / "program.json").unlink()
    (path / "program.json").mkdir()


def _run_files(config, records=()):
    """A run directory with these config.json contents and prediction records (raw JSON values)."""
    def make(c) -> str:
        path = c.root / "run"
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        (path / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return str(path)
    return make


DRY = ["--lm", "dry-run"]
HUGE = b"{" + b"x" * (4 * 2**20)  # one 4 MB line that is not JSON

CASES = {
    # datasets / methods / optimizers
    "datasets-unknown": lambda c: ["datasets", "nosuchset"],
    "methods-unknown": lambda c: ["methods", "nosuchmethod"],
    "optimizers-unknown-flag": lambda c: ["optimizers", "--bogus"],
    # index
    "index-missing-corpus": lambda c: ["index", "build", "--corpus", str(c.root / "missing.jsonl"), "--quiet"],
    "index-corpus-is-dir": lambda c: ["index", "build", "--corpus", c.dir("corpusdir"), "--quiet"],
    "index-empty-corpus": lambda c: ["index", "build", "--corpus", c.file("empty.jsonl", b""), "--quiet"],
    "index-malformed-corpus": lambda c: ["index", "build", "--corpus", c.file("bad.jsonl", b'{"title": "a", "te\n'), "--quiet"],
    "index-non-utf8-corpus": lambda c: ["index", "build", "--corpus", c.file("latin.jsonl", b'{"title": "caf\xe9", "text": "\xff\xfe"}\n'), "--quiet"],
    "index-huge-line": lambda c: ["index", "build", "--corpus", c.file("huge.jsonl", HUGE), "--quiet"],
    "index-unknown-backend": lambda c: ["index", "build", "--corpus", "x.jsonl", "--backend", "nope"],
    # search
    "search-k-zero": lambda c: ["search", "river", "-k", "0"],
    "search-k-too-big": lambda c: ["search", "river", "-k", "101"],
    "search-k-not-int": lambda c: ["search", "river", "-k", "ten"],
    "search-empty-query": lambda c: ["search", "   "],
    "search-unknown-retriever": lambda c: ["search", "river", "--retriever", "nosuch:thing"],
    "search-missing-corpus": lambda c: ["search", "river", "--retriever", f"bm25:{c.root / 'missing.jsonl'}"],
    "search-bare-url": lambda c: ["search", "river", "--retriever", "http://127.0.0.1:9/"],
    # serve (validation only: each fails before a server starts)
    "serve-port-zero": lambda c: ["serve", "--port", "0"],
    "serve-port-too-big": lambda c: ["serve", "--port", "70000"],
    "serve-bad-path": lambda c: ["serve", "--port", "8893", "--path", "search"],
    "serve-unknown-retriever": lambda c: ["serve", "--retriever", "nosuch:thing"],
    # ask
    "ask-unknown-method": lambda c: ["ask", "--method", "nosuch", "who?", *DRY],
    "ask-unknown-knob": lambda c: ["ask", "--method", "direct", "--knob", "nosuch=1", "who?", *DRY],
    "ask-wrong-knob-type": lambda c: ["ask", "--method", "direct", "--knob", "answer_mode=essay", "who?", *DRY],
    "ask-wrong-knob-type-with-retriever": lambda c: ["ask", "--method", "rag", "--knob", "k=many", "--retriever", f"bm25:{c.corpus}", "who?", *DRY],
    "ask-knob-without-value": lambda c: ["ask", "--method", "rag", "--knob", "k", "who?", *DRY],
    "ask-no-lm": lambda c: ["ask", "--method", "direct", "who?"],
    "ask-missing-program": lambda c: ["ask", "--program", str(c.root / "nope"), "who?", *DRY],
    "ask-program-is-file": lambda c: ["ask", "--program", c.file("prog.json", "{}"), "who?", *DRY],
    "ask-bad-api-base": lambda c: ["ask", "--method", "direct", "who?", "--lm", "openai/stub", "--api-base", "localhost:8000"],
    "ask-secret-api-key-flag": lambda c: ["ask", "--method", "direct", "who?", "--lm", "openai/x", "--api-key", SECRET],
    # compile
    "compile-unknown-optimizer": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--optimizer", "nosuch", *DRY, "--out", c.out()],
    "compile-unknown-metric": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--metric", "nosuch", *DRY, "--out", c.out()],
    "compile-unknown-dataset": lambda c: ["compile", "--method", "direct", "--dataset", "nosuch", *DRY, "--out", c.out()],
    "compile-unknown-split": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--split", "nosuch", *DRY, "--out", c.out()],
    "compile-unknown-method": lambda c: ["compile", "--method", "nosuch", "--dataset", "hotpotqa", *DRY, "--out", c.out()],
    "compile-missing-out": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--optimizer", "none", "--lm", "openai/x"],
    "compile-out-exists": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--optimizer", "none", *DRY, "--out", c.dir("busy", with_file=True)],
    "compile-out-is-artifact": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--optimizer", "none", *DRY, "--out", c.art()],
    "compile-negative-train-n": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "-3", *DRY, "--out", c.out()],
    "compile-unknown-optimizer-setting": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--optimizer", "bootstrap", "--optimizer-setting", "nosuch=1", *DRY, "--out", c.out()],
    "compile-secret-in-knob": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--knob", f"api_key={SECRET}", *DRY, "--out", c.out()],
    "compile-secret-as-lm": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--lm", SECRET, "--out", c.out()],
    "compile-secret-in-api-base": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base", f"http://127.0.0.1:9/v1?key={SECRET}", "--out", c.out()],
    "compile-malformed-config": lambda c: ["compile", "--config", c.file("cfg.toml", "method = [unclosed"), "--out", c.out()],
    "compile-config-unknown-key": lambda c: ["compile", "--config", c.file("cfg2.toml", 'methd = "direct"\n'), "--out", c.out()],
    "compile-missing-config": lambda c: ["compile", "--config", str(c.root / "none.toml"), "--out", c.out()],
    # evaluate
    "evaluate-unknown-method": lambda c: ["evaluate", "--method", "nosuch", "--dataset", "hotpotqa", "-n", "2", *DRY, "--out", c.out()],
    "evaluate-missing-out": lambda c: ["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "2", *DRY],
    "evaluate-empty-data": lambda c: ["evaluate", "--method", "direct", "--data", c.file("e.jsonl", b""), *DRY, "--out", c.out()],
    "evaluate-malformed-data": lambda c: ["evaluate", "--method", "direct", "--data", c.file("m.jsonl", b'{"question": "a"\n{{{\n'), *DRY, "--out", c.out()],
    "evaluate-non-utf8-data": lambda c: ["evaluate", "--method", "direct", "--data", c.file("l.jsonl", b'{"question": "caf\xe9?", "answers": ["x"]}\n'), *DRY, "--out", c.out()],
    "evaluate-data-is-dir": lambda c: ["evaluate", "--method", "direct", "--data", c.dir("datadir"), *DRY, "--out", c.out()],
    "evaluate-missing-data": lambda c: ["evaluate", "--method", "direct", "--data", str(c.root / "nope.jsonl"), *DRY, "--out", c.out()],
    "evaluate-huge-line": lambda c: ["evaluate", "--method", "direct", "--data", c.file("h.jsonl", HUGE), *DRY, "--out", c.out()],
    "evaluate-no-question-field": lambda c: ["evaluate", "--method", "direct", "--data", c.file("nq.jsonl", '{"q": "a", "gold": "b"}\n'), *DRY, "--out", c.out()],
    "evaluate-threads-zero": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), "--threads", "0", *DRY, "--out", c.out()],
    "evaluate-unknown-metric": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), "--metric", "em,nosuch", *DRY, "--out", c.out()],
    "evaluate-out-not-a-run": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--out", c.dir("busy", with_file=True)],
    "evaluate-out-is-file": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--out", c.file("outfile", "x")],
    "evaluate-out-is-run-no-resume": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--out", c.run_dir()],
    "evaluate-both-program-and-method": lambda c: ["evaluate", "--method", "direct", "--program", "x", "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-no-manifest": lambda c: ["evaluate", "--program", c.art(_remove("manifest.json")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-no-program": lambda c: ["evaluate", "--program", c.art(_remove("program.json")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-edited-program": lambda c: ["evaluate", "--program", c.art(_edit_program), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-truncated-program": lambda c: ["evaluate", "--program", c.art(_truncate("program.json")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-truncated-manifest": lambda c: ["evaluate", "--program", c.art(_truncate("manifest.json")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-newer-format": lambda c: ["evaluate", "--program", c.art(_edit_manifest(format_version=99)), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-other-method": lambda c: ["evaluate", "--program", c.art(_edit_manifest(method="cot")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-artifact-unknown-method": lambda c: ["evaluate", "--program", c.art(_edit_manifest(method="nosuch")), "--data", c.questions(), *DRY, "--out", c.out()],
    "evaluate-secret-api-key-flag": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), "--lm", "openai/x", "--api-key", SECRET, "--out", c.out()],
    # issue 16: hand-edited artifacts (every size, count and depth bounded; a wrong type is a corrupt artifact)
    "ask-artifact-structure-is-list": lambda c: ["ask", "--program", c.art(_edit_manifest(structure=[1])), "who?", *DRY],
    "ask-artifact-huge-ensemble": lambda c: ["ask", "--program", c.art(_edit_manifest(structure={"kind": "ensemble", "members": 10**8})), "who?", *DRY],
    "ask-artifact-unknown-structure": lambda c: ["ask", "--program", c.art(_edit_manifest(structure={"kind": "forest"})), "who?", *DRY],
    "ask-artifact-versions-is-list": lambda c: ["ask", "--program", c.art(_edit_manifest(package_versions=["dspy"])), "who?", *DRY],
    "ask-artifact-dspy-version-is-int": lambda c: ["ask", "--program", c.art(_edit_manifest(package_versions={"dspy": 3})), "who?", *DRY],
    "ask-artifact-hash-is-int": lambda c: ["ask", "--program", c.art(_edit_manifest(signature_hashes={"generate_answer": 1})), "who?", *DRY],
    "ask-artifact-retriever-is-int": lambda c: ["ask", "--program", c.art(_edit_manifest(retriever=5)), "who?", *DRY],
    "ask-artifact-manifest-too-deep": lambda c: ["ask", "--program", c.art(_deep_manifest), "who?", *DRY],
    "ask-artifact-program-is-dir": lambda c: ["ask", "--program", c.art(_program_is_dir), "who?", *DRY],
    "ask-artifact-predictor-state-is-list": lambda c: ["ask", "--program", c.art(_edit_state(lambda s: {**s, _first_predictor(s): [1]})), "who?", *DRY],
    "ask-artifact-demos-is-string": lambda c: ["ask", "--program", c.art(_edit_state(lambda s: {**s, _first_predictor(s): {**s[_first_predictor(s)], "demos": "x"}})), "who?", *DRY],
    "ask-artifact-a-million-demos": lambda c: ["ask", "--program", c.art(_edit_state(lambda s: {**s, _first_predictor(s): {**s[_first_predictor(s)], "demos": [{"question": "q", "answer": "a"}] * 100_000}})), "who?", *DRY],
    "ask-artifact-knn-without-trainset": lambda c: ["ask", "--program", c.art(_edit_manifest(structure={"kind": "knn", "members": 1})), "who?", *DRY],
    "ask-artifact-knn-k-huge": lambda c: ["ask", "--program", c.art(_edit_manifest(structure={"kind": "knn", "members": 1, "k": 10**9})), "who?", *DRY],
    # issue 16: paid work (out checked first) and budgets that allow nothing
    "compile-out-under-a-file": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", "--optimizer", "none", *DRY, "--out", str(Path(c.file("plain", "x")) / "art")],
    "compile-max-calls-zero": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "0", *DRY, "--max-calls", "0", "--out", c.out()],
    "evaluate-out-under-a-file": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--out", str(Path(c.file("plain", "x")) / "run")],
    "evaluate-max-calls-zero": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--max-calls", "0", "--out", c.out()],
    "evaluate-max-cost-zero": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--max-cost", "0", "--out", c.out()],
    # issue 16: data files with values of the wrong type or shape
    "evaluate-nested-answers": lambda c: ["evaluate", "--method", "direct", "--data", c.file("na.jsonl", '{"question": "a?", "answers": [["x"]]}\n'), *DRY, "--out", c.out()],
    "evaluate-id-is-list": lambda c: ["evaluate", "--method", "direct", "--data", c.file("il.jsonl", '{"id": [1], "question": "a?", "answers": ["x"]}\n'), *DRY, "--out", c.out()],
    "evaluate-json-document-too-deep": lambda c: ["evaluate", "--method", "direct", "--data", c.file("deep.json", "[" * 100_000 + "]" * 100_000), *DRY, "--out", c.out()],
    # issue 16: config-file values of the wrong type (a flag's type is argparse's; a file's is checked the same way)
    "evaluate-config-threads-is-text": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--config", c.file("t.toml", 'threads = "many"\n'), "--out", c.out()],
    "evaluate-config-knob-is-number": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--config", c.file("k.toml", "knob = 5\n"), "--out", c.out()],
    "evaluate-config-data-is-number": lambda c: ["evaluate", "--method", "direct", *DRY, "--config", c.file("d.toml", "data = 5\n"), "--out", c.out()],
    "evaluate-config-resume-is-text": lambda c: ["evaluate", "--method", "direct", "--data", c.questions(), *DRY, "--config", c.file("r.yaml", "resume: maybe\n"), "--out", c.out()],
    "compile-config-train-n-is-list": lambda c: ["compile", "--method", "direct", "--dataset", "hotpotqa", *DRY, "--config", c.file("n.toml", "train_n = [1]\n"), "--out", c.out()],
    # issue 16: hand-edited run files
    "report-config-is-list": lambda c: ["report", _run_files([1, 2])(c)],
    "report-config-metrics-is-string": lambda c: ["report", _run_files({"n": 1, "metrics": 5})(c)],
    "report-record-metrics-is-string": lambda c: ["report", _run_files({"n": 1, "metrics": ["em"]}, [{"id": "a", "metrics": "em"}])(c)],
    "report-record-id-is-list": lambda c: ["report", _run_files({"n": 1, "metrics": ["em"]}, [{"id": ["a"], "metrics": {"em": 1}}])(c)],
    "report-record-cost-is-text": lambda c: ["report", _run_files({"n": 1, "metrics": ["em"]}, [{"id": "a", "metrics": {"em": 1}, "cost": "lots"}])(c)],
    # report
    "report-missing-run": lambda c: ["report", str(c.root / "nope")],
    "report-not-a-run": lambda c: ["report", c.dir("plain", with_file=True)],
    "report-corrupt-config": lambda c: ["report", c.run_dir(config=b'{"n": ')],
    "report-plot-into-missing-dir": lambda c: ["report", c.run_dir(), "--plot", str(c.root / "no" / "such" / "p.png")],
}


# Bugs found by this catalogue (reported to the lead); strict, so a fix turns them into failures to un-mark.
KNOWN_BUGS: dict[str, str] = {}  # case name -> bug description, for a strict xfail while a bug is open


def _case_params():
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name]))
            if name in KNOWN_BUGS else name for name in sorted(CASES)]


@pytest.mark.parametrize("case", _case_params())
def test_bad_input_fails_clearly(case, tmp_path, cli, artifact, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # a fresh index cache: index-building cases behave the same whatever ran before in the session
    monkeypatch.setenv("RAGZOO_CACHE", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    ctx = Ctx(tmp_path, artifact)
    argv = CASES[case](ctx)
    before = _snapshot(tmp_path)
    result = cli(*argv)
    lines = _message_lines(result.err)
    assert result.code != 0, (result.code, result.out[-500:], result.err[-500:])
    assert "Traceback" not in result.err
    assert "internal error" not in result.err, result.err
    assert len(lines) == 1, lines
    assert " error: " in lines[0] or lines[0].startswith("ragzoo"), lines
    assert _snapshot(tmp_path) == before, "a failed command wrote into the user's folders"
    if "secret" in case:
        for path in [*tmp_path.rglob("*"), *Path(os.environ["RAGZOO_CACHE"]).rglob("*")]:
            if path.is_file() and path.stat().st_size < 2**20:
                assert SECRET.encode() not in path.read_bytes(), path
        assert SECRET not in result.out and SECRET not in result.err


def test_catalogue_has_at_least_40_cases():
    assert len(CASES) >= 40
    commands = {name.split("-")[0] for name in CASES}
    assert commands >= {"datasets", "methods", "optimizers", "index", "search", "serve", "ask", "compile",
                        "evaluate", "report"}
