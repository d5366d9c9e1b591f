"""`ragzoo corpus fetch wiki17-abstracts` against a loopback fake hub (HF_ENDPOINT), then `index build --corpus
wiki17-abstracts` by name. Nothing here contacts a non-loopback address."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ragzoo.testing import LoopbackHTTPServer


# -- a loopback stand-in for the Hugging Face hub ----------------------------------------------------
_HUB_DOC = """A loopback stand-in for the Hugging Face hub: serves one file at `/{repo}/resolve/{revision}/{file}` (model
repositories have no `models/` prefix) with the headers `huggingface_hub` reads (X-Repo-Commit,
X-Linked-Etag = sha256, X-Linked-Size), HEAD and GET, and HTTP Range for resumed downloads. Faults on demand:
cut the body of the next GETs after N bytes, answer later GETs 500, serve bytes that do not match the ETag, or
(`stall_at`) send the first N bytes of every GET and hold the connection until `release` is set (or 20 s)."""


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def wiki17_tarball(sample: Path, n: int = 200, member: str = "wiki.abstracts.2017.jsonl") -> tuple[bytes, list[dict]]:
    """A .tar.gz of the real archive's layout: one `wiki.abstracts.2017.jsonl` of `{"title", "text": [...]}`
    lines (the full release's format), plus an unrelated member first."""
    rows = []
    for line in open(sample, encoding="utf-8"):
        row = json.loads(line)
        sentences = [s if i == 0 else " " + s for i, s in enumerate(row["text"].split(". "))]
        rows.append({"title": row["title"], "text": sentences})
        if len(rows) == n:
            break
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        readme = b"not the corpus\n"
        info = tarfile.TarInfo("README.txt")
        info.size = len(readme)
        tar.addfile(info, io.BytesIO(readme))
        info = tarfile.TarInfo(member)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue(), rows


class FakeHub(LoopbackHTTPServer):
    def __init__(self, content: bytes, repo: str = "dspy/cache", filename: str = "wiki.abstracts.2017.tar.gz"):
        self.content = content
        self.etag = hashlib.sha256(content).hexdigest()
        self.path = f"/{repo}/resolve/main/{filename}"
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.cut_gets = 0  # how many next GETs stop after `cut_at` bytes
        self.cut_at = 0
        self.fail_gets_after_cut = False  # GETs answer 500 once a cut happened
        self._cut_happened = False
        self.stall_at: int | None = None  # every GET sends this many bytes, then holds on until `release`
        self.stalled, self.release = threading.Event(), threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _headers(self, status: int, length: int, extra: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{hub.etag}"')
                self.send_header("ETag", f'"{hub.etag}"')
                self.send_header("X-Linked-Size", str(len(hub.content)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(length))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()

            def _route(self) -> bool:
                if self.path.split("?")[0] != hub.path:
                    body = b'{"error": "Entry not found"}'
                    self.send_response(404)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    self.wfile.write(body)
                    return False
                return True

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path, self.headers.get("Range")))
                if self._route():
                    self._headers(200, len(hub.content))

            def do_GET(self):
                hub.requests.append(("GET", self.path, self.headers.get("Range")))
                if not self._route():
                    return
                if hub.fail_gets_after_cut and hub._cut_happened:
                    body = b"down"
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                start = 0
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes="):
                    start = int(ranged[6:].split("-")[0])
                body = hub.content[start:]
                if start:
                    self._headers(206, len(body), {"Content-Range": f"bytes {start}-{len(hub.content) - 1}/"
                                                                    f"{len(hub.content)}"})
                else:
                    self._headers(200, len(body))
                if hub.stall_at is not None:
                    self.wfile.write(body[:hub.stall_at])
                    self.wfile.flush()
                    hub.stalled.set()
                    hub.release.wait(20)  # the client is stopped meanwhile; its connection is gone
                    self.close_connection = True
                    return
                if hub.cut_gets > 0:
                    hub.cut_gets -= 1
                    hub._cut_happened = True
                    self.wfile.write(body[:hub.cut_at])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return self.base_url

    def __exit__(self, *exc) -> None:
        self.release.set()  # a stalled GET's handler would otherwise hold the shutdown for its 20 s
        super().__exit__(*exc)


# -- tests --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tarball(wiki17_corpus):
    return wiki17_tarball(wiki17_corpus, n=200)


@pytest.fixture
def online(monkeypatch, tmp_path):
    """In-process: the hub client online (the suite runs with HF_HUB_OFFLINE=1), caches under tmp_path."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("RAGZOO_CORPORA", str(tmp_path / "corpora"))
    return tmp_path


def _env(tmp_path: Path, hub: FakeHub | None, offline: bool) -> dict:
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "RAGZOO_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1" if offline else "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("RAGZOO_CORPORA", None)
    if hub:
        env["HF_ENDPOINT"] = hub.url
    return env


def _cli(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragzoo.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_fetch_then_index_by_name_through_the_cli(tmp_path, tarball):
    content, rows = tarball
    with FakeHub(content) as hub:
        env = _env(tmp_path, hub, offline=False)
        done = _cli(["corpus", "fetch", "wiki17-abstracts", "--quiet"], env)
        assert done.returncode == 0, done.stderr
        assert "next: ragzoo index build --corpus wiki17-abstracts" in done.stdout
        hits = [r for r in hub.requests if r[1] == hub.path]
        assert {m for m, _, _ in hits} == {"HEAD", "GET"}
        path = tmp_path / "cache" / "corpora" / "wiki17-abstracts" / "wiki.abstracts.2017.jsonl"
        assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == rows
        marker = json.loads(path.with_name(path.name + ".ragzoo.json").read_text())
        assert marker["verified"] is True and marker["size"] == path.stat().st_size

        # a second fetch, offline: complete already, no request made
        before = len(hub.requests)
        again = _cli(["corpus", "fetch", "wiki17-abstracts", "--quiet"], _env(tmp_path, hub, offline=True))
        assert again.returncode == 0, again.stderr
        assert "already complete" in again.stdout and len(hub.requests) == before

    built = _cli(["index", "build", "--corpus", "wiki17-abstracts", "--quiet"], _env(tmp_path, None, offline=True))
    assert built.returncode == 0, built.stderr
    assert f"{len(rows):,} passages" in built.stdout
    found = _cli(["search", rows[7]["title"] + " " + "".join(rows[7]["text"])[:80], "-k", "1", "--json",
                  "--retriever", "bm25:wiki17-abstracts"], _env(tmp_path, None, offline=True))
    assert found.returncode == 0, found.stderr
    top = json.loads(found.stdout)["topk"][0]
    assert top["pid"] == "7" and top["text"].startswith(rows[7]["title"] + " | ")


def test_index_by_name_before_fetch_says_what_to_run(tmp_path):
    built = _cli(["index", "build", "--corpus", "wiki17-abstracts", "--quiet"], _env(tmp_path, None, offline=True))
    assert built.returncode != 0
    assert "ragzoo corpus fetch wiki17-abstracts" in built.stderr and "Traceback" not in built.stderr


def test_offline_without_a_cached_copy_is_one_clear_line(tmp_path):
    done = _cli(["corpus", "fetch", "wiki17-abstracts", "--quiet"], _env(tmp_path, None, offline=True))
    assert done.returncode != 0
    assert "HF_HUB_OFFLINE" in done.stderr and "Traceback" not in done.stderr


def test_offline_unpacks_from_the_hub_cache(online, tarball, monkeypatch):
    from ragzoo.retrieval import fetch

    content, rows = tarball
    with FakeHub(content) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path, fetched = fetch.fetch("wiki17-abstracts", progress=False)
    assert fetched
    path.unlink()  # the unpacked copy is gone, the archive is still in the hub cache
    path2, fetched2 = fetch.fetch("wiki17-abstracts", progress=False, offline=True)
    assert fetched2 and path2 == path and len(path.read_text().splitlines()) == len(rows)


def test_a_dropped_connection_resumes_with_a_range_request(online, tarball, monkeypatch, hub_retry_waits):
    from ragzoo.retrieval import fetch

    import huggingface_hub.constants as constants

    # the hub client writes in 10 MB chunks; small ones here make the 45 KB archive behave like a big one
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)
    content, rows = tarball
    with FakeHub(content) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.cut_gets, hub.cut_at = 1, len(content) // 2
        path, fetched = fetch.fetch("wiki17-abstracts", progress=False)
        gets = [r for r in hub.requests if r[0] == "GET"]
    assert gets[0][2] is None and len(gets) == 2
    assert gets[1][2].startswith("bytes=") and 0 < int(gets[1][2][6:-1]) <= len(content) // 2  # resumed, not restarted
    assert hub_retry_waits == [1]  # by the hub client's own retry, in this run
    assert fetched and fetch.is_complete(path) and len(path.read_text().splitlines()) == len(rows)


def test_a_failed_download_restarts_cleanly_on_the_next_run(online, tarball, monkeypatch, hub_retry_waits):
    from ragzoo.errors import DataError
    from ragzoo.retrieval import fetch

    content, rows = tarball
    with FakeHub(content) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.cut_gets, hub.cut_at = 1, len(content) // 2
        hub.fail_gets_after_cut = True  # the connection drops and the hub stays down: this run fails
        with pytest.raises(DataError, match="rerun to resume"):
            fetch.fetch("wiki17-abstracts", progress=False)
        target = fetch.corpus_path("wiki17-abstracts")
        assert not target.exists() and not fetch.is_complete(target)
        assert not list((online / "hub").rglob("*.incomplete"))  # no partial blob left to be mistaken
        hub.fail_gets_after_cut = False
        path, fetched = fetch.fetch("wiki17-abstracts", progress=False)
    assert fetched and len(path.read_text().splitlines()) == len(rows)


def test_a_corrupt_download_is_refused_removed_and_fetched_again(online, tarball, monkeypatch):
    from ragzoo.errors import DataError
    from ragzoo.retrieval import fetch

    content, rows = tarball
    with FakeHub(content) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        good = hub.content
        hub.content = bytearray(good)
        hub.content[-100] ^= 0xFF  # same size, one flipped byte: only the sha256 can tell
        hub.content = bytes(hub.content)
        with pytest.raises(DataError, match="integrity|damaged"):
            fetch.fetch("wiki17-abstracts", progress=False)
        target = fetch.corpus_path("wiki17-abstracts")
        assert not target.exists() and not fetch.is_complete(target)
        assert not list(target.parent.glob(".*partial*"))
        hub.content = good
        path, fetched = fetch.fetch("wiki17-abstracts", progress=False)
    assert fetched and fetch.is_complete(path) and len(path.read_text().splitlines()) == len(rows)


def test_an_interrupted_unpack_is_never_indexed_and_is_cleaned(online, tarball, monkeypatch):
    from ragzoo.errors import DataError
    from ragzoo.retrieval import fetch
    from ragzoo.retrieval.index_cache import resolve_corpus

    content, rows = tarball
    target = fetch.corpus_path("wiki17-abstracts")
    target.parent.mkdir(parents=True)
    # what a SIGKILLed unpack leaves: a partial file of a dead process, and no marker
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    partial = target.with_name(f".{target.name}.partial-{dead}")
    partial.write_text('{"title": "half')
    target.write_text('{"title": "a half-written corpus", "text": ["x"]}\n')
    # the marker without a size that ragzoo writes before the rename: the file is ragzoo's, not complete, so it is
    # replaced (an unmarked file there would be the user's, never overwritten: test_fetch_wiki18_ownership.py)
    target.with_name(target.name + ".ragzoo.json").write_text(
        json.dumps({"format": "ragzoo-corpus", "member": target.name, "publishing": partial.name}))
    with pytest.raises(DataError, match="corpus fetch wiki17-abstracts"):
        resolve_corpus("wiki17-abstracts")

    real_unpack = fetch.unpack

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with FakeHub(content) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(fetch, "unpack", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fetch.fetch("wiki17-abstracts", progress=False)
        monkeypatch.setattr(fetch, "unpack", real_unpack)
        path, fetched = fetch.fetch("wiki17-abstracts", progress=False)
    assert fetched and not partial.exists()
    assert resolve_corpus("wiki17-abstracts") == path.resolve()
    assert len(path.read_text().splitlines()) == len(rows)


def test_unpack_stops_midway_leaves_no_partial_and_no_corpus(tmp_path, tarball):
    from ragzoo.errors import DataError
    from ragzoo.retrieval import fetch

    content, _ = tarball
    archive = tmp_path / "wiki.abstracts.2017.tar.gz"
    archive.write_bytes(content[: len(content) * 2 // 3])  # a truncated archive
    target = tmp_path / "out" / "wiki.abstracts.2017.jsonl"
    with pytest.raises(DataError, match="damaged or incomplete"):
        fetch.unpack(archive, "wiki.abstracts.2017.jsonl", target, progress=False)
    assert not target.parent.exists()  # no partial file, and not the folder the unpack made


def test_unknown_corpus_name_lists_the_known_ones(tmp_path):
    done = _cli(["corpus", "fetch", "wiki18", "--quiet"], _env(tmp_path, None, offline=True))
    assert done.returncode == 2 and "wiki17-abstracts" in done.stderr


# -- bounded unpacking, pinned digests ------------------------------------------------------------------
# Corpora registered for a test only (monkeypatch.setitem on fetch.CORPORA): each is served by the loopback
# hub under its own repo/file, with a pin and a size bound of the test's choosing.


def _tar_gz(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _register(monkeypatch, name: str, **pins):
    from ragzoo.retrieval import fetch

    src = fetch.CorpusSource(name=name, repo_id="tests/tiny", filename=f"{name}.tar.gz", member=f"{name}.jsonl",
                             **pins)
    monkeypatch.setitem(fetch.CORPORA, name, src)
    return src


def _fetch_cli(args: list[str], capsys) -> tuple[int, str, str]:
    from ragzoo.cli import main

    code = main(["corpus", "fetch", *args, "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("unpacking ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


ROW = b'{"title": "T", "text": ["some text"]}\n'


def test_a_gzip_bomb_stops_at_the_known_size_and_leaves_nothing(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    bomb = _tar_gz([("tiny.jsonl", b"\0" * (4 << 20))])  # 4 MiB of zeros: about 4 KB compressed
    _register(monkeypatch, "tiny", sha256=hashlib.sha256(bomb).hexdigest(), max_unpacked_bytes=64 << 10)
    with FakeHub(bomb, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
    assert code != 0 and "fetched" not in out
    line = _one_line(err)
    assert "more than" in line and "tiny" in line
    assert not (online / "corpora" / "tiny").exists()  # no partial file, no folder
    assert not fetch.is_complete(fetch.corpus_path("tiny"))


def test_a_bomb_in_another_member_of_an_unsized_corpus_hits_the_ratio_cap(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    monkeypatch.setattr(fetch, "MIN_UNPACK_LIMIT", 1 << 20)
    bomb = _tar_gz([("padding.bin", b"\0" * (8 << 20)), ("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny", sha256=hashlib.sha256(bomb).hexdigest())
    with FakeHub(bomb, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
    assert code != 0
    assert "more than" in _one_line(err)
    assert not (online / "corpora" / "tiny").exists()


def test_a_pinned_corpus_is_verified_by_its_pin_when_the_hub_gives_no_sha256(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    content = _tar_gz([("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny", sha256=hashlib.sha256(content).hexdigest())
    with FakeHub(content, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        hub.etag = "5d41402abc4b2a76b9719d911017c592"  # a mirror's ETag that is no sha256
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
    assert code == 0, err
    path = fetch.corpus_path("tiny")
    marker = json.loads(path.with_name(path.name + ".ragzoo.json").read_text())
    assert marker["verified"] is True and marker["verified_by"] == "pin"
    assert path.read_bytes() == ROW


def test_an_archive_that_does_not_match_its_pin_is_refused_before_download(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    content = _tar_gz([("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny", sha256=hashlib.sha256(b"the archive ragzoo knows").hexdigest())
    with FakeHub(content, repo="tests/tiny", filename="tiny.tar.gz") as hub:  # ETag: the served file's sha256
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
        gets = [r for r in hub.requests if r[0] == "GET"]
    assert code != 0 and not gets  # refused on the hub's word alone: nothing downloaded
    line = _one_line(err)
    assert "pin" in line and "tiny" in line
    assert not fetch.corpus_path("tiny").exists()


def test_a_mismatching_archive_behind_a_non_sha256_etag_is_refused_and_removed(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    content = _tar_gz([("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny", sha256=hashlib.sha256(b"the archive ragzoo knows").hexdigest())
    with FakeHub(content, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        hub.etag = "5d41402abc4b2a76b9719d911017c592"
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
    assert code != 0
    assert "integrity" in _one_line(err)
    assert not fetch.corpus_path("tiny").exists()
    assert not [p for p in (online / "hub").rglob("*") if p.is_file() and p.name.endswith(".tar.gz")]


def test_an_unverifiable_download_is_refused_unless_allowed(online, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    content = _tar_gz([("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny")  # no pin
    with FakeHub(content, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        hub.etag = "5d41402abc4b2a76b9719d911017c592"
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = _fetch_cli(["tiny"], capsys)
        assert code != 0 and not [r for r in hub.requests if r[0] == "GET"]
        line = _one_line(err)
        assert "--allow-unverified" in line and "sha256" in line
        assert not fetch.corpus_path("tiny").exists()

        code, out, err = _fetch_cli(["tiny", "--allow-unverified"], capsys)
    assert code == 0, err
    assert "unverified" in out.lower()  # said where it is seen, not only in the hidden marker
    path = fetch.corpus_path("tiny")
    assert json.loads(path.with_name(path.name + ".ragzoo.json").read_text())["verified"] is False


def test_offline_an_unverifiable_cached_archive_needs_the_flag_too(online, monkeypatch, capsys):
    import huggingface_hub.constants as constants

    from ragzoo.retrieval import fetch

    content = _tar_gz([("tiny.jsonl", ROW)])
    _register(monkeypatch, "tiny")  # no pin
    with FakeHub(content, repo="tests/tiny", filename="tiny.tar.gz") as hub:
        hub.etag = "5d41402abc4b2a76b9719d911017c592"  # the hub cache names the blob after it: no sha256 either
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert _fetch_cli(["tiny", "--allow-unverified"], capsys)[0] == 0
    fetch.corpus_path("tiny").unlink()  # the archive stays in the hub cache
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = _fetch_cli(["tiny"], capsys)
    assert code != 0 and "--allow-unverified" in _one_line(err)
    code, out, err = _fetch_cli(["tiny", "--allow-unverified"], capsys)
    assert code == 0 and "unverified" in out.lower()
    assert fetch.corpus_path("tiny").read_bytes() == ROW


def test_a_partial_unpack_whose_lock_is_held_is_left_alone_whatever_its_pid(tmp_path):
    """A fetch in another PID namespace writes its partial file under a lock; its PID is no process here
    (review: the same PID test as staging folders). Once the writer is gone, the partial is stale and goes."""
    from ragzoo.retrieval import fetch
    from tests.retrieval.locking import dead_pid, held_elsewhere

    target = tmp_path / "corpus.jsonl"
    partial = tmp_path / f".corpus.jsonl{fetch.PARTIAL_MARK}{dead_pid()}"
    partial.write_bytes(b"half")
    with held_elsewhere(partial):
        assert fetch.clean_partials(target) == [] and partial.exists()
    assert fetch.clean_partials(target) == [partial] and not partial.exists()


def test_a_file_the_server_does_not_have_is_not_said_to_resume_on_a_rerun(online, tarball, monkeypatch):
    """Review: an endpoint with a bad path answered 404 and the line ended "rerun to resume", which no rerun does."""
    from ragzoo.errors import DataError
    from ragzoo.retrieval import fetch

    content, _ = tarball
    with FakeHub(content) as hub:
        hub.path = "/somewhere/else"  # every request: 404 Entry not found
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(DataError) as raised:
            fetch.fetch("wiki17-abstracts", progress=False)
    message = str(raised.value)
    assert "does not serve this file" in message and "rerun to resume" not in message and "\n" not in message
