"""Endpoints a command names in its output (the hub a corpus comes from, a ColBERTv2 server) are shown through
`secrets.strip_url`: a mirror's or server's userinfo and the environment's HF_TOKEN never reach stdout, stderr or
any file written. Through the CLI, in a subprocess (the process's own streams, not a captured copy)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

PASSWORD = "s3cretPassQ7"
TOKEN = "hf_" + "SeCr3t" * 6


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cli(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "RAGZOO_CACHE": str(tmp_path / "cache"), "HF_HUB_CACHE": str(tmp_path / "hub"),
               "HF_TOKEN": TOKEN, **env}
    environ.pop("RAGZOO_CORPORA", None)
    return subprocess.run([sys.executable, "-m", "ragzoo.cli", *args], env=environ, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)


def _files_hold(root: Path, *secrets: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and any(secret.encode() in path.read_bytes() for secret in secrets):
            found.append(str(path))
    return found


@pytest.mark.parametrize("args", [["corpus", "list"], ["corpus", "fetch", "--list"]])
def test_the_corpus_listing_names_the_mirror_without_its_credentials(tmp_path, args):
    port = _free_port()
    done = _cli(args, tmp_path, HF_ENDPOINT=f"https://reader:{PASSWORD}@127.0.0.1:{port}")
    assert done.returncode == 0, done.stderr
    hubs = [line for line in done.stdout.splitlines() if line.strip().startswith("hub:")]
    assert hubs and all(line.endswith(f"at https://127.0.0.1:{port}") for line in hubs), done.stdout
    output = done.stdout + done.stderr
    assert PASSWORD not in output and TOKEN not in output and "reader" not in output
    assert not _files_hold(tmp_path, PASSWORD, TOKEN)


def test_the_corpus_listing_names_the_hub_when_no_mirror_is_set(tmp_path):
    environ = {key: value for key, value in os.environ.items() if key != "HF_ENDPOINT"}
    done = subprocess.run([sys.executable, "-m", "ragzoo.cli", "corpus", "list"], env=environ, capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "hub:       facebook/wiki_dpr (dataset) at https://huggingface.co" in done.stdout


class _NotJson(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"not json"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("server", ["unreachable", "malformed"])
def test_a_colbertv2_servers_credentials_never_reach_the_error_line(tmp_path, server):
    httpd = None
    if server == "malformed":
        httpd = HTTPServer(("127.0.0.1", 0), _NotJson)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
    else:
        port = _free_port()
    try:
        done = _cli(["search", "who", "--retriever", f"colbertv2:http://reader:{PASSWORD}@127.0.0.1:{port}/api"],
                    tmp_path)
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ragzoo search: error:")]
    assert f"ColBERTv2 server http://127.0.0.1:{port}/api " in line  # still says which server
    assert PASSWORD not in done.stdout + done.stderr and "reader" not in done.stdout + done.stderr


def test_serve_names_the_colbertv2_server_it_relays_without_its_credentials(tmp_path):
    import signal
    import time

    port, upstream = _free_port(), _free_port()
    environ = {**os.environ, "RAGZOO_CACHE": str(tmp_path / "cache"), "HF_TOKEN": TOKEN}
    process = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--port", str(port), "--retriever",
                                f"colbertv2:http://reader:{PASSWORD}@127.0.0.1:{upstream}/api"], env=environ,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "serving" not in line and process.poll() is None and time.monotonic() < deadline:
            line = process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert line.startswith(f"serving colbertv2:http://127.0.0.1:{upstream}/api on http://127.0.0.1:{port}/"), line
    assert PASSWORD not in line + out + err and "reader" not in line + out + err


@pytest.mark.parametrize("spec", ["http://reader:{password}@127.0.0.1:{port}/api",  # the prefix forgotten
                                  "colbert2:http://reader:{password}@127.0.0.1:{port}/api"])  # a misspelt one
def test_a_refused_retriever_spec_is_named_without_the_urls_credentials(tmp_path, spec):
    port = _free_port()
    done = _cli(["search", "who", "--retriever", spec.format(password=PASSWORD, port=port)], tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ragzoo search: error:")]
    assert f"127.0.0.1:{port}/api" in line  # still says which spec
    assert PASSWORD not in done.stdout + done.stderr and "reader" not in done.stdout + done.stderr
