"""`ragzoo serve --program ... --workers N` with light workers, for tests of how the workers start and stop.

`python serve_workers_helper.py PORT WORKERS` runs the real command (`ragzoo.cli.main`: flags, listening sockets,
the parent that supervises the workers, the exit status), with two stand-ins: the parent builds no program, and each
worker serves a tiny ASGI app (GET -> {"worker": pid}) instead of loading DSPy, through the same
`ragzoo.commands.serve._run_worker` as a program worker. FAKE_WORKER_LOAD_SECONDS makes each worker take that long
to "load its program" first, FAKE_PARENT_LOAD_SECONDS the parent (before any socket is served; with `--workers 1`
the only process, and then it never serves: the tests stop it while it loads), FAKE_WORKER_SAYS what each worker
prints on stderr as it loads. `WORKERS` "retriever": `ragzoo serve
--retriever` instead, its index load as slow.)"""

from __future__ import annotations

import json
import os
import sys
import time


class LightService:
    """What a program worker's service does on a stop: `cut()` (on the event loop, once the grace is over or a second
    signal came) answers every question still waiting 503, as `ProgramService.cut` does; `GET /hang` is such a
    question (a hung LM)."""

    def __init__(self):
        import asyncio

        self.cutting = asyncio.Event()

    def cut(self) -> None:
        self.cutting.set()

    def close(self) -> int:
        return 0


SERVICE = None


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    status, answer = 200, {"worker": os.getpid()}
    if scope.get("path") == "/hang":
        await SERVICE.cutting.wait()
        status, answer = 503, {"message": "the server is shutting down", "worker": os.getpid()}
    body = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def light_worker(options: dict, sock, workers: int) -> None:
    from ragzoo.commands.serve import _run_worker

    def make_service():
        global SERVICE
        time.sleep(float(os.environ.get("FAKE_WORKER_LOAD_SECONDS", "0")))  # loading a program
        if os.environ.get("FAKE_WORKER_SAYS"):  # what a program's load may print (a retriever URL, an LM's error)
            print(os.environ["FAKE_WORKER_SAYS"], file=sys.stderr, flush=True)
        SERVICE = LightService()
        return SERVICE, app

    _run_worker(make_service, sock, options["host"], options["port"])


def light_service(args):
    seconds = float(os.environ.get("FAKE_PARENT_LOAD_SECONDS", "0"))
    if seconds:  # the parent's own program load (every --workers, 1 included), long enough to be stopped in
        print("helper: loading the program", file=sys.stderr, flush=True)
        time.sleep(seconds)
    return None, "ragzoo-light", "light", 120.0, 120.0


def main() -> int:
    import ragzoo.commands.serve as serve
    from ragzoo.cli import main as cli

    serve._program_service = light_service
    serve._program_worker = light_worker
    port, workers = sys.argv[1], sys.argv[2]
    if workers == "retriever":  # `ragzoo serve --retriever`, whose index takes FAKE_PARENT_LOAD_SECONDS to load
        import ragzoo.retrieval.specs as specs

        def slow_retriever(spec, **options):
            light_service(None)
            raise SystemExit("helper: the index was never meant to finish loading")

        specs.make_retriever = slow_retriever
        return cli(["serve", "--retriever", "bm25:slow", "--port", port])
    return cli(["serve", "--program", "light", "--lm", "dry-run", "--port", port, "--workers", workers])


if __name__ == "__main__":
    sys.exit(main())
