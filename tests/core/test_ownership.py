"""The one ownership rule (`ragzoo.ownership`): which folders a command may write, the marker, the legacy folders
of earlier versions, a replace that keeps what ragzoo did not write, and one writer per run whatever happens to
the lock file."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ragzoo import ownership
from ragzoo.errors import ConfigError, RunError
from ragzoo.files import replace_dir, staging_dir
from ragzoo.ownership import MARKER, claim, kind_of, legacy_kind, mark


def _tree(folder):
    """Every entry under `folder` with the bytes of each file (what a user would lose)."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            key = os.path.relpath(path, folder)
            found[key] = open(path, "rb").read() if os.path.isfile(path) else None
    return found


@pytest.fixture
def user_folder(tmp_path):
    folder = tmp_path / "mine"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.txt").write_text("four years of work")
    (folder / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return folder


def test_new_and_empty_folders_may_be_claimed(tmp_path):
    assert claim(tmp_path / "new", "run").state == "new"
    (tmp_path / "empty").mkdir()
    assert claim(tmp_path / "empty", "artifact").state == "new"


@pytest.mark.parametrize("kind", list(ownership.NOUNS))
def test_a_folder_ragzoo_did_not_write_is_never_claimed(user_folder, kind):
    before = _tree(user_folder)
    with pytest.raises(ConfigError, match="ragzoo never writes into it"):
        claim(user_folder, kind)
    assert _tree(user_folder) == before


@pytest.mark.parametrize("lookalike", [{"config.json": "{}"}, {"config.json": '{"metrics": ["em"]}'},
                                      {"manifest.json": '{"format_version": 1}'}, {"grid.json": '{"cells": []}'},
                                      {"meta.json": '{"format": "someone-else"}'}])
def test_a_lookalike_file_does_not_make_a_folder_ragzoo_s(user_folder, lookalike):
    for name, text in lookalike.items():
        (user_folder / name).write_text(text)
    assert kind_of(user_folder) is None
    for kind in ("run", "artifact", "grid", "index"):
        with pytest.raises(ConfigError):
            claim(user_folder, kind)


def test_the_root_home_current_folder_and_git_trees_are_never_targets(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for path, reason in [("/", "root"), (str(home), "home"), (".", "current folder"), (str(work), "current"),
                         (str(repo), "git")]:
        with pytest.raises(ConfigError, match=reason):
            claim(path, "run")
    link = tmp_path / "to-home"
    link.symlink_to(home)
    with pytest.raises(ConfigError, match="home"):
        claim(link, "run")  # a link is judged by where it points


def test_a_link_to_a_user_folder_is_refused_and_a_link_to_ours_is_followed(tmp_path, user_folder):
    link = tmp_path / "link"
    link.symlink_to(user_folder)
    with pytest.raises(ConfigError, match="symbolic link"):
        claim(link, "run")
    ours = tmp_path / "ours"
    ours.mkdir()
    mark(ours, "run", ["config.json"])
    (ours / "config.json").write_text("{}")
    link2 = tmp_path / "link2"
    link2.symlink_to(ours)
    assert claim(link2, "run").path == ours.resolve()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="link to nothing"):
        claim(dangling, "run")


def test_a_folder_of_another_kind_is_refused_by_name(tmp_path):
    folder = tmp_path / "art"
    folder.mkdir()
    (folder / "program.json").write_text("{}")
    mark(folder, "artifact", ["program.json"])
    assert claim(folder, "artifact").state == "ours"
    with pytest.raises(RunError, match="is a ragzoo compiled-program artifact, not a ragzoo run directory"):
        claim(folder, "run", error=RunError)


def test_the_marker_says_kind_version_and_files(tmp_path):
    from ragzoo import __version__

    mark(tmp_path, "index", ["meta.json", "passages.jsonl"])
    mark(tmp_path, "index", ["term_max.npy"])
    marker = json.loads((tmp_path / MARKER).read_text())
    assert marker == {"kind": "index", "ragzoo_version": __version__,
                      "files": ["meta.json", "passages.jsonl", "term_max.npy"]}


def _legacy_run(folder):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"method": "direct", "metrics": ["em"], "n": 2}))
    (folder / "predictions.jsonl").write_text("")
    (folder / ".ragzoo-run.lock").write_text("123")


def _legacy_artifact(folder):
    folder.mkdir()
    program = b'{"answer": {}}\n'
    (folder / "program.json").write_bytes(program)
    (folder / "manifest.json").write_text(json.dumps({"format_version": 1, "method": "direct",
                                                      "program_sha256": hashlib.sha256(program).hexdigest()}))


def test_folders_of_earlier_versions_are_recognised_by_their_full_set_of_files(tmp_path):
    _legacy_run(tmp_path / "run")
    _legacy_artifact(tmp_path / "art")
    assert legacy_kind(tmp_path / "run") == "run" and claim(tmp_path / "run", "run").state == "legacy"
    assert legacy_kind(tmp_path / "art") == "artifact" and claim(tmp_path / "art", "artifact").state == "legacy"
    # one file more than ragzoo wrote, or a program that is not the manifest's: not recognised
    (tmp_path / "run" / "notes.md").write_text("mine")
    (tmp_path / "art" / "program.json").write_text("{}")
    assert legacy_kind(tmp_path / "run") is None and legacy_kind(tmp_path / "art") is None


def test_replace_keeps_and_names_what_ragzoo_did_not_write(tmp_path, capsys):
    final = tmp_path / "art"
    final.mkdir()
    (final / "program.json").write_text("old")
    mark(final, "artifact", ["program.json"])
    (final / "NOTES.md").write_text("my notes")
    (final / "data").mkdir()
    (final / "data" / "x.bin").write_bytes(b"\x00\x01")
    staging = staging_dir(final)
    (staging / "program.json").write_text("new")
    (staging / "NOTES.md").write_text("a file the new build also writes")
    kept = ownership.replace(staging, final, "artifact")
    assert (final / "program.json").read_text() == "new"
    assert (final / "NOTES.md.kept").read_text() == "my notes"
    assert (final / "data" / "x.bin").read_bytes() == b"\x00\x01"
    assert sorted(kept) == ["NOTES.md.kept", "data"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NOTES.md (as NOTES.md.kept)" in err and "data" in err
    assert sorted(json.loads((final / MARKER).read_text())["files"]) == ["NOTES.md", "program.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]  # no staging folder, no backup left


def test_replace_dir_without_keep_still_drops_the_old_folder(tmp_path):
    final = tmp_path / "f"
    final.mkdir()
    (final / "a").write_text("1")
    staging = staging_dir(final)
    (staging / "b").write_text("2")
    assert replace_dir(staging, final) == []
    assert sorted(p.name for p in final.iterdir()) == ["b"] and sorted(p.name for p in tmp_path.iterdir()) == ["f"]


# -- one writer per run, whatever happens to the lock file ---------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys
    from ragzoo.runs import open_run_dir
    with open_run_dir(sys.argv[1], {"metrics": ["em"]}):
        print("held", flush=True)
        sys.stdin.readline()
""")


@pytest.mark.parametrize("tamper", ["removed", "renamed", "replaced"])
def test_a_second_writer_is_refused_whatever_happens_to_the_lock_file(tmp_path, tamper):
    from ragzoo.runs import LOCK_FILE, open_run_dir

    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = out / LOCK_FILE
        if tamper == "removed":
            lock.unlink()
        elif tamper == "renamed":
            lock.rename(out / "moved.lock")
        else:
            lock.unlink()
            lock.write_text("999999")
        with pytest.raises(RunError, match="being written by another ragzoo process"):
            with open_run_dir(out, {"metrics": ["em"]}, resume=True):
                pass
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    with open_run_dir(out, {"metrics": ["em"]}, resume=True):  # the holder is gone: the kernel released its lock
        pass


def test_where_a_folder_cannot_be_locked_the_lock_file_still_guards_the_run(tmp_path, monkeypatch):
    import errno
    import fcntl
    import stat as stat_module

    from ragzoo.runs import open_run_dir

    real = fcntl.flock

    def flock(fd, operation):  # flock emulated over NFS: a folder (read-only descriptor) cannot be locked
        if stat_module.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        return real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    out = tmp_path / "run"
    with open_run_dir(out, {"metrics": ["em"]}):
        with pytest.raises(RunError, match=f"another ragzoo process \\(pid {os.getpid()}\\)"):
            with open_run_dir(out, {"metrics": ["em"]}, resume=True):
                pass
    with open_run_dir(out, {"metrics": ["em"]}, resume=True):
        pass


def test_a_stale_swap_backup_holding_a_user_s_files_is_never_deleted(tmp_path):
    from ragzoo.retrieval.index_cache import clean_stale_builds

    holder = subprocess.Popen([sys.executable, "-c", "pass"])
    holder.wait()  # a pid that is gone: the build that left these was killed
    final = tmp_path / "idx"
    final.mkdir()
    mark(final, "index", ["meta.json"])
    ours, theirs = (tmp_path / f".idx.old-{holder.pid}-1", tmp_path / f".idx.old-{holder.pid}-2")
    for backup in (ours, theirs):
        backup.mkdir()
        (backup / "meta.json").write_text("{}")
        mark(backup, "index", ["meta.json"])
    (theirs / "NOTES.md").write_text("cut between the swap and the carry-over")
    assert clean_stale_builds(final) == [ours]
    assert (theirs / "NOTES.md").read_text() == "cut between the swap and the carry-over"


def test_a_read_only_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    # decided by os.access, which root always passes: simulate the answer a user without write access gets
    (tmp_path / "empty").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if "empty" in str(path) else real(path, mode))
    with pytest.raises(ConfigError, match="read-only"):
        claim(tmp_path / "empty", "index")
    assert claim(tmp_path / "new", "index").state == "new"


def test_resume_needs_the_run_s_own_config_not_one_sharing_no_key(tmp_path):
    from ragzoo.runs import open_run_dir

    out = tmp_path / "run"
    out.mkdir()
    (out / "predictions.jsonl").write_text("")
    mark(out, "run", ["config.json", "predictions.jsonl"])
    config = {"metrics": ["em"], "method": "rag", "dataset": "hotpotqa"}
    (out / "config.json").write_text(json.dumps({"lr": 0.1}))
    with pytest.raises(RunError, match="not a run configuration"):
        with open_run_dir(out, config, resume=True):
            pass
    (out / "config.json").write_text(json.dumps({"metrics": ["em"], "lr": 0.1}))
    with pytest.raises(RunError, match="--method was null"):
        with open_run_dir(out, config, resume=True):
            pass
    assert json.loads((out / "config.json").read_text()) == {"metrics": ["em"], "lr": 0.1}


def _sqlite_file(path, *tables):
    import sqlite3

    connection = sqlite3.connect(path)
    for table in tables:
        connection.execute(f"CREATE TABLE {table} (x)")
    connection.commit()
    connection.close()
    return path


def test_an_optuna_storage_file_is_written_only_where_new_or_already_optunas(tmp_path):
    """`--storage journal:PATH` / `sqlite:///PATH`: shared by workers on purpose, so not claimed for one command;
    but Optuna never appends to a user's file (found by review: a shell profile given as the journal got a record)."""
    from ragzoo.ownership import check_storage

    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "optuna.log").write_text('{"op_code": 0, "worker_id": "w", "study_name": "s"}\n')
    (tmp_path / "partial.log").write_text('{"op_code": 0, "worker_id": "w"')  # another worker writing its first line
    (tmp_path / "profile").write_text("export PATH=/usr/bin\n")
    (tmp_path / "text.db").write_text("not a database\n")
    _sqlite_file(tmp_path / "optuna.db", "studies", "version_info", "trials")
    _sqlite_file(tmp_path / "creating.db", "alembic_version")  # Optuna creating its schema this moment
    _sqlite_file(tmp_path / "nothing.db")
    _sqlite_file(tmp_path / "mine.db", "mine")
    for name in ("journal:new.log", "journal:empty.log", "journal:optuna.log", "journal:partial.log",
                 "sqlite:///new.db", "sqlite:///optuna.db", "sqlite:///creating.db", "sqlite:///nothing.db"):
        scheme, _, path = name.rpartition(":")
        check_storage(f"{scheme}:{'///' if scheme == 'sqlite' else ''}{tmp_path / path.lstrip('/')}")
    for url, says in ((f"journal:{tmp_path / 'profile'}", "it is not an Optuna journal"),
                      (f"sqlite:///{tmp_path / 'mine.db'}", "it is not an Optuna SQLite storage"),
                      (f"sqlite:///{tmp_path / 'text.db'}", "it is not an Optuna SQLite storage"),
                      (f"journal:{tmp_path}", "is a folder")):
        with pytest.raises(ConfigError, match=says):
            check_storage(url)
    check_storage("postgresql://user@127.0.0.1:9/grid")  # a database server's: the user's to give
    check_storage(f"sqlite:///{tmp_path / 'new-folder' / 's.db'}")  # the grid's opener makes the folder


def test_an_optuna_storage_a_killed_writer_left_with_a_hot_journal_is_still_optunas(tmp_path):
    """A worker killed inside a write leaves `DB-journal`: a read-only open cannot roll it back and fails, which
    made the storage look like a user's file (found by review); its tables are read without touching it."""
    import signal
    import subprocess
    import sys

    from ragzoo.ownership import check_storage

    killed = ("import os, signal, sqlite3, sys\n"
              "connection = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "connection.execute('PRAGMA journal_mode=DELETE')\n"
              "connection.execute('BEGIN IMMEDIATE')\n"
              "connection.execute('INSERT INTO log VALUES (1)')\n"
              "connection.execute('CREATE TABLE big (x)')\n"
              "connection.executemany('INSERT INTO big VALUES (?)', [('x' * 1000,)] * 2000)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    for name, tables in (("o.db", ("studies", "version_info", "log")), ("mine.db", ("mine", "log"))):
        database = _sqlite_file(tmp_path / name, *tables)
        process = subprocess.run([sys.executable, "-c", killed, str(database)])
        assert process.returncode == -signal.SIGKILL and (tmp_path / f"{name}-journal").is_file()
    check_storage(f"sqlite:///{tmp_path / 'o.db'}")
    with pytest.raises(ConfigError, match="not an Optuna SQLite storage"):  # read all the same: a user's, refused
        check_storage(f"sqlite:///{tmp_path / 'mine.db'}")


@pytest.mark.parametrize("form", ["journal", "sqlite"])
def test_sweep_and_compile_search_refuse_a_users_file_as_storage_and_leave_it_as_it_was(tmp_path, capsys, form):
    from ragzoo.cli import main

    user = tmp_path / ("profile" if form == "journal" else "mine.db")
    if form == "journal":
        user.write_text("export PATH=/usr/bin\n")
        url = f"journal:{user}"
    else:
        _sqlite_file(user, "mine")
        url = f"sqlite:///{user}"
    before = user.read_bytes()
    grid = tmp_path / "tiny.toml"
    grid.write_text('[grid]\nname = "tiny"\nn = 1\nlms = ["dry-run"]\n\n[[datasets]]\nname = "nq_open"\n'
                    'split = "dev_activerag500"\nretriever = "fixed"\n\n[[methods]]\nid = "direct"\n')
    for argv in (["sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet", "--storage", url],
                 ["compile", "--method", "direct", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "2",
                  "--optimizer", "none", "--search", "answer_mode=short,yes_no", "--lm", "dry-run", "--out",
                  str(tmp_path / "best"), "--storage", url]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "refusing to write to" in err, err
        assert "Traceback" not in err and "internal error" not in err
        assert user.read_bytes() == before
    assert not (tmp_path / "g" / "cells").exists() and not (tmp_path / "best").exists()
