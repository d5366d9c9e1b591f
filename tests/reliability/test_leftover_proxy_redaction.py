"""A proxy given without its scheme (`HTTPS_PROXY=user:secret@proxy.local:3128`, `http_proxy=alice:pw@10.0.0.1:8080`:
what curl, requests and httpx accept) holds credentials as much as `http://user:secret@...` does: they never reach
what the user sees. Through the CLI: a proxy that refuses the hub client's request and echoes the credentials it
was sent (as a careless proxy's error page does) gets them printed as `***` by `ragzoo corpus fetch`."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest

from ragzoo.testing import LoopbackHTTPServer


class EchoingProxy(BaseHTTPRequestHandler):
    """Answers every proxied request 407, its message repeating the Proxy-Authorization it got, decoded."""

    seen: list[str] = []

    def log_message(self, *args):
        pass

    def _refuse(self):
        sent = self.headers.get("Proxy-Authorization") or ""
        credentials = base64.b64decode(sent.removeprefix("Basic ")).decode() if sent else "(none)"
        EchoingProxy.seen.append(credentials)
        message = f"proxy refused credentials {credentials} for {self.path}"
        self.send_response(407)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(message)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(message.encode())

    do_HEAD = do_GET = _refuse


@pytest.mark.parametrize("variable, userinfo, hidden", [
    ("HTTP_PROXY", "proxyuser:s3cretPassQ7", ["s3cretPassQ7"]),  # the brief's form, a real-length password
    ("http_proxy", "alice:pw", ["alice:pw"]),  # a short password: hidden as the pair, not "pw" everywhere
    ("HTTP_PROXY", "tok3nAsUserZ9xQ", ["tok3nAsUserZ9xQ"]),  # a token given as the user name, no password
])
def test_a_scheme_less_proxy_s_credentials_never_reach_the_error_line(tmp_path, variable, userinfo, hidden):
    EchoingProxy.seen = []
    with LoopbackHTTPServer(EchoingProxy) as proxy:
        env = {name: value for name, value in os.environ.items() if "proxy" not in name.lower()}
        env.update(HF_HUB_OFFLINE="0", HF_HUB_CACHE=str(tmp_path / "hub"), RAGZOO_CORPORA=str(tmp_path / "corpora"),
                   HF_HUB_DISABLE_PROGRESS_BARS="1", HF_ENDPOINT="http://hub-mirror.internal")
        env[variable] = f"{userinfo}@{proxy.base_url.removeprefix('http://')}"
        done = subprocess.run([sys.executable, "-m", "ragzoo.cli", "corpus", "fetch", "wiki18-100w", "--quiet"],
                              env=env, capture_output=True, text=True, timeout=60)
    assert EchoingProxy.seen and userinfo in EchoingProxy.seen[-1]  # the proxy got them, so its echo held them
    assert done.returncode != 0 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ragzoo corpus: error:")]
    assert "proxy refused credentials" in line and "hub-mirror.internal" in line  # the rest of the line is kept
    assert not any(secret in done.stdout + done.stderr for secret in hidden), line


def test_a_scheme_less_proxy_url_echoed_in_a_message_keeps_its_host_not_its_userinfo(monkeypatch):
    from ragzoo.secrets import redact, scrub

    for name in list(os.environ):
        if "proxy" in name.lower():
            monkeypatch.delenv(name)
    monkeypatch.setenv("http_proxy", "al:pw@10.0.0.1:8080")  # shorter than any value hidden wherever it is
    shown = redact("ProxyError: cannot connect to proxy 'al:pw@10.0.0.1:8080' (http://al:pw@10.0.0.1:8080)")
    assert "pw" not in shown and shown.count("***@10.0.0.1:8080") == 2, shown
    assert scrub({"error": "via al:pw@10.0.0.1:8080"}) == {"error": "via ***@10.0.0.1:8080"}
    ordinary = "the pwd of al:pw1@example, of sal:pw@x, and al:pw alone"  # the same letters elsewhere are kept
    assert redact(ordinary) == ordinary


def test_an_endpoint_given_on_the_command_line_has_its_short_userinfo_hidden_too(monkeypatch, cli, tmp_path):
    """An --api-base (or a --config file's api_base) with credentials too short to be hidden as values of their
    own (`http://al:pw@host`) is hidden where a URL holds it, as an endpoint variable's is: register_url, the one
    place every command registers an endpoint through, records its userinfo."""
    from ragzoo import secrets

    for name in list(os.environ):
        if "proxy" in name.lower():
            monkeypatch.delenv(name)
    monkeypatch.setattr(secrets, "_registered_userinfos", set())
    result = cli("evaluate", "--method", "rag", "--lm", "openai/stub", "--api-base", "http://al:pw@127.0.0.1:9/v1",
                 "--dataset", "no-such-dataset", "-n", "1", "--out", tmp_path / "run")
    # refused as the options resolve (the key belongs in the environment), its credentials registered first
    assert result.code == 2 and "the --api-base URL carries credentials" in result.err, result.err
    shown = secrets.redact("POST http://al:pw@127.0.0.1:9/v1/chat/completions: connection refused")
    assert shown == "POST http://***@127.0.0.1:9/v1/chat/completions: connection refused", shown
    ordinary = "the pwd of sal:pw@x, and al:pw alone"
    assert secrets.redact(ordinary) == ordinary
