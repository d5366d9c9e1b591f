"""The tests' loopback HTTP stand-in (`ragzoo.testing.LoopbackHTTPServer`): a client that drops its connection is
no error on stderr (CI once read a one-line refusal as 20 lines: socketserver's traceback for a reset connection
had landed in the captured output); a handler that fails is still shown."""

from __future__ import annotations

import socket
import struct
import time
from http.server import BaseHTTPRequestHandler

from ragzoo.testing import LoopbackHTTPServer


class _Fails(BaseHTTPRequestHandler):
    def do_GET(self):
        raise ValueError("the handler's own mistake")

    def log_message(self, *args):
        pass


def _reset(port: int) -> None:
    """Connect, then close with a reset (SO_LINGER 0), as a client giving up on a download does."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # an unfinished request: the server is reading it
        time.sleep(0.1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_dropped_connection_is_quiet_and_a_failing_handler_is_not(capfd):
    with LoopbackHTTPServer(_Fails) as server:
        port = server.httpd.server_address[1]
        _reset(port)
        time.sleep(0.3)
        assert "ConnectionResetError" not in capfd.readouterr().err
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            sock.recv(1024)
        time.sleep(0.3)
    assert "the handler's own mistake" in capfd.readouterr().err
