"""Small helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str | Path | None, data) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 120, poll: float = 0.1) -> float:
    """Seconds until the server at `url` answers 200 on `/health` (a RuntimeError if its process exits or
    `seconds` pass first)."""
    import httpx

    started = time.monotonic()
    while True:
        try:
            if httpx.get(url.rstrip("/") + "/health", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() - started > seconds:
            raise RuntimeError(f"the server at {url} did not come up")
        time.sleep(poll)
