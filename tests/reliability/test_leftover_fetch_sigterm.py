"""A SIGTERM (a scheduler's stop, `kill`, a container shutting down) during `ragzoo corpus fetch`, mid-download:
the command stops promptly (status 143, as `index build` under SIGTERM), with no traceback, and leaves nothing a
later run (or `index build --corpus`) would take for a complete corpus, nor an orphaned partial download in the
hub cache; the next fetch completes and verifies the sha256. (huggingface_hub 1.x downloads each file into a
temporary file of its own process and removes it when stopped, so a single archive starts over; a corpus of
several files resumes at the first file not finished: test_fetch_wiki18.py.) The hub is a loopback stand-in that
serves a third of the archive, then holds the connection open (test_retrieval_fetch.FakeHub's `stall_at`)."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tests.retrieval.test_retrieval_fetch import FakeHub


def _archive(rows: int = 3000) -> bytes:
    """wiki17's layout, with text that gzip cannot shrink much (so the archive is long enough to stop midway)."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    lines = [json.dumps({"title": f"Title {row}", "text": [" ".join(rng.choices(words, k=30))]}) for row in range(rows)]
    payload = ("\n".join(lines) + "\n").encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("wiki.abstracts.2017.jsonl")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _hub(content: bytes, stall_at: int | None) -> FakeHub:
    """The fetch tests' loopback hub serving `content`; with `stall_at`, a GET sends that many bytes and holds on."""
    hub = FakeHub(content)
    hub.stall_at = stall_at
    return hub


def _env(tmp_path: Path, hub: FakeHub) -> dict:
    env = {name: value for name, value in os.environ.items() if "proxy" not in name.lower()}
    env.update(HF_HUB_OFFLINE="0", HF_HUB_CACHE=str(tmp_path / "hub"), RAGZOO_CORPORA=str(tmp_path / "corpora"),
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_ENDPOINT=hub.base_url)
    return env


def _fetch(env: dict) -> list[str]:
    return [sys.executable, "-m", "ragzoo.cli", "corpus", "fetch", "wiki17-abstracts", "--quiet"]


def test_sigterm_mid_download_stops_promptly_leaves_nothing_and_the_next_fetch_verifies(tmp_path):
    from ragzoo.retrieval import fetch

    content = _archive()
    assert len(content) > 200_000
    target = tmp_path / "corpora" / "wiki17-abstracts" / "wiki.abstracts.2017.jsonl"
    with _hub(content, stall_at=len(content) // 3) as hub:
        env = _env(tmp_path, hub)
        process = subprocess.Popen(_fetch(env), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert hub.stalled.wait(30), "the fetch never reached the download"
            time.sleep(0.2)  # the third that was sent is in the client's file
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=10)
            stopped_after = time.monotonic() - sent
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 128 + signal.SIGTERM and stopped_after < 5, (process.returncode, stopped_after)
    assert "Traceback" not in err and out == "", err
    # one line says the fetch stopped and what a rerun does (as Ctrl-C's line does, from the one SIGTERM helper)
    said = [line for line in err.splitlines() if "stopped" in line]
    assert len(said) == 1 and said[0].startswith("ragzoo corpus: stopped (SIGTERM); "), err
    assert "kept" in said[0] and "starts over" in said[0], said
    # nothing a later run would take for complete: no corpus, no archive in the hub cache's snapshot, and no
    # partial file left behind in either (the stop unwound: the hub client's and ragzoo's cleanups ran)
    assert not fetch.is_complete(target) and not target.exists()
    assert list((tmp_path / "hub").rglob("snapshots/*/wiki.abstracts.2017.tar.gz")) == []
    assert list((tmp_path / "hub").rglob("*.incomplete")) == []
    assert not any(tmp_path.joinpath("corpora").rglob(f"*{fetch.PARTIAL_MARK}*"))

    with _hub(content, stall_at=None) as hub:
        env = _env(tmp_path, hub)
        done = subprocess.run(_fetch(env), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert fetch.is_complete(target) and fetch.verification(target) == "hub"
    with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as tar:
        expected = tar.extractfile("wiki.abstracts.2017.jsonl").read().count(b"\n")
    assert target.read_bytes().count(b"\n") == expected


def _killed_midway(tmp_path: Path, content: bytes) -> list[Path]:
    """A fetch killed outright (SIGKILL, the OOM killer, a power cut) mid-download: no cleanup ran."""
    with _hub(content, stall_at=len(content) // 3) as hub:
        env = _env(tmp_path, hub)
        process = subprocess.Popen(_fetch(env), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert hub.stalled.wait(30), "the fetch never reached the download"
            time.sleep(0.2)
        finally:
            process.kill()
            process.wait(10)
    return list((tmp_path / "hub").rglob("*.incomplete"))


def test_the_temporary_file_of_a_killed_download_is_removed_by_the_next_fetch(tmp_path):
    """huggingface_hub 1.x downloads into `<etag>.<random>.incomplete`, a name no later run reuses: the one a killed
    fetch left (as large as what had come) would stay in the hub cache for good."""
    from ragzoo.retrieval import fetch

    content = _archive()
    assert len(_killed_midway(tmp_path, content)) == 1
    with _hub(content, stall_at=None) as hub:
        env = _env(tmp_path, hub)
        done = subprocess.run(_fetch(env), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert fetch.is_complete(tmp_path / "corpora" / "wiki17-abstracts" / "wiki.abstracts.2017.jsonl")
    assert list((tmp_path / "hub").rglob("*.incomplete")) == []


def test_the_temporary_file_of_a_download_still_running_is_kept(tmp_path):
    """A download of the same file in progress elsewhere holds the hub client's lock for it: its file stays."""
    from filelock import FileLock

    content = _archive()
    with _hub(content, stall_at=None) as hub:  # a complete fetch, then another while a download runs
        env = _env(tmp_path, hub)
        assert subprocess.run(_fetch(env), env=env, capture_output=True, timeout=60).returncode == 0
        (blob,) = [path for path in (tmp_path / "hub").rglob("blobs/*") if path.is_file()]
        running = blob.with_name(blob.name + ".0badcafe.incomplete")
        running.write_bytes(b"part of a download in progress")
        with FileLock(tmp_path / "hub" / ".locks" / "models--dspy--cache" / f"{blob.name}.lock"):
            done = subprocess.run([*_fetch(env), "--force"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert running.read_bytes() == b"part of a download in progress"
    # (without the lock held, the same file is an orphan: removed)
    from ragzoo.retrieval.fetch import _drop_orphaned_downloads

    (pointer,) = (tmp_path / "hub").rglob("snapshots/*/wiki.abstracts.2017.tar.gz")
    assert _drop_orphaned_downloads(pointer) == [running] and not running.exists()


def test_sigterm_stops_any_command_as_ctrl_c_does_with_one_line_and_status_143(capsys, monkeypatch):
    """The CLI's one SIGTERM rule (`cli._sigterm_as_interrupt`): while a command runs, SIGTERM raises `Terminated`,
    a KeyboardInterrupt, so the command's Ctrl-C path runs (evaluate, compile and sweep exited silently, status 143,
    found by review), said in one line with what was kept; the handler is put back. A command that handles SIGTERM
    its own way (serve) and one running under a handler already on (a grid's cell) are left alone. The process then
    ends (SystemExit 143), for a library caller too: SIGTERM still stops a program that called ragzoo (found by
    review: a script's next evaluation ran on)."""
    import sys
    import types

    import pytest

    from ragzoo import cli

    seen = {}

    def stopped_midway(args):
        seen["handler"] = signal.getsignal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the command")

    fake = types.ModuleType("fake_cmd")
    fake.add_arguments = lambda parser: None
    fake.run = stopped_midway
    fake.INTERRUPTED = "every question that finished is kept"
    monkeypatch.setitem(sys.modules, "fake_cmd", fake)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_cmd", "a fake command"))
    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:
        pytest.skip("a SIGTERM handler is on in this process already")
    with pytest.raises(SystemExit) as ended:  # the process ends, as SIGTERM's default would have, once stopped
        cli.main(["fake"])
    assert ended.value.code == 143
    assert capsys.readouterr().err == "ragzoo fake: stopped (SIGTERM); every question that finished is kept\n"
    from ragzoo.errors import raise_terminated

    assert seen["handler"] is raise_terminated and signal.getsignal(signal.SIGTERM) is before
    fake.run = lambda args: seen.update(handler=signal.getsignal(signal.SIGTERM))
    fake.HANDLES_SIGTERM = True
    assert cli.main(["fake"]) == 0 and seen["handler"] is before
    del fake.HANDLES_SIGTERM
    grid_handler = lambda signum, frame: None  # noqa: E731 - a handler already on, as a grid's
    signal.signal(signal.SIGTERM, grid_handler)
    try:
        assert cli.main(["fake"]) == 0 and seen["handler"] is grid_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_script_calling_the_cli_ends_on_sigterm_after_the_command_stopped(tmp_path):
    """`cli.main([...])` from a script: SIGTERM stops the command cleanly, then ends the script with status 143;
    the script's next call never runs."""
    import subprocess
    import sys

    script = tmp_path / "two_runs.py"
    script.write_text(
        "import os, signal, sys, time, types\n"
        "from ragzoo import cli\n"
        "fake = types.ModuleType('fake_cmd')\n"
        "fake.add_arguments = lambda parser: None\n"
        "def run(args):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "fake.run = run\n"
        "sys.modules['fake_cmd'] = fake\n"
        "cli.COMMANDS['fake'] = ('fake_cmd', 'a fake command')\n"
        "cli.main(['fake'])\n"
        "print('the second call ran')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and "the second call ran" not in done.stdout, (done.returncode, done.stdout)
    assert done.stderr == "ragzoo fake: stopped (SIGTERM); nothing was written\n", done.stderr

