"""`ragzoo corpus fetch wiki18-100w`, what the first tests (test_fetch_wiki18.py) left unchecked and mutants of
ragzoo/retrieval/fetch.py showed: what the user is told vouched for the corpus, --allow-unverified for a
multi-file corpus, a dead fetch's partial file, and a hub mirror's credentials in the error lines. Same loopback
stand-in for the hub; nothing here contacts a non-loopback address."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.retrieval.test_fetch_wiki18 import (NAME, MultiFileHub, _target, fetch_cli, online,  # noqa: F401
                                               pin, shards)


def _error_line(err: str) -> str:
    """ragzoo's one error line, and no traceback through ragzoo's code (a stand-in hub's own threads may print
    a broken connection's traceback meanwhile: only ragzoo's output is judged)."""
    import ragzoo

    assert f'File "{Path(ragzoo.__file__).parent}' not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("ragzoo corpus: error:")]
    return line


def _verified_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith(f"corpus {NAME} fetched")]
    return line


def test_the_user_is_told_what_vouched_for_the_corpus(online, shards, monkeypatch, capsys):
    files, _ = shards
    pin(monkeypatch, files)  # every file pinned: ragzoo's own digests vouch, not the hub's
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    assert "(verified against ragzoo's pinned sha256)" in _verified_line(out)
    marker = json.loads(_target(online).with_name("psgs_w100.jsonl.ragzoo.json").read_text())
    assert marker["verified_by"] == "pin" and {f["verified_by"] for f in marker["files"]} == {"pin"}

    _target(online).unlink()
    pin(monkeypatch, files, unpinned=(3,))  # one file's digest comes from the hub's sha256 ETag
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    assert "each file against ragzoo's pinned sha256, or the hub's where ragzoo pins none" in _verified_line(out)


def test_a_damaged_pinned_file_names_the_pin_as_what_it_failed(online, shards, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    files, _ = shards
    pin(monkeypatch, files)
    bad = fetch.WIKI18_SHARDS[7]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        hub.files[bad] = files[bad][:-1] + bytes([files[bad][-1] ^ 0xFF])
        hub.etags[bad] = "5d41402abc4b2a76b9719d911017c592"  # a mirror's plain ETag: only the pin can tell
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code != 0
    line = _error_line(err)
    pinned = hashlib.sha256(files[bad]).hexdigest()
    assert f"ragzoo pins {pinned[:12]}..." in line and "the hub says" not in line
    assert f"sha256 {hashlib.sha256(hub.files[bad]).hexdigest()[:12]}..." in line


def test_an_unverifiable_file_is_refused_before_any_download_unless_allowed(online, shards, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files, unpinned=(11,))
    plain = fetch.WIKI18_SHARDS[11]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        hub.etags[plain] = "5d41402abc4b2a76b9719d911017c592"  # no pin, no sha256 ETag: nothing can verify it
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code != 0 and not [r for r in hub.requests if r[0] == "GET"]
        line = _error_line(err)
        assert "train-00011-of-00028.parquet" in line and "--allow-unverified" in line

        code, out, err = fetch_cli(capsys, NAME, "--quiet", "--allow-unverified")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "1 of 28 files are unverified" in warnings[0]
    assert "UNVERIFIED" in _verified_line(out)
    marker = json.loads(_target(online).with_name("psgs_w100.jsonl.ragzoo.json").read_text())
    assert marker["verified"] is False and marker["verified_by"] is None
    assert [f["name"] for f in marker["files"] if f["verified_by"] is None] == [plain]
    assert len(_target(online).read_text(encoding="utf-8").splitlines()) == len(rows)


def test_each_download_and_the_conversion_are_announced(online, shards, monkeypatch, capsys):
    files, _ = shards
    pin(monkeypatch, files)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    downloads = [line for line in err.splitlines() if line.startswith("download ")]
    assert len(downloads) == 28 and downloads[0].startswith("download 1/28: facebook/wiki_dpr/")
    assert f"converting 28 parquet files -> {_target(online)}" in err


def test_the_partial_file_of_a_fetch_that_died_is_removed(online, shards, monkeypatch, capsys):
    files, rows = shards
    pin(monkeypatch, files)
    target = _target(online)
    target.parent.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = target.with_name(f".{target.name}.partial-{int(dead.stdout)}")  # a killed fetch's 14 GB, say
    stale.write_bytes(b"x" * 1000)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    assert not stale.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["psgs_w100.jsonl", "psgs_w100.jsonl.ragzoo.json"]
    assert len(target.read_text(encoding="utf-8").splitlines()) == len(rows)


@pytest.mark.parametrize("fault", ["contradicted pin", "unverifiable", "missing on the hub"])
def test_a_mirror_s_credentials_never_reach_the_error_line(online, shards, monkeypatch, capsys, fault):
    from ragzoo.retrieval import fetch

    files, _ = shards
    password = "mirr0rPassw0rdQ7"
    if fault == "contradicted pin":
        pin(monkeypatch, files, wrong=(2,))
    else:
        pin(monkeypatch, files, unpinned=(2,))
    with MultiFileHub(files) as hub:
        if fault == "unverifiable":
            hub.etags[fetch.WIKI18_SHARDS[2]] = "5d41402abc4b2a76b9719d911017c592"
        if fault == "missing on the hub":  # the hub client's own error, which quotes the URL it asked
            del hub.files[fetch.WIKI18_SHARDS[2]]
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url.replace("http://", f"http://reader:{password}@"))
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code != 0
    line = _error_line(err)
    assert "train-00002-of-00028.parquet" in line
    assert password not in out + err and "127.0.0.1" in line  # still says which mirror
    if fault != "missing on the hub":  # ragzoo's own lines name the mirror without its userinfo at all
        assert "reader:" not in line


def test_a_hub_that_cannot_be_reached_is_one_line_naming_the_file(online, monkeypatch, capsys):
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code != 0
    line = _error_line(err)
    assert line.startswith("ragzoo corpus: error: cannot download data/psgs_w100/no_embeddings/train-00000-of-00028"
                           ".parquet from facebook/wiki_dpr") and "internal error" not in line
    assert not (online / "cache" / "corpora" / NAME).exists()


def test_a_file_that_is_not_parquet_is_named_removed_alone_and_fetched_again(online, shards, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files, unpinned=(6,))
    bad = fetch.WIKI18_SHARDS[6]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        hub.files[bad] = b"<html>a mirror's error page, served as the file</html>"
        hub.etags[bad] = "5d41402abc4b2a76b9719d911017c592"  # a mirror without sha256 ETags: --allow-unverified
        code, out, err = fetch_cli(capsys, NAME, "--quiet", "--allow-unverified")
        assert code != 0
        line = _error_line(err)
        assert "train-00006-of-00028.parquet" in line and "not readable parquet" in line  # which of the 28
        cached = {p.name for p in (online / "hub").rglob("*.parquet")}
        assert bad.rsplit("/", 1)[1] not in cached and len(cached) == 27  # only that one leaves the hub cache
        assert not _target(online).parent.exists()

        hub.files[bad] = files[bad]
        before = {name: len(hub.gets(name)) for name in files}
        code, out, err = fetch_cli(capsys, NAME, "--quiet", "--allow-unverified")
        assert code == 0, err
        assert [name for name in files if len(hub.gets(name)) > before[name]] == [bad]
    assert len(_target(online).read_text(encoding="utf-8").splitlines()) == len(rows)


def test_a_hub_that_echoes_the_token_in_its_refusal_never_gets_it_printed(online, monkeypatch, capsys):
    from http.server import BaseHTTPRequestHandler

    from ragzoo.testing import LoopbackHTTPServer

    token = "hf_" + "Q7pLm2" * 6  # HF_TOKEN: sent by the hub client, echoed back by a careless mirror
    seen = []

    class Refusing(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _refuse(self):
            seen.append(self.headers.get("Authorization"))
            body = f'{{"error": "invalid credentials {self.headers.get("Authorization")}"}}'.encode()
            self.send_response(401)
            self.send_header("X-Error-Message", f"invalid credentials {self.headers.get('Authorization')}")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET = _refuse

    monkeypatch.setenv("HF_TOKEN", token)
    with LoopbackHTTPServer(Refusing) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert seen and token in (seen[0] or "")  # the token was sent, so the echo held it
    assert code != 0
    line = _error_line(err)
    assert "train-00000-of-00028.parquet" in line and token not in out + err


def test_a_fetch_of_a_complete_corpus_still_removes_a_dead_fetchs_partial_file(online, shards, monkeypatch, capsys):
    files, _ = shards
    pin(monkeypatch, files)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        assert fetch_cli(capsys, NAME, "--quiet")[0] == 0
        target = _target(online)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        stale = target.with_name(f".{target.name}.partial-{int(dead.stdout)}")  # a --force run that was killed
        stale.write_bytes(b"x" * 1000)
        before = len(hub.requests)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert len(hub.requests) == before  # complete: nothing asked of the hub
    assert code == 0 and f"corpus {NAME} already complete" in out
    assert not stale.exists()
