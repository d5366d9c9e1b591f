"""The ownership rule (`ragzoo.ownership`) where it was missing: compile's `<out>.checkpoint` folder is a marked
folder of kind "checkpoint" (a user's folder at that place is never touched, whatever the flags; `--force` removes
only what ragzoo wrote there), and the cache root under RAGZOO_CACHE is a marked folder of kind "cache" (created
and marked by ragzoo; a user's folder there is refused, and no build cleans anything inside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ragzoo.ownership import MARKER, read_marker


def _tree(folder):
    """Every entry under `folder` with the bytes of each file (what a user would lose)."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = open(path, "rb").read() if os.path.isfile(path) else None
    return found


def _dead_pid() -> int:
    holder = subprocess.Popen([sys.executable, "-c", "pass"])
    holder.wait()
    return holder.pid


# ---------------------------------------------------------------------------------------------------------
# compile's checkpoint folder

@pytest.fixture
def compile_cli(tmp_path, capsys, monkeypatch, interrupting_lm):
    """`ragzoo compile` of `direct` on 4 training questions, LM calls answered by a scripted LM (Ctrl-C at the
    call `interrupt_at`); returns (exit code, stderr)."""
    import ragzoo.commands.common as common
    from ragzoo.cli import main

    def run(*extra, interrupt_at=None):
        monkeypatch.setattr(common, "build_lm", lambda config: interrupting_lm(interrupt_at))
        capsys.readouterr()
        code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "0",
                     "--lm", "openai/scripted", "--out", str(tmp_path / "art"), *map(str, extra)])
        return code, capsys.readouterr().err

    return run


@pytest.mark.parametrize("flags", [[], ["--force"], ["--resume"], ["--resume", "--force"]],
                         ids=["plain", "force", "resume", "resume-force"])
def test_a_user_folder_where_the_checkpoint_goes_is_never_touched(flags, tmp_path, compile_cli):
    mine = tmp_path / "art.checkpoint"
    (mine / "sub").mkdir(parents=True)
    # even a file named as ragzoo's checkpoint file, with a checkpoint's shape, does not make the folder ragzoo's
    (mine / "checkpoint.json").write_text(json.dumps({"version": 1, "fingerprint": {}}))
    (mine / "NOTES.md").write_text("my notes")
    (mine / "sub" / "data.bin").write_bytes(bytes(range(256)))
    before = _tree(mine)
    code, err = compile_cli(*flags)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a ragzoo compile checkpoint" in lines[0] and "Traceback" not in err, err
    assert _tree(mine) == before
    assert not (tmp_path / "art").exists()


def test_the_checkpoint_is_marked_and_force_removes_only_ragzoo_s_files(tmp_path, compile_cli):
    where = tmp_path / "art.checkpoint"
    code, err = compile_cli(interrupt_at=3)
    assert code == 130, err
    marker = read_marker(where)
    assert marker is not None and marker["kind"] == "checkpoint", marker
    assert {"checkpoint.json", "bootstrap.json"} <= set(marker["files"])
    (where / "NOTES.md").write_text("why this compile was stopped")  # a user's file inside ragzoo's folder

    code, err = compile_cli()
    assert code == 2 and "--resume to continue it, or --force" in err, err  # progress is not dropped silently

    code, err = compile_cli("--force")
    assert code == 0, err
    assert (tmp_path / "art" / "program.json").is_file()
    # the compile started over and finished: ragzoo's files are gone, the user's file stays and is named
    assert (where / "NOTES.md").read_text() == "why this compile was stopped"
    assert sorted(path.name for path in where.iterdir()) == sorted(["NOTES.md", MARKER])
    assert "NOTES.md" in err


def test_a_checkpoint_of_an_earlier_version_resumes_and_is_marked(tmp_path, compile_cli):
    where = tmp_path / "art.checkpoint"
    assert compile_cli(interrupt_at=3)[0] == 130
    (where / MARKER).unlink()  # what a version before markers left: checkpoint.json and bootstrap.json only
    (where / "spent.json").unlink()  # (the record of the spend came later than markers)
    code, err = compile_cli("--resume")
    assert code == 0, err
    assert "resuming from bootstrap progress" in err and not where.exists()


def test_a_compile_that_finishes_keeps_a_user_s_file_of_its_checkpoint(tmp_path, compile_cli):
    where = tmp_path / "art.checkpoint"
    assert compile_cli(interrupt_at=3)[0] == 130
    (where / "NOTES.md").write_text("keep me")
    code, err = compile_cli("--resume")
    assert code == 0, err
    assert (where / "NOTES.md").read_text() == "keep me" and not (where / "bootstrap.json").exists()


# ---------------------------------------------------------------------------------------------------------
# the cache root

@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": f"passage {i} about item {i}"})
                            + "\n" for i in range(12)), encoding="utf-8")
    return path


def _index_build(corpus, capsys):
    from ragzoo.cli import main

    capsys.readouterr()
    code = main(["index", "build", "--corpus", str(corpus), "--quiet"])
    return code, capsys.readouterr().err


def test_ragzoo_marks_the_cache_root_it_creates(tmp_path, corpus, capsys, monkeypatch):
    root = tmp_path / "cache" / "ragzoo"
    monkeypatch.setenv("RAGZOO_CACHE", str(root))
    code, err = _index_build(corpus, capsys)
    assert code == 0, err
    marker = read_marker(root)
    assert marker is not None and marker["kind"] == "cache" and "indexes" in marker["files"], marker
    assert _index_build(corpus, capsys)[0] == 0  # its own cache is used again


def test_a_user_folder_as_cache_root_is_refused_and_untouched(tmp_path, corpus, capsys, monkeypatch):
    from ragzoo.errors import ConfigError
    from ragzoo.retrieval.index_cache import clean_stale_builds

    mine = tmp_path / "mine"
    stale = mine / "indexes" / f".bm25-corpus-0123456789abcdef.building-{_dead_pid()}-1"
    stale.mkdir(parents=True)
    (stale / "meta.json").write_text("{}")
    (mine / "thesis.txt").write_text("four years of work")
    monkeypatch.setenv("RAGZOO_CACHE", str(mine))
    before = _tree(mine)
    code, err = _index_build(corpus, capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "RAGZOO_CACHE" in lines[0] and "not a ragzoo cache folder" in lines[0], err
    with pytest.raises(ConfigError, match="not a ragzoo cache folder"):
        clean_stale_builds(mine / "indexes" / "bm25-corpus-0123456789abcdef")
    assert _tree(mine) == before


def test_a_cache_root_of_an_earlier_version_is_used_and_marked(tmp_path, corpus, capsys, monkeypatch):
    root = tmp_path / "old-cache"
    (root / "indexes").mkdir(parents=True)  # what a version before markers made: its subfolders only
    (root / "corpora").mkdir()
    monkeypatch.setenv("RAGZOO_CACHE", str(root))
    code, err = _index_build(corpus, capsys)
    assert code == 0, err
    assert read_marker(root)["kind"] == "cache"


def test_a_cache_root_holding_a_user_s_file_beside_ragzoo_s_folders_is_refused(tmp_path, corpus, capsys,
                                                                               monkeypatch):
    root = tmp_path / "old-cache"
    (root / "indexes").mkdir(parents=True)
    (root / "budget.xlsx").write_bytes(b"PK\x03\x04 a spreadsheet")
    monkeypatch.setenv("RAGZOO_CACHE", str(root))
    before = _tree(root)
    code, err = _index_build(corpus, capsys)
    assert code == 2 and "not a ragzoo cache folder" in err, err
    assert _tree(root) == before


def test_the_datasets_library_writes_only_into_ragzoo_s_cache_root(tmp_path, monkeypatch):
    from ragzoo import data
    from ragzoo.data.hub import HubSource
    from ragzoo.errors import ConfigError

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "question": "q?", "answer": "yes", "type": "bridge", "level": "easy",
                                "supporting_facts": {"title": [], "sent_id": []},
                                "context": {"title": [], "sentences": []}}) + "\n", encoding="utf-8")
    source = HubSource("json", split="train", convert="hotpot_qa", data_files=str(rows))
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("RAGZOO_DATA", str(tmp_path / "no-data"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("four years of work")
    monkeypatch.setenv("RAGZOO_CACHE", str(mine))
    with pytest.raises(ConfigError, match="not a ragzoo cache folder"):
        data.load("hotpotqa", "dev", hub=source)
    assert _tree(mine) == {"thesis.txt": b"four years of work"}

    root = tmp_path / "cache"
    monkeypatch.setenv("RAGZOO_CACHE", str(root))
    assert [example.id for example in data.load("hotpotqa", "dev", hub=source)] == ["a"]
    assert read_marker(root)["files"] == ["hf_datasets"]


def test_a_corpus_is_unpacked_only_into_ragzoo_s_cache_root(tmp_path, monkeypatch):
    from ragzoo.errors import ConfigError
    from ragzoo.retrieval import fetch

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded although the corpus could not be unpacked")

    monkeypatch.setattr(fetch, "download", no_download)
    monkeypatch.delenv("RAGZOO_CORPORA", raising=False)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("four years of work")
    monkeypatch.setenv("RAGZOO_CACHE", str(mine))
    with pytest.raises(ConfigError, match="RAGZOO_CACHE .* not a ragzoo cache folder"):
        fetch.fetch("wiki17-abstracts", progress=False)
    assert _tree(mine) == {"thesis.txt": b"four years of work"}


def test_a_marker_another_process_is_writing_does_not_make_the_cache_root_foreign(tmp_path, corpus, capsys,
                                                                                  monkeypatch):
    """Two builds starting on a fresh cache: one sees the other's marker half-written (its temporary file)."""
    root = tmp_path / "cache"
    (root / "indexes").mkdir(parents=True)
    (root / f".{MARKER}.k3x9q.tmp").write_text('{"kind": "ca')
    monkeypatch.setenv("RAGZOO_CACHE", str(root))
    code, err = _index_build(corpus, capsys)
    assert code == 0, err
    assert read_marker(root)["kind"] == "cache"
