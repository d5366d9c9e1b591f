"""`ragzoo corpus fetch` writes a corpus file into RAGZOO_CORPORA, which a user may point at a folder of their own:
a file there that ragzoo did not write (no `NAME.ragzoo.json` beside it) is never overwritten or deleted
(`ownership.check_file`, the single-file rule of plots and HTML reports), while ragzoo's own half-published corpus
(killed between the rename and the final marker) is still replaced by the next fetch."""

from __future__ import annotations

import os
import socket

import pytest

from tests.retrieval.test_fetch_wiki18 import (NAME, MultiFileHub, _target, fetch_cli, online,  # noqa: F401
                                               pin, shards)

USERS = '{"id": "mine", "title": "my own passages", "text": "kept"}\n'


def _dead_endpoint() -> str:
    with socket.socket() as probe:  # a loopback port nothing listens on: any request would fail
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _fetchable() -> list[str]:
    from ragzoo.retrieval import fetch

    return [name for name, src in fetch.CORPORA.items() if not src.why_not]


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("name", _fetchable())
def test_a_users_file_in_ragzoo_corpora_is_never_overwritten(online, monkeypatch, capsys, name, force):
    from ragzoo.retrieval import fetch

    mine = online / "my-corpora"
    monkeypatch.setenv("RAGZOO_CORPORA", str(mine))
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())
    target = fetch.corpus_path(name)
    target.parent.mkdir(parents=True)
    target.write_text(USERS, encoding="utf-8")
    code, out, err = fetch_cli(capsys, name, "--quiet", *(["--force"] if force else []))
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ragzoo corpus: error: refusing to overwrite {target}"), err
    assert "RAGZOO_CORPORA" in lines[0] and "cannot download" not in err  # said before any request
    assert target.read_text(encoding="utf-8") == USERS
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_users_file_where_the_marker_goes_is_never_overwritten(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    monkeypatch.setenv("RAGZOO_CORPORA", str(online / "my-corpora"))
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())
    marker = fetch.corpus_path(NAME).with_name("psgs_w100.jsonl.ragzoo.json")
    marker.parent.mkdir(parents=True)
    marker.write_text('{"my": "notes"}', encoding="utf-8")
    code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 2 and f"refusing to overwrite {marker}" in err, err
    assert marker.read_text(encoding="utf-8") == '{"my": "notes"}'


def test_a_fetch_killed_while_publishing_is_replaced_by_the_next(online, shards, monkeypatch, capsys):
    """Killed right after the converted file took its name, before its final marker: the file is ragzoo's (the
    marker beside it, written before the rename, says so) and the next fetch replaces it."""
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files)
    target = _target(online)
    real_replace = os.replace

    def killed_after_the_rename(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        if str(dst) == str(target):
            raise KeyboardInterrupt  # a Ctrl-C (or the machine going down) that very moment

    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setattr(fetch.os, "replace", killed_after_the_rename)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code == 130, err
        assert target.exists() and not fetch.is_complete(target)
        monkeypatch.setattr(fetch.os, "replace", real_replace)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    assert fetch.is_complete(target) and len(target.read_text(encoding="utf-8").splitlines()) == len(rows)
