"""A lean HTTP/1.1 load generator for loopback benchmarks: raw asyncio streams, one keep-alive connection per
client, a fixed number of requests, latency per request. httpx's async client spends several times the CPU
of the server it measures (on 2 shared cores the client, not the server, sets the ceiling); this one spends
~50 us per request, so the numbers describe the server.

    latencies, statuses = asyncio.run(run_load("127.0.0.1", port, requests, clients))
"""

from __future__ import annotations

import asyncio
import time
from typing import Sequence
from urllib.parse import urlencode


def get_request(path: str, params: dict) -> bytes:
    return f"GET {path}?{urlencode(params)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def post_request(path: str, body: bytes, headers: dict | None = None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run_load(host: str, port: int, requests: Sequence[bytes], clients: int,
                   timeout: float = 60.0, bodies: list[bytes] | None = None) -> tuple[list[float], list[int]]:
    """Send `requests` (round-robin over `clients` keep-alive connections); return latencies and statuses.
    With a list as `bodies`, the reply bodies are appended to it (in completion order)."""
    latencies: list[float] = []
    statuses: list[int] = []
    cursor = iter(range(len(requests)))

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for index in cursor:
                started = time.perf_counter()
                writer.write(requests[index])
                try:
                    status, reply = await asyncio.wait_for(_read_response(reader), timeout)
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                    status, reply = 0, b""
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                latencies.append(time.perf_counter() - started)
                statuses.append(status)
                if bodies is not None:
                    bodies.append(reply)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, statuses
