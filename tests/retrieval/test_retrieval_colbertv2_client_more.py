"""Every error of the ColBERTv2 client names its server as `secrets.strip_url` shows it, whatever the way the request
failed (refused, retried out, too long, unreachable, a wrong answer): the message itself, as a Python caller gets it
(no CLI redaction in between), holds neither the URL's userinfo nor its token."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragzoo.errors import RetrieverError
from ragzoo.retrieval.colbertv2 import ColBERTv2Client

USER, PASSWORD, TOKEN = "reader", "s3cretPassQ7", "tok3nValueZ9"

ANSWERS = {  # path -> (status, body)
    "/refused": (400, {"message": "bad query"}),
    "/down": (503, {"message": "overloaded"}),
    "/urltoolong": (414, {"message": "URI too long"}),
    "/toolarge": (413, {"message": "payload too large"}),
    "/noschema": (200, {"results": []}),
    "/badrow": (200, {"topk": [{"score": 1}]}),
    "/badscore": (200, {"topk": [{"text": "a | b", "score": "high"}]}),
    "/errorpayload": (200, {"error": True, "message": "Index not loaded"}),
    "/malformed": (200, None),
    "/echoauth": (401, "the request's Authorization header"),  # a server that echoes what it was sent
    "/echopayload": (200, "an error payload quoting the request's Authorization header"),
    "/echomalformed": (200, "a page that is not JSON, quoting the request's Authorization header"),
}
SEEN: list[str] = []  # the paths (with their query strings) the server was asked


class _Answers(BaseHTTPRequestHandler):
    def do_GET(self):
        SEEN.append(self.path)
        status, body = ANSWERS.get(self.path.partition("?")[0], (200, {"topk": []}))
        said = f"for {self.headers.get('Authorization')} and {PASSWORD}"
        if self.path.startswith("/echoauth"):
            body = {"message": f"denied: {self.headers.get('Authorization')}"}
        elif self.path.startswith("/echopayload"):
            body = {"error": True, "message": f"index not loaded {said}"}
        data = b"<html>oops</html>" if body is None else json.dumps(body).encode()
        if self.path.startswith("/echomalformed"):
            data, body = f"<html>{said}</html>".encode(), None
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if body is None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _error(port: int, path: str, query: str = "q") -> str:
    client = ColBERTv2Client(f"http://{USER}:{PASSWORD}@127.0.0.1:{port}{path}?token={TOKEN}", retries=0,
                             backoff=0.0, timeout=5)
    with pytest.raises(RetrieverError) as caught:
        client(query, 2)
    return str(caught.value)


@pytest.mark.parametrize("path", sorted(ANSWERS))
def test_every_error_names_the_server_without_its_credentials(server, path):
    message = _error(server, path, "q " * 600 if "too" in path else "q")
    assert f"ColBERTv2 server http://127.0.0.1:{server}{path}" in message, message  # still says which server
    assert USER not in message and PASSWORD not in message and TOKEN not in message, message
    if path == "/echoauth":  # the credentials as Basic auth sent them (base64), echoed back: hidden too
        import base64

        assert base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode() not in message, message
        assert "denied: Basic ***" in message, message


def test_an_unreachable_server_is_named_without_its_credentials():
    port = _free_port()
    message = _error(port, "/api")
    assert f"http://127.0.0.1:{port}/api" in message, message
    assert USER not in message and PASSWORD not in message and TOKEN not in message, message


@pytest.mark.parametrize("url", ["htp://{user}:{password}@127.0.0.1:8893/api",  # a misspelt scheme
                                 "{user}:{password}@127.0.0.1:8893/api"])  # the scheme forgotten
def test_a_refused_url_is_named_without_its_credentials(url):
    from ragzoo.retrieval import make_retriever

    url = url.format(user=USER, password=PASSWORD)
    for build in (lambda: ColBERTv2Client(url), lambda: make_retriever(f"colbertv2:{url}")):
        with pytest.raises(RetrieverError, match="must start with http:// or https://") as caught:
            build()
        message = str(caught.value)
        assert "127.0.0.1:8893/api" in message, message  # still says what was given
        assert USER not in message and PASSWORD not in message, message


def test_a_get_keeps_the_urls_own_parameters(server):
    """Review: httpx's `params=` replaced the URL's query string, so `?index=...` (or a key) never reached the
    server on a GET; a POST kept it."""
    client = ColBERTv2Client(f"http://127.0.0.1:{server}/search?index=wiki17&apikey=abc", retries=0, timeout=5)
    SEEN.clear()
    client("who wrote it?", 3)
    from urllib.parse import parse_qs, urlsplit

    assert len(SEEN) == 1 and urlsplit(SEEN[0]).path == "/search"
    assert parse_qs(urlsplit(SEEN[0]).query) == {"index": ["wiki17"], "apikey": ["abc"], "query": ["who wrote it?"],
                                                 "k": ["3"]}


@pytest.mark.parametrize("url", ["http://127.0.0.1:18866x/", "http://[::1/"])
def test_a_url_that_cannot_be_parsed_is_one_line_at_once(url, capsys):
    from ragzoo.cli import main

    with pytest.raises(RetrieverError, match="not a valid URL"):
        ColBERTv2Client(url)
    assert main(["search", "--retriever", f"colbertv2:{url}", "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a valid URL" in err and len(err.splitlines()) == 1 and "internal error" not in err
