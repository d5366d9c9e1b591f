"""The ColBERTv2-compatible retrieval server at its HTTP edges (issue 20): an ambiguous or broken frame is a 400
and the connection closes, so a request smuggled behind it is never answered; a query that is not valid text (a
lone surrogate, invalid UTF-8 percent-escapes) is a 400 naming the field, GET and POST. Raw sockets on loopback."""

from __future__ import annotations

import httpx
import pytest

from ragzoo.retrieval.server import BackgroundServer, create_app
from ragzoo.testing import StaticRetriever, make_passages


@pytest.fixture(scope="module")
def server():
    with BackgroundServer(create_app(StaticRetriever(make_passages(5)))) as running:
        yield running


BODY = b'{"query": "doc", "k": 1}'
SMUGGLED = b"GET /?query=doc&k=1 HTTP/1.1\r\nHost: x\r\n\r\n"
FRAMES = {
    "content-length and transfer-encoding": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                                             b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                                             % (len(BODY), len(BODY), BODY)),
    "transfer-encoding and content-length": (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                             b"Content-Length: 4\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)),
    "two content-lengths": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: 3\r\n\r\n%s"
                           % (len(BODY), BODY),
    "a bad chunk size": b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
}


@pytest.mark.parametrize("frame", sorted(FRAMES))
def test_a_framing_error_is_a_json_400_and_the_request_behind_it_is_never_answered(server, frame, raw_exchange):
    data, closed = raw_exchange(server.url, FRAMES[frame] + SMUGGLED)
    assert data.startswith(b"HTTP/1.1 400"), data[:300]
    assert closed, "the connection stayed open after a framing error"
    assert data.count(b"HTTP/1.1 ") == 1, data  # one answer: the smuggled request got none
    assert b'"error":true' in data and b"topk" not in data


def test_a_well_framed_keep_alive_connection_still_answers_both_requests(server, raw_exchange):
    plain = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    data, closed = raw_exchange(server.url, plain + SMUGGLED, wait=1.0)
    assert data.count(b"HTTP/1.1 200") == 2 and not closed


def test_a_lone_surrogate_in_the_query_is_a_400_naming_the_field(server):
    posted = httpx.post(server.url + "/", content=b'{"query": "\\ud800", "k": 1}')
    assert posted.status_code == 400, posted.text
    assert "'query'" in posted.json()["message"] and posted.json()["error"] is True
    for encoded in ("%ED%A0%80", "%FF%FE", "doc%C3"):  # a UTF-8-encoded surrogate, bytes that are not UTF-8
        got = httpx.get(server.url + "/?query=" + encoded + "&k=1")
        assert got.status_code == 400, (encoded, got.text)
        assert "'query'" in got.json()["message"]
    assert httpx.get(server.url + "/", params={"query": "doc é", "k": 1}).status_code == 200
