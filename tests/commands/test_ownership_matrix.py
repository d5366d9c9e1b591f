"""Every writing command x every kind of --out folder, through the CLI: ragzoo writes only into a folder it made
for that command (or a new/empty one), and the user's files are the same byte for byte afterwards."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ragzoo.cli import main
from ragzoo.ownership import MARKER, mark
from tests.grid.conftest import write_tiny

QUESTIONS = [{"id": f"q{i}", "question": f"question {i}?", "answers": [f"a{i}"]} for i in range(3)]
DOCS = [{"id": "z", "title": "Zebra", "text": "Zebras have black and white stripes."},
        {"id": "l", "title": "Lion", "text": "Lions are big cats of Africa."}]

# command -> the kind of folder it writes
KINDS = {"evaluate": "run", "evaluate-resume": "run", "compile": "artifact", "sweep": "grid", "reproduce": "grid",
         "index": "index"}
# files a user may well have that look like ragzoo's (the names the old guesses went by)
LOOKALIKES = {"run": {"config.json": '{"lr": 0.1}\n', "predictions.jsonl": "my own predictions\n"},
              "artifact": {"manifest.json": '{"format_version": 1, "note": "mine"}\n'},
              "grid": {"grid.json": '{"cells": ["my", "cells"]}\n', "results.md": "my results\n"},
              "index": {"meta.json": '{"format": "mine"}\n'}}
CASES = ["empty", "user", "lookalike", "symlink", "dot", "dot-empty", "home", "readonly", "readonly-empty",
         "other-kind", "same-kind"]


@pytest.fixture
def inputs(tmp_path):
    questions = tmp_path / "inputs" / "q.jsonl"
    questions.parent.mkdir()
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    corpus = tmp_path / "inputs" / "c.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    grid = write_tiny(tmp_path / "inputs" / "tiny.toml", n=1)
    return {"questions": str(questions), "corpus": str(corpus), "grid": str(grid)}


def _argv(command: str, out: str, inputs: dict) -> list[str]:
    evaluate = ["evaluate", "--method", "direct", "--lm", "dry-run", "--data", inputs["questions"], "--metric", "em",
                "--out", out]
    return {"evaluate": [*evaluate, "--force"],
            "evaluate-resume": [*evaluate, "--resume"],
            "compile": ["compile", "--method", "direct", "--data", inputs["questions"], "--train-n", "2", "--dev-n",
                        "1", "--optimizer", "none", "--lm", "dry-run", "--out", out, "--force"],
            "sweep": ["sweep", inputs["grid"], "--methods", "direct", "--out", out, "--quiet"],
            "reproduce": ["reproduce", "blendfilter-table2", "--lm", "dry-run", "-n", "1", "--optimizer", "none",
                          "--datasets", "HotPotQA", "--methods", "direct", "--out", out, "--quiet"],
            "index": ["index", "build", "--corpus", inputs["corpus"], "--out", out, "--quiet", "--rebuild"]}[command]


def _tree(folder) -> dict:
    """Every entry under `folder` (links not followed), each file with its bytes."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = (open(path, "rb").read() if os.path.isfile(path)
                                                    and not os.path.islink(path) else "dir")
    return found


def _user_files(folder):
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "NOTES.md").write_text("my notes on this folder\n")
    (folder / "data" / "x.bin").write_bytes(bytes(range(256)))


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", list(KINDS))
def test_a_command_writes_only_into_its_own_kind_of_folder(command, case, tmp_path, inputs, monkeypatch, capsys):
    kind = KINDS[command]
    folder = tmp_path / "target"
    out = str(folder)
    expect_run = case in ("empty", "same-kind")
    if case == "empty":
        folder.mkdir()
    elif case in ("user", "readonly"):
        _user_files(folder)
    elif case == "lookalike":
        _user_files(folder)
        for name, text in LOOKALIKES[kind].items():
            (folder / name).write_text(text)
    elif case == "symlink":
        _user_files(folder)
        out = str(tmp_path / "link")
        os.symlink(folder, out)
    elif case == "dot":
        _user_files(folder)
        monkeypatch.chdir(folder)
        out = "."
    elif case == "dot-empty":  # `compile --out . --force` here was an internal error (ValueError)
        folder.mkdir()
        monkeypatch.chdir(folder)
        out = "."
    elif case == "home":
        _user_files(folder)
        (folder / ".bashrc").write_text("export PATH=$PATH\n")
        monkeypatch.setenv("HOME", str(folder))
    elif case == "readonly-empty":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder; the refusal of a read-only folder with files is "
                        "the 'readonly' case")
        folder.mkdir()
    elif case == "other-kind":
        other = "artifact" if kind == "run" else "run"
        folder.mkdir()
        (folder / "program.json" if other == "artifact" else folder / "config.json").write_text('{"x": 1}\n')
        mark(folder, other, ["program.json" if other == "artifact" else "config.json"])
    elif case == "same-kind":
        first = _argv(command, out, inputs)
        if command == "evaluate-resume":
            first = first[:-1]
        code, err = _run(first, capsys)
        assert code == 0, err
        _user_files(folder)  # what a user adds to a folder ragzoo made
    if case in ("readonly", "readonly-empty"):
        for root, dirs, names in os.walk(folder):
            for name in names:
                os.chmod(os.path.join(root, name), stat.S_IRUSR)
            os.chmod(root, stat.S_IRUSR | stat.S_IXUSR)
    before = _tree(folder)
    try:
        code, err = _run(_argv(command, out, inputs), capsys)
    finally:
        for root, dirs, names in os.walk(folder):
            os.chmod(root, stat.S_IRWXU)
    assert "Traceback" not in err and "internal error" not in err, err
    after = _tree(folder)
    if expect_run:
        assert code == 0, err
        marker = json.loads((folder / MARKER).read_text())
        assert marker["kind"] == kind
        assert {name: data for name, data in after.items() if name in before and not name.startswith(
            tuple(marker["files"]) + (MARKER,))} == {name: data for name, data in before.items()
                                                     if not name.startswith(tuple(marker["files"]) + (MARKER,))}
        if case == "same-kind":
            assert after["NOTES.md"] == b"my notes on this folder\n" and after["data/x.bin"] == bytes(range(256))
            if command in ("compile", "index"):  # a replace names what it carried over
                assert "kept 2 entries" in err and "NOTES.md" in err and "data" in err
    else:
        assert code == 2, err
        assert after == before  # not one byte written, renamed or removed
        assert err.strip(), "a refusal says why"


def test_folders_of_earlier_versions_keep_working_and_are_marked(tmp_path, inputs, capsys):
    run, art = tmp_path / "run", tmp_path / "art"
    assert _run(_argv("evaluate", str(run), inputs)[:-1], capsys)[0] == 0
    assert _run(_argv("compile", str(art), inputs), capsys)[0] == 0
    for folder in (run, art):  # what a version before the marker left
        (folder / MARKER).unlink()
    code, err = _run(_argv("evaluate-resume", str(run), inputs), capsys)
    assert code == 0, err
    assert json.loads((run / MARKER).read_text())["kind"] == "run"
    code, err = _run(_argv("compile", str(art), inputs), capsys)
    assert code == 0, err
    assert json.loads((art / MARKER).read_text())["kind"] == "artifact"
    # an unmarked folder with one file more than ragzoo writes is not recognised: refused, untouched
    (art / MARKER).unlink()
    (art / "NOTES.md").write_text("mine")
    before = _tree(art)
    assert _run(_argv("compile", str(art), inputs), capsys)[0] == 2
    assert _tree(art) == before


def test_a_resume_is_refused_while_the_run_is_held_even_with_the_lock_file_gone(tmp_path, inputs, capsys):
    from ragzoo.runs import LOCK_FILE, open_run_dir

    out = tmp_path / "run"
    assert _run(_argv("evaluate", str(out), inputs)[:-1] + ["-n", "1"], capsys)[0] == 0
    config = json.loads((out / "config.json").read_text())
    with open_run_dir(out, config, resume=True):  # what a running evaluate holds (the kernel's lock)
        (out / LOCK_FILE).unlink()
        code, err = _run(_argv("evaluate-resume", str(out), inputs), capsys)
        assert code == 2 and "being written by another ragzoo process" in err
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 1
