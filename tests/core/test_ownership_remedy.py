"""`ownership.claim(..., remedy=, read_only_remedy=)`: a caller whose way out is not "another --flag" (the cache root
is chosen by RAGZOO_CACHE, the compile checkpoint by --out) passes its own advice, and claim's reason reaches the
user whole. Before, `paths.writable_cache_root` and the checkpoint's `_claim` cut claim's message at its first ";"
and looked for "read-only" in it: a path holding ";" lost the reason, and a path holding "read-only" got the wrong
advice."""

from __future__ import annotations

import json
import os

import pytest

from ragzoo.errors import ConfigError
from ragzoo.ownership import MARKER, claim

REMEDY = "set SOMEWHERE to a new or empty folder"
READ_ONLY = "make it writable, or set SOMEWHERE to a new or empty folder"


def _refusal(path, **options) -> str:
    with pytest.raises(ConfigError) as refused:
        claim(path, "cache", flag="SOMEWHERE", remedy=REMEDY, read_only_remedy=READ_ONLY, **options)
    return str(refused.value)


def test_every_refusal_keeps_its_reason_and_ends_with_the_callers_remedy(tmp_path, monkeypatch):
    afile = tmp_path / "a-file"
    afile.write_text("mine")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.txt").write_text("mine")
    other = tmp_path / "a-run"
    other.mkdir()
    (other / MARKER).write_text(json.dumps({"kind": "run", "files": []}))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    git = tmp_path / "repo"
    (git / ".git").mkdir(parents=True)
    expected = {afile: "is a file, not a ragzoo cache folder", foreign: "holds files ragzoo did not write",
                other: "is a ragzoo run directory, not a ragzoo cache folder", dangling: "symbolic link to nothing",
                git: "a git working tree (it holds .git), which ragzoo never writes into"}
    for path, reason in expected.items():
        message = _refusal(path)
        assert message.startswith(f"SOMEWHERE {path} ") and reason in message, message
        assert message.endswith(REMEDY) and "choose another" not in message, message
        assert "\n" not in message
    assert "ragzoo never writes into it" in _refusal(foreign)  # the reason says why, the remedy what to do

    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / MARKER).write_text(json.dumps({"kind": "cache", "files": []}))
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # tests run as root, to whom everything is writable
    assert _refusal(ours) == f"SOMEWHERE {ours} is read-only; {READ_ONLY}"


def test_without_a_remedy_claim_says_what_it_always_said(tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("mine")
    with pytest.raises(ConfigError) as refused:
        claim(afile, "run", flag="--out")
    assert str(refused.value) == f"--out {afile} is a file, not a ragzoo run directory; choose another --out"


def test_a_cache_root_whose_path_holds_a_semicolon_is_refused_with_its_whole_reason(tmp_path, monkeypatch):
    from ragzoo.paths import writable_cache_root

    mine = tmp_path / "notes;2024" / "cache"
    mine.mkdir(parents=True)
    (mine / "thesis.txt").write_text("four years of work")
    monkeypatch.setenv("RAGZOO_CACHE", str(mine))
    with pytest.raises(ConfigError) as refused:
        writable_cache_root("indexes")
    message = str(refused.value)
    assert f"RAGZOO_CACHE {mine} is not a ragzoo cache folder" in message, message
    assert message.endswith("set RAGZOO_CACHE to a new or empty folder"), message
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.txt"]


def test_a_foreign_cache_root_under_a_read_only_named_folder_is_not_told_to_make_it_writable(tmp_path, monkeypatch):
    from ragzoo.paths import writable_cache_root

    mine = tmp_path / "read-only-archive"
    mine.mkdir()
    (mine / "thesis.txt").write_text("four years of work")
    monkeypatch.setenv("RAGZOO_CACHE", str(mine))
    with pytest.raises(ConfigError) as refused:
        writable_cache_root("indexes")
    message = str(refused.value)
    assert "holds files ragzoo did not write" in message and "make it writable" not in message, message


def test_a_users_folder_where_the_checkpoint_goes_under_a_path_with_a_semicolon(tmp_path, capsys, monkeypatch,
                                                                              interrupting_lm):
    import ragzoo.commands.common as common
    from ragzoo.cli import main

    parent = tmp_path / "v1;draft"
    mine = parent / "art.checkpoint"
    mine.mkdir(parents=True)
    (mine / "NOTES.md").write_text("my notes")
    monkeypatch.setattr(common, "build_lm", lambda config: interrupting_lm(None))
    code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "0",
                 "--lm", "openai/scripted", "--out", str(parent / "art")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert f"{mine} is not a ragzoo compile checkpoint" in lines[0], err
    assert lines[0].endswith("move it away or choose another --out (a compile keeps its checkpoint beside --out)"), err
    assert sorted(p.name for p in mine.iterdir()) == ["NOTES.md"]
