"""`ragzoo index build --out DIR` through the CLI: it replaces only what ragzoo wrote, swaps a new index in
without a moment with no index, and leaves no staging folder behind (SIGTERM, or a build killed outright)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from ragzoo.cli import main
from ragzoo.retrieval import make_retriever
from tests.retrieval.locking import dead_pid, held_elsewhere

DOCS = [{"id": "z", "title": "Zebra", "text": "Zebras have black and white stripes."},
        {"id": "l", "title": "Lion", "text": "Lions are big cats of Africa."},
        {"id": "v", "title": "Volga", "text": "The Volga is the longest river in Europe."}]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    return path


def build(corpus, out, *extra):
    return main(["index", "build", "--corpus", str(corpus), "--out", str(out), "--quiet", *extra])


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".building-" in p.name or ".old-" in p.name)


def test_refuses_a_folder_of_documents_and_keeps_it(tmp_path, corpus, capsys):
    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "thesis.txt").write_text("four years of work")
    (docs / "sub").mkdir()
    (docs / "sub" / "notes.md").write_text("notes")
    assert build(corpus, docs) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a ragzoo index" in err and "mydocs" in err
    assert not any(word in err.lower() for word in ("delete", "remove", "rm ", "--force"))
    assert (docs / "thesis.txt").read_text() == "four years of work" and (docs / "sub" / "notes.md").exists()
    assert leftovers(tmp_path) == []


def test_refuses_the_current_directory_and_a_file(tmp_path, corpus, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.jsonl").write_text("{}\n")
    monkeypatch.chdir(work)
    assert build(corpus, ".") == 2
    assert (work / "keep.jsonl").exists() and sorted(os.listdir(work)) == ["keep.jsonl"]
    target = tmp_path / "file.txt"
    target.write_text("data")
    assert build(corpus, target) == 2
    assert target.read_text() == "data"
    assert "is a file" in capsys.readouterr().err
    # a meta.json of something else is not ours either
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.json").write_text(json.dumps({"format": "someone-else"}))
    assert build(corpus, other) == 2
    assert json.loads((other / "meta.json").read_text()) == {"format": "someone-else"}


def test_builds_into_new_or_empty_folders_and_replaces_its_own_index(tmp_path, corpus):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build(corpus, empty) == 0
    assert build(corpus, tmp_path / "new" / "idx") == 0
    assert len(make_retriever(f"bm25:{tmp_path / 'new' / 'idx'}")) == 3
    # an index ragzoo wrote is replaced (the corpus grew: --rebuild swaps the new index in)
    with corpus.open("a") as handle:
        handle.write(json.dumps({"id": "m", "title": "Moscow", "text": "Moscow is the capital of Russia."}) + "\n")
    assert build(corpus, empty, "--rebuild") == 0
    assert len(make_retriever(f"bm25:{empty}")) == 4
    assert leftovers(tmp_path) == []


def test_a_failed_swap_puts_the_old_index_back(tmp_path, corpus, monkeypatch, capsys):
    out = tmp_path / "idx"
    assert build(corpus, out) == 0
    before = (out / "meta.json").read_text()
    real_replace = os.replace

    def failing_replace(src, dst, *args, **kwargs):
        if ".building-" in os.fspath(src) and os.fspath(dst) == os.fspath(out):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    assert build(corpus, out, "--rebuild") == 2
    monkeypatch.setattr(os, "replace", real_replace)
    err = capsys.readouterr().err
    assert "could not put the new index in place" in err and "previous index is kept" in err
    assert (out / "meta.json").read_text() == before  # never a moment (nor an end state) without the index
    assert len(make_retriever(f"bm25:{out}")) == 3
    assert leftovers(tmp_path) == []


def test_stale_staging_of_dead_builds_is_cleaned(tmp_path, corpus):
    out = tmp_path / "idx"
    gone = dead_pid()
    stale = [tmp_path / f".idx.building-{gone}-1-abc", tmp_path / f"idx.building-{gone}-2"]  # new and old naming
    for folder in stale:
        folder.mkdir()
        (folder / "passages.jsonl").write_bytes(b"x" * 1000)
    alive = tmp_path / f".idx.building-{os.getppid()}-3-def"  # a build still running elsewhere: left alone
    alive.mkdir()
    other = tmp_path / f".other.building-{gone}-4-ghi"  # another target's staging: not ours to judge now
    other.mkdir()
    # a folder of the user's with the old naming's shape (review: it was removed with its notes)
    users = tmp_path / f"idx.building-{gone}-draft"
    users.mkdir()
    (users / "NOTES.md").write_text("my notes")
    spooled = tmp_path / f"idx.building-{gone}-7"  # an older version's build cut while it spooled (diff review)
    spooled.mkdir()
    for name in ("spool.terms.i32", "spool.tfs.f32", "spool.bucket0003.i32"):
        (spooled / name).write_bytes(b"x" * 100)
    stale.append(spooled)
    assert build(corpus, out) == 0
    assert not any(folder.exists() for folder in stale)
    assert alive.exists() and other.exists()
    assert (users / "NOTES.md").read_text() == "my notes"


def test_sigterm_during_build_removes_staging_and_keeps_the_old_index(tmp_path, corpus, monkeypatch, capsys):
    out = tmp_path / "idx"
    assert build(corpus, out) == 0
    before = (out / "meta.json").read_text()
    import ragzoo.retrieval.corpus as corpus_module

    real_iter = corpus_module.iter_corpus

    def terminated_midway(path, **kwargs):
        for position, passage in enumerate(real_iter(path, **kwargs)):
            if position == 1:
                assert leftovers(tmp_path)  # the staging folder exists while building
                os.kill(os.getpid(), signal.SIGTERM)
            yield passage

    monkeypatch.setattr(corpus_module, "iter_corpus", terminated_midway)
    handler = signal.getsignal(signal.SIGTERM)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:  # stopped cleanly, then the process ends as on SIGTERM
        build(corpus, out, "--rebuild")
    assert stopped.value.code == 128 + signal.SIGTERM
    from ragzoo.commands.index import INTERRUPTED

    assert capsys.readouterr().err == f"ragzoo index: stopped (SIGTERM); {INTERRUPTED}\n"
    assert leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is handler  # the build's handler is gone again
    assert (out / "meta.json").read_text() == before


def test_build_releases_the_pages_of_its_memory_maps(tmp_path):
    """The streaming build writes its score matrix through memory maps; their pages are unmapped after each
    step (still in the page cache, no longer in the process's RSS), so peak RSS stays well under the index size
    (5.7 GB peak at 5.2M passages without it)."""
    import numpy as np
    import psutil

    from ragzoo.retrieval.bm25 import _release_pages

    array = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(16 * 2**20,))
    process = psutil.Process()
    before = process.memory_info().rss
    array[:] = 1.0  # 64 MB of pages, all resident now
    touched = process.memory_info().rss
    assert touched - before > 48 * 2**20
    array.flush()
    _release_pages(array)
    assert touched - process.memory_info().rss > 48 * 2**20
    assert float(array[::4096].sum()) == 4096.0  # the data is intact: mapped back in from the page cache


@pytest.mark.parametrize("extra, says", [
    (("--backend", "dense", "--format", "packed"), "--format applies to --backend bm25 only, not dense"),
    (("--model", "some/model"), "--model applies to --backend dense only, not bm25"),
    (("--checkpoint", "/nonexistent"), "--checkpoint applies to --backend colbert only, not bm25"),
])
def test_a_flag_the_backend_does_not_read_is_refused(tmp_path, corpus, capsys, extra, says):
    """Review: `--backend dense --format packed` built a dense index, and bm25 dropped --model, without a word."""
    assert build(corpus, tmp_path / "idx", *extra) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "idx").exists()


def test_a_staging_folder_whose_lock_is_held_is_left_alone_whatever_its_pid(tmp_path, corpus):
    """A build in another PID namespace (a second container sharing the folder): its PID is not a process here,
    but the lock it holds on its staging folder is (review: such a live build's folder was removed, and the
    build failed after all its work). Once the holder is gone, the folder is stale and goes."""
    out = tmp_path / "idx"
    staging = tmp_path / f".idx.building-{dead_pid()}-5-jkl"
    staging.mkdir()
    with held_elsewhere(staging):
        assert build(corpus, out) == 0
        assert staging.exists()
    assert build(corpus, out, "--rebuild") == 0
    assert not staging.exists()


def test_a_build_holds_its_staging_folder_until_it_is_published(tmp_path, corpus, monkeypatch):
    from ragzoo import files, ownership

    seen, folders = [], []
    real_publish = ownership.replace_dir

    def publish(staging, final, keep=()):
        seen.append(files.in_use(staging))  # asked from here, as any other process would
        folders.append(str(staging))
        return real_publish(staging, final, keep)

    monkeypatch.setattr(ownership, "replace_dir", publish)
    assert build(corpus, tmp_path / "idx") == 0
    assert seen == [True] and folders and not set(folders) & set(files._HELD), files._HELD  # let go once published


def test_a_failed_build_leaves_no_folder_it_made_to_hold_the_index(tmp_path, corpus, capsys):
    """Review: `--out new/deep/idx` over a corpus with a bad line failed in one line but left new/ and new/deep/."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "p1", "text": "fine"}) + "\n{not json\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    for out in (tmp_path / "new" / "deep" / "idx", tmp_path / "mine" / "deeper" / "idx"):
        assert main(["index", "build", "--corpus", str(bad), "--out", str(out)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and not (tmp_path / "mine" / "deeper").exists()
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"  # a folder that was there stays
    assert main(["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "new" / "deep" / "idx")]) == 0
    assert (tmp_path / "new" / "deep" / "idx" / "meta.json").is_file()  # a published build keeps its folders
