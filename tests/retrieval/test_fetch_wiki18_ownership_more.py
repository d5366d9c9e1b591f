"""More of `corpus fetch`'s ownership rule (test_fetch_wiki18_ownership.py): a link of the user's at the corpus's
name (even one pointing nowhere) is theirs, the refusal ends with the fetch's own remedy (never "remove it"), and a
user's file that appears while the files download is found at publishing time, before the rename."""

from __future__ import annotations

import os

from tests.retrieval.test_fetch_wiki18 import (NAME, MultiFileHub, _target, fetch_cli, online,  # noqa: F401
                                               pin, shards)
from tests.retrieval.test_fetch_wiki18_ownership import USERS, _dead_endpoint

REMEDY = "move it away, or set RAGZOO_CORPORA to another folder"


def test_a_dangling_link_of_the_users_at_the_corpus_name_is_kept(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    monkeypatch.setenv("RAGZOO_CORPORA", str(online / "my-corpora"))
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())
    target = fetch.corpus_path(NAME)
    target.parent.mkdir(parents=True)
    elsewhere = online / "not-mounted" / "psgs_w100.jsonl"  # e.g. a disk that is not there right now
    target.symlink_to(elsewhere)
    code, out, err = fetch_cli(capsys, NAME, "--quiet", "--force")
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ragzoo corpus: error: refusing to overwrite {target}"), err
    assert target.is_symlink() and os.readlink(target) == str(elsewhere)
    assert not elsewhere.parent.exists()


def test_the_refusal_ends_with_the_fetchs_remedy_not_remove_it(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    monkeypatch.setenv("RAGZOO_CORPORA", str(online / "my-corpora"))
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())
    target = fetch.corpus_path(NAME)
    target.parent.mkdir(parents=True)
    target.write_text(USERS, encoding="utf-8")
    code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 2 and err.rstrip().endswith(REMEDY), err
    assert "remove it" not in err


def test_a_users_file_that_appears_during_the_download_is_never_overwritten(online, shards, monkeypatch, capsys):
    """Checked before any download and again at publishing: a file the user puts at the corpus's name while the
    files download is refused there, kept as it is, and the converted copy is not left beside it."""
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files)
    target = _target(online)
    real_download = fetch._hub_download

    def user_writes_meanwhile(*args, **kwargs):
        path = real_download(*args, **kwargs)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(USERS, encoding="utf-8")
        return path

    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setattr(fetch, "_hub_download", user_writes_meanwhile)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 2 and f"refusing to overwrite {target}" in err, err
    assert target.read_text(encoding="utf-8") == USERS
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_users_file_where_the_corpus_needs_a_folder_is_refused_before_any_request(online, monkeypatch, capsys):
    """Review: a file at RAGZOO_CORPORA/<name> was found by the unpack, after the whole archive had downloaded.
    The hub here is dead: a refusal that came after a request would say it could not download."""
    from ragzoo.retrieval import fetch

    monkeypatch.setenv("RAGZOO_CORPORA", str(online / "my-corpora"))
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())
    target = fetch.corpus_path(NAME)
    blocking = target.parent
    while blocking.parent != online / "my-corpora":
        blocking = blocking.parent
    blocking.parent.mkdir(parents=True)
    blocking.write_text(USERS, encoding="utf-8")
    code, out, err = fetch_cli(capsys, NAME, "--quiet")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert f"{blocking} is a file, where the corpus needs a folder" in err and err.rstrip().endswith(REMEDY), err
    assert blocking.read_text(encoding="utf-8") == USERS
