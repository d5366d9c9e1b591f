"""`ragzoo corpus fetch wiki18-100w` (DPR's psgs_w100 as the 28 parquet files of facebook/wiki_dpr) against a
loopback stand-in for the hub serving tiny psgs_w100-shaped files under the real names; `corpus fetch --list`;
bad names. Nothing here contacts a non-loopback address."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ragzoo.cli import main
from ragzoo.testing import LoopbackHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
NAME = "wiki18-100w"


def psgs_rows(shard: int, per_shard: int = 2) -> list[dict]:
    """DPR passages as facebook/wiki_dpr's no_embeddings files hold them: id (a string), text, title."""
    rows = []
    for j in range(per_shard):
        pid = shard * per_shard + j + 1
        rows.append({"id": str(pid), "title": f"Title {pid} \u00e9t\u00e9",
                     "text": f'passage {pid} about "topic{pid}" with\ttab and a/slash, word{pid}'})
    return rows


def parquet_bytes(rows: list[dict], columns=("id", "text", "title")) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({column: [row[column] for row in rows] for column in columns})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


class MultiFileHub(LoopbackHTTPServer):
    """The hub's resolve endpoint for several files of one dataset repository, with the headers huggingface_hub
    reads (X-Repo-Commit, X-Linked-Etag = sha256, X-Linked-Size), HEAD and GET, and HTTP Range. Faults on demand:
    `cut[path] = n` cuts that file's next GET after n bytes; `down_after_cut` answers later GETs 500."""

    def __init__(self, files: dict[str, bytes], repo: str = "datasets/facebook/wiki_dpr"):
        self.files = dict(files)
        self.prefix = f"/{repo}/resolve/main/"
        self.etags = {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}
        self.requests: list[tuple[str, str, str | None]] = []
        self.cut: dict[str, int] = {}
        self.down_after_cut = False
        self._cut_done = False
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _name(self) -> str | None:
                path = self.path.split("?")[0]
                name = path[len(hub.prefix):] if path.startswith(hub.prefix) else None
                if name not in hub.files:
                    body = b'{"error": "Entry not found"}'
                    self.send_response(404)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    self.wfile.write(body)
                    return None
                return name

            def _headers(self, name: str, status: int, length: int, extra: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{hub.etags[name]}"')
                self.send_header("ETag", f'"{hub.etags[name]}"')
                self.send_header("X-Linked-Size", str(len(hub.files[name])))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(length))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path, self.headers.get("Range")))
                name = self._name()
                if name:
                    self._headers(name, 200, len(hub.files[name]))

            def do_GET(self):
                hub.requests.append(("GET", self.path, self.headers.get("Range")))
                name = self._name()
                if not name:
                    return
                if hub.down_after_cut and hub._cut_done:
                    self.send_response(500)
                    self.send_header("Content-Length", "4")
                    self.end_headers()
                    self.wfile.write(b"down")
                    return
                content = hub.files[name]
                ranged = self.headers.get("Range") or ""
                start = int(ranged[6:].split("-")[0]) if ranged.startswith("bytes=") else 0
                body = content[start:]
                if start:
                    self._headers(name, 206, len(body),
                                  {"Content-Range": f"bytes {start}-{len(content) - 1}/{len(content)}"})
                else:
                    self._headers(name, 200, len(body))
                if name in hub.cut:
                    hub._cut_done = True
                    self.wfile.write(body[:hub.cut.pop(name)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        super().__init__(Handler)

    def gets(self, name: str) -> list[str | None]:
        return [ranged for method, path, ranged in self.requests if method == "GET" and path.endswith("/" + name)]


@pytest.fixture(scope="module")
def shards():
    """The 28 real file names, each a tiny psgs_w100-shaped parquet file; every passage in file order."""
    from ragzoo.retrieval import fetch

    files, rows = {}, []
    for number, name in enumerate(fetch.WIKI18_SHARDS):
        shard_rows = psgs_rows(number)
        files[name] = parquet_bytes(shard_rows)
        rows += shard_rows
    return files, rows


@pytest.fixture
def online(monkeypatch, tmp_path):
    """In-process: the hub client online (the suite runs with HF_HUB_OFFLINE=1), caches under tmp_path."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("RAGZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RAGZOO_CORPORA", raising=False)
    return tmp_path


def pin(monkeypatch, files: dict[str, bytes], unpinned: tuple[int, ...] = (), wrong: tuple[int, ...] = ()):
    """wiki18-100w as ragzoo defines it (repo, revision, names), pinned to the tiny files' digests: the real
    pins are the real files' and would refuse them. `unpinned` files fall back to the hub's ETag; `wrong` ones
    are pinned to another digest."""
    from ragzoo.retrieval import fetch

    src = fetch.CORPORA[NAME]
    names = list(src.files)
    pins = {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}
    for i in unpinned:
        pins.pop(names[i])
    for i in wrong:
        pins[names[i]] = hashlib.sha256(b"another file").hexdigest()
    monkeypatch.setitem(fetch.CORPORA, NAME, dataclasses.replace(src, sha256s=pins))


def fetch_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["corpus", "fetch", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _target(online: Path) -> Path:
    return online / "cache" / "corpora" / NAME / "psgs_w100.jsonl"


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip() and not line.startswith(("download ", "converting "))]


# -- fetch, convert, verify ---------------------------------------------------------------------------------


def test_fetch_converts_the_28_files_into_one_corpus_that_indexes_and_searches(online, shards, monkeypatch,
                                                                                 capsys):
    from ragzoo.retrieval.corpus import iter_corpus

    files, rows = shards
    pin(monkeypatch, files, unpinned=(0, 27))  # two files verified by the hub's sha256 ETag, 26 by the pins
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code == 0, err
        assert all(len(hub.gets(name)) == 1 for name in files)  # each of the 28 files, from the dataset repo
    target = _target(online)
    assert f"corpus {NAME} fetched (verified:" in out and f"{target} (56 passages)" in out
    assert f"next: ragzoo index build --corpus {NAME} --format packed" in out
    assert [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()] == \
        [{"id": r["id"], "title": r["title"], "text": r["text"]} for r in rows]
    passages = list(iter_corpus(target))
    assert [p.pid for p in passages] == [r["id"] for r in rows]  # DPR's ids, not line numbers
    assert passages[5].title == rows[5]["title"] and passages[5].text == rows[5]["text"]
    marker = json.loads(target.with_name(target.name + ".ragzoo.json").read_text())
    assert marker["verified"] is True and marker["passages"] == len(rows) == 56
    assert [f["verified_by"] for f in marker["files"]].count("hub") == 2



def test_index_and_search_by_name_find_a_passage_by_its_dpr_id(online, shards, monkeypatch, capsys):
    files, rows = shards
    pin(monkeypatch, files)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        assert fetch_cli(capsys, NAME, "--quiet")[0] == 0
    assert main(["index", "build", "--corpus", NAME, "--format", "packed", "--quiet"]) == 0  # as fetch advises
    assert f"{len(rows):,} passages" in capsys.readouterr().out
    assert main(["search", "topic33 word33", "-k", "1", "--json", "--retriever",
                 f"bm25:{NAME}?format=packed&backend=numba"]) == 0
    top = json.loads(capsys.readouterr().out)["topk"][0]
    assert top["pid"] == "33" and top["text"].startswith(rows[32]["title"] + " | ")


def test_a_file_whose_pin_the_hub_contradicts_is_refused_before_any_download(online, shards, monkeypatch, capsys):
    files, _ = shards
    pin(monkeypatch, files, wrong=(9,))
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        gets = [r for r in hub.requests if r[0] == "GET"]
    assert code != 0 and not gets  # the 28 are asked first: the refusal costs no download at all
    (line,) = _lines(err)
    assert "train-00009-of-00028.parquet" in line and "pins" in line and "Traceback" not in err
    assert not (online / "cache" / "corpora" / NAME).exists()


def test_a_damaged_file_is_refused_removed_alone_and_fetched_again(online, shards, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files)
    bad = fetch.WIKI18_SHARDS[4]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        flipped = bytearray(files[bad])
        flipped[len(flipped) // 2] ^= 0xFF  # same size, one byte: only the sha256 can tell
        hub.files[bad] = bytes(flipped)
        hub.etags[bad] = "5d41402abc4b2a76b9719d911017c592"  # a mirror's plain ETag: the pin alone can tell
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code != 0
        (line,) = _lines(err)
        assert "integrity" in line and "train-00004-of-00028.parquet" in line
        target = _target(online)
        assert not target.parent.exists()  # no partial file, no marker, not even the folder
        cached = {p.name for p in (online / "hub").rglob("*.parquet")}
        assert "train-00004-of-00028.parquet" not in cached and len(cached) == 27  # only the bad one is gone

        hub.files[bad] = files[bad]
        hub.etags[bad] = hashlib.sha256(files[bad]).hexdigest()
        before = {name: len(hub.gets(name)) for name in files}
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code == 0, err
        fetched_again = [name for name in files if len(hub.gets(name)) > before[name]]
    assert fetched_again == [bad]
    assert len(target.read_text(encoding="utf-8").splitlines()) == len(rows)


def test_a_dropped_connection_resumes_with_a_range_request(online, shards, monkeypatch, capsys, hub_retry_waits):
    import huggingface_hub.constants as constants

    from ragzoo.retrieval import fetch

    # the hub client writes in 10 MB chunks; small ones make a few-KB file behave like a big one
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256)
    files, rows = shards
    pin(monkeypatch, files)
    name = fetch.WIKI18_SHARDS[12]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        hub.cut[name] = len(files[name]) // 2
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        gets = hub.gets(name)
    assert code == 0, err
    assert gets[0] is None and len(gets) == 2
    assert gets[1].startswith("bytes=") and 0 < int(gets[1][6:-1]) <= len(files[name]) // 2  # resumed
    assert hub_retry_waits == [1]  # by the hub client's own retry, in this run
    assert len(_target(online).read_text(encoding="utf-8").splitlines()) == len(rows)


def test_an_interrupted_fetch_resumes_where_it_stopped_on_the_next_run(online, shards, monkeypatch, capsys,
                                                                       hub_retry_waits):
    from ragzoo.retrieval import fetch

    files, rows = shards
    pin(monkeypatch, files)
    stop = fetch.WIKI18_SHARDS[20]
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        hub.cut[stop] = len(files[stop]) // 3
        hub.down_after_cut = True  # the connection drops in file 21 and the hub stays down: this run fails
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        # (the stand-in's own thread may print the broken connection's traceback: only ragzoo's line is judged)
        (line,) = [line for line in err.splitlines() if line.startswith("ragzoo corpus: error:")]
        assert code != 0 and "train-00020-of-00028.parquet" in line and line.endswith("rerun to resume")
        assert not _target(online).exists()
        hub.down_after_cut = False
        before = {name: len(hub.gets(name)) for name in files}
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code == 0, err
        again = [name for name in files if len(hub.gets(name)) > before[name]]
    # the 20 files finished before the cut come from the hub cache: only the rest is downloaded
    assert again == list(fetch.WIKI18_SHARDS[20:])
    assert len(_target(online).read_text(encoding="utf-8").splitlines()) == len(rows)


def test_offline_the_corpus_is_converted_again_from_the_hub_cache(online, shards, monkeypatch, capsys):
    import huggingface_hub.constants as constants

    files, rows = shards
    pin(monkeypatch, files, unpinned=(5,))
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        assert fetch_cli(capsys, NAME, "--quiet")[0] == 0
        target = _target(online)
        target.unlink()  # the converted corpus is gone; the 28 files are still in the hub cache
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        before = len(hub.requests)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code == 0, err
        assert len(hub.requests) == before  # not one request
    assert len(target.read_text(encoding="utf-8").splitlines()) == len(rows)
    cached = next(p for p in (online / "hub").rglob("train-00009-of-00028.parquet"))
    cached.unlink()  # one file missing from the cache: offline, that is one line saying so
    target.unlink()
    code, out, err = fetch_cli(capsys, NAME, "--quiet")
    (line,) = _lines(err)
    assert code != 0 and "HF_HUB_OFFLINE" in line and "train-00009-of-00028.parquet" in line


def test_files_that_are_not_psgs_w100_are_refused(online, shards, monkeypatch, capsys):
    from ragzoo.retrieval import fetch

    files, _ = shards
    files = dict(files)
    files[fetch.WIKI18_SHARDS[3]] = parquet_bytes(psgs_rows(3), columns=("id", "text"))  # no title column
    pin(monkeypatch, files)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code != 0
    (line,) = _lines(err)
    assert "train-00003-of-00028.parquet" in line and "title" in line
    assert not _target(online).exists()


def _not_utf8(rows: list[dict], binary: bool = False) -> bytes:
    """A psgs_w100 file whose text column holds bytes that are not UTF-8 (pyarrow reads them; decoding fails), or
    (`binary`) a text column typed binary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = pa.array([b"\xff\xfe not text" for _ in rows], type=pa.binary())
    texts = texts if binary else texts.view(pa.string())
    table = pa.table({"id": [row["id"] for row in rows], "text": texts, "title": [row["title"] for row in rows]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("damage", ["page header", "not utf-8", "binary text"])
def test_a_file_damaged_inside_its_data_is_named_removed_and_fetched_again(online, shards, monkeypatch, capsys,
                                                                          damage):
    """Review: a file whose footer reads but whose pages do not (a bad upload its hub vouches for) ended in
    pyarrow's three-line error (or an internal UnicodeDecodeError), was kept, and every rerun failed the same way."""
    from ragzoo.retrieval import fetch

    files, rows = shards
    files = dict(files)
    bad = fetch.WIKI18_SHARDS[5]
    damaged = bytearray(files[bad])
    for offset in range(4, 10):  # the first page header, right after the magic bytes
        damaged[offset] ^= 0xFF
    if damage == "not utf-8":
        damaged = bytearray(_not_utf8(psgs_rows(5)))
    if damage == "binary text":  # a text column of another type: ujson cannot write bytes
        damaged = bytearray(_not_utf8(psgs_rows(5), binary=True))
    good, files[bad] = files[bad], bytes(damaged)
    pin(monkeypatch, files)  # its digest vouched for: only reading it can tell
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
        assert code != 0
        (line,) = _lines(err)
        assert "train-00005-of-00028.parquet" in line and "not readable parquet" in line
        cached = {p.name for p in (online / "hub").rglob("*.parquet")}
        assert bad not in cached and len(cached) == 27
        files[bad] = hub.files[bad] = good
        hub.etags[bad] = hashlib.sha256(good).hexdigest()
        pin(monkeypatch, files)
        code, out, err = fetch_cli(capsys, NAME, "--quiet")
    assert code == 0, err
    assert len(_target(online).read_text(encoding="utf-8").splitlines()) == len(rows)


# -- --list, bad names --------------------------------------------------------------------------------------


def test_list_says_what_each_corpus_is_and_whether_it_is_here(online, shards, monkeypatch, capsys):
    assert main(["corpus", "fetch", "--list"]) == 0
    before = capsys.readouterr().out
    block = before.split(f"{NAME}  [")[1].split("\n\n")[0]
    assert block.startswith("fetchable]") and "21,015,324" in block and "Post-Fusion" in block
    assert "FILCO" in block and "RA-ISF" in block and "7.5 GB" in block and "14 GB" in block
    assert f"not fetched (ragzoo corpus fetch {NAME})" in block
    kilt = before.split("kilt-wikipedia  [")[1]
    assert kilt.startswith("NOT fetchable]") and "ActiveRAG" in kilt and "not fetchable by name:" in kilt
    assert "BlendFilter" in before.split("wiki17-abstracts  [")[1].split(f"{NAME}  [")[0]
    assert main(["corpus", "list"]) == 0 and capsys.readouterr().out == before  # one listing, two spellings

    files, _ = shards
    pin(monkeypatch, files)
    with MultiFileHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        assert fetch_cli(capsys, NAME, "--quiet")[0] == 0
    assert main(["corpus", "fetch", "--list"]) == 0
    after = capsys.readouterr().out
    target = _target(online)
    files_rows = len(shards[1])
    # what was fetched, and what vouched for it (review: a mirror's 1,400 unverified passages showed only its MB)
    assert (f"present at {target} ({target.stat().st_size / 1e6:,.0f} MB, {files_rows:,} passages; verified)"
            in after.split(f"{NAME}  [")[1])
    assert "not fetched (ragzoo corpus fetch wiki17-abstracts)" in after


@pytest.mark.parametrize("args", [["wiki18"], ["wiki_dpr"], []])
def test_a_bad_or_missing_name_is_one_line_naming_the_corpora(args, capsys):
    code = main(["corpus", "fetch", *args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert "wiki17-abstracts" in line and NAME in line and "kilt-wikipedia" in line


def test_a_corpus_known_but_not_fetchable_says_why_in_one_line(online, capsys):
    code = main(["corpus", "fetch", "kilt-wikipedia", "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert "cannot be fetched by name" in line and "facebook/kilt_wikipedia" in line
    assert main(["search", "x", "--retriever", "bm25:kilt-wikipedia"]) != 0
    assert "cannot be fetched by name" in capsys.readouterr().err
