"""`ragzoo serve --retriever SPEC [--host 127.0.0.1] [--port 8893] [--max-query-chars N]`: the ColBERTv2
REST API (see `ragzoo.retrieval.server` for the routes and bounds).

`ragzoo serve --program DIR --lm SPEC [--api-base URL] [--deadline S] [--timeout S] [--workers N]`: a compiled
program behind `POST /ask` and an OpenAI-compatible `/v1/chat/completions` (see `ragzoo.serving`). Keys come from
the environment only. `--workers N` (N > 1): this process opens N listening sockets on the port (SO_REUSEPORT)
and starts N spawned worker processes that each load the program and serve one of them, so one machine's cores
serve one program. The kernel spreads new connections over the sockets by their addresses; with one shared
socket, asyncio accepts a whole burst of connections in the first process to wake, and a keep-alive client
stays where it landed; every bound (`--max-concurrency`, `--max-queue`, the LM's
endpoint limit) is per worker. Spawned, not forked: the parent has loaded DSPy, LiteLLM and their threads, and a
fork would copy their locks mid-use. Stopping: SIGTERM to the parent stops every worker (exit 0), Ctrl-C too (exit
130; the workers ignore the terminal's SIGINT and are stopped by the parent), a worker that dies stops the others
(exit 1), and a worker whose parent is gone (killed outright) shuts itself down, so no process keeps the port.
One process (`--workers 1`, the `--retriever` server) stops alike: SIGTERM exits 0, Ctrl-C 130, once the answers in
flight are finished (at most WORKER_GRACE seconds, or until a second signal; a program's questions still running are then answered 503).
A stop before the server is up (the program or index still loading) exits alike: SIGTERM 0, Ctrl-C 130."""

from __future__ import annotations

import argparse

from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

HANDLES_SIGTERM = True  # its own way (exit 0, the answers in flight finished): the CLI's SIGTERM handler stays off


_PROGRAM_FLAGS: dict[str, tuple[str, object]] = {}  # dest -> (flag, default) of the options that serve a program


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.commands.common import add_budget_args
    from ragzoo.retrieval.base import MAX_K
    from ragzoo.retrieval.server import DEFAULT_MAX_PENDING, MAX_QUERY_CHARS

    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.epilog = (f"GET <path>?query=...&k=... or POST JSON {{\"query\", \"k\"}}; k is an integer in 1..{MAX_K}. "
                     f"A query over --max-query-chars is cut where the backend would cut it anyway (colbert, "
                     f"dense: their token budget), otherwise refused with HTTP 413 naming the limit. "
                     f"With --program DIR: POST /ask {{\"question\"}} and POST /v1/chat/completions (OpenAI).")
    parser.add_argument("--retriever", default=None,
                        help="retriever spec: bm25:<corpus>, dense:<corpus>, hybrid:<corpus>, colbertv2:<url>, ...; "
                             f"default: {DEFAULT_RETRIEVER} (the shipped wiki17 abstracts sample), or with "
                             "--program the artifact's own retriever")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback: this machine only)")
    parser.add_argument("--port", type=int, default=8893, help="TCP port")
    parser.add_argument("--path", default="/", help="search route (also served at /api/search)")
    parser.add_argument("--max-query-chars", type=int, default=MAX_QUERY_CHARS, metavar="N",
                        help="longest query accepted, in characters; generous by default because programs "
                             "send long queries on purpose (BlendFilter blends the question with a generated "
                             "passage or a chain-of-thought answer)")
    parser.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING, metavar="N",
                        help="retrieval: requests answered or waiting at once; past it, 503 with Retry-After")
    program = parser.add_argument_group("serving a compiled program")
    program.add_argument("--program", default=None, help="a compiled-program directory to serve")
    program.add_argument("--lm", default=None, help="LM spec for the program (LiteLLM model, or dry-run)")
    program.add_argument("--api-base", default=None, help="URL of an OpenAI-compatible upstream LM server")
    program.add_argument("--name", default=None, help="model name the OpenAI route reports (default: ragzoo-METHOD)")
    program.add_argument("--max-concurrency", type=int, default=32, metavar="N",
                         help="questions answered at once (worker threads)")
    program.add_argument("--lm-max-concurrency", type=int, default=None, metavar="N",
                         help="LM requests in flight to the upstream endpoint (default: --max-concurrency; lower it "
                              "for a rate-limited API)")
    program.add_argument("--max-queue", type=int, default=64, metavar="N",
                         help="questions waiting beyond --max-concurrency; past it, 503 with Retry-After")
    program.add_argument("--no-cache", action="store_true", help="bypass DSPy's LM cache")
    program.add_argument("--trust-retriever", action="store_true",
                         help="follow the artifact's own retriever even when it reads outside RAGZOO_DATA or "
                              "contacts a host (see ragzoo ask --help)")
    program.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                         help="seconds a question may take, waiting included; past it the answer is 504 and its "
                              "worker is freed at once, even if the LM hangs (default 120)")
    program.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                         help="seconds per LM request, never more than --deadline (default: the deadline)")
    program.add_argument("--workers", type=int, default=1, metavar="N",
                         help="worker processes sharing the port, each with its own copy of the program (and its "
                              "own --max-concurrency, --max-queue and LM endpoint limit)")
    add_budget_args(program, scope=" per question")
    _PROGRAM_FLAGS.update({action.dest: (action.option_strings[0], action.default)
                           for action in program._group_actions if action.dest != "program"})


def run(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.config import check_numbers
    from ragzoo.errors import ConfigError

    check_numbers(vars(args))  # every numeric flag finite and in range, as evaluate's and compile's are
    if not args.path.startswith("/"):
        raise ConfigError(f"--path must start with '/', got {args.path!r}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ragzoo serve: warning: listening on {args.host}, reachable from other machines", file=sys.stderr)
    import signal
    import threading

    # Loading a program or an index can take minutes before uvicorn takes over the signals: a SIGTERM meanwhile
    # stops the command as one after start-up does (exit 0, what it opened closed on the way out), not by
    # SIGTERM's default action (status 143, no cleanup). Ctrl-C is KeyboardInterrupt already (exit 130).
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main else None
    try:
        return _serve(args)
    except _Terminated:
        print("ragzoo serve: stopped (SIGTERM) before it served; nothing was written", file=sys.stderr)
        return 0
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)


def _serve(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.errors import ConfigError

    if args.program:
        return _serve_program(args)
    given = [flag for dest, (flag, default) in _PROGRAM_FLAGS.items() if getattr(args, dest, default) != default]
    if given:  # the retrieval server reads none of them: --workers 3 had served from one process without a word
        raise ConfigError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --program DIR (a compiled "
                          f"program to serve); the retrieval server takes --retriever, --host, --port, --path, "
                          f"--max-query-chars and --max-pending")
    from ragzoo.retrieval.server import serve
    from ragzoo.retrieval.specs import make_retriever

    spec = args.retriever or DEFAULT_RETRIEVER
    _check_port_free(args.host, args.port)  # before the index loads
    retriever = make_retriever(spec)
    from ragzoo.secrets import strip_spec

    print(f"serving {strip_spec(spec)} on http://{args.host}:{args.port}{args.path} (GET ?query=&k=, POST JSON; "
          f"/health; queries up to {args.max_query_chars:,} characters)", file=sys.stderr)
    serve(retriever, host=args.host, port=args.port, path=args.path, max_query_chars=args.max_query_chars,
          max_pending=args.max_pending, grace=WORKER_GRACE)
    return 0


def _serve_program(args: argparse.Namespace) -> int:
    import sys

    # the port first: a port in use is known before the program loads
    sockets = _listening_sockets(args.host, args.port, args.workers) if args.workers > 1 else []
    if args.workers == 1:
        _check_port_free(args.host, args.port)
    try:
        service, name, method, deadline, timeout = _program_service(args)  # in the parent too: a bad setup fails here
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    print(f"serving program {method} as {name!r} on http://{args.host}:{args.port} "
          f"(POST /ask, POST /v1/chat/completions, GET /v1/models, /health; {args.max_concurrency} at once, "
          f"{args.max_queue} waiting{' per worker' if args.workers > 1 else ''}, {deadline:g} s per question, "
          f"{timeout:g} s per LM request"
          f"{f', {args.workers} worker processes' if args.workers > 1 else ''})", file=sys.stderr)
    if args.workers > 1:  # the parent's service never answers (its pool starts no thread until asked)
        return _serve_workers(args, sockets)
    return _serve_one(service, args)


def _serve_one(service, args: argparse.Namespace) -> int:
    """`--workers 1`: serve in this process until SIGTERM (exit 0) or Ctrl-C (130); the answers in flight finish,
    for at most WORKER_GRACE seconds or until a second signal, then what is left is answered 503 (`run_app`,
    `ProgramService.cut`). A question still on a worker thread after that (its LM request hung; nobody waits for
    its answer) would hold the process until the request's timeout, since the interpreter waits for the thread at
    exit: the process exits without it, as the --workers parent kills a worker that outlives its grace."""
    import os
    import sys

    from ragzoo.retrieval.server import run_app
    from ragzoo.serving import create_app

    status = None
    cut, close = getattr(service, "cut", None), getattr(service, "close", None)  # any service object serves
    try:
        run_app(create_app(service), host=args.host, port=args.port, grace=WORKER_GRACE, on_hurry=cut)
        status = 0
    except KeyboardInterrupt:
        status = 130
        raise
    finally:
        left = close() if close is not None else 0
        if left and status is not None:
            print(f"ragzoo serve: {left} question{'s' if left > 1 else ''} still waiting on the LM "
                  f"{'were' if left > 1 else 'was'} cut (nobody waits for {'their' if left > 1 else 'its'} answer)",
                  file=sys.stderr)
            if status == 130:
                print("ragzoo serve: interrupted; nothing was written", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    return 0


def _program_service(args: argparse.Namespace):
    """(the ProgramService of the flags, its model name, method, deadline, per-LM-request timeout)."""
    from ragzoo.commands.common import build_lm, program_from_config
    from ragzoo.config import refuse_secrets
    from ragzoo.errors import ConfigError
    from ragzoo.serving import DEFAULT_DEADLINE, ProgramService
    from ragzoo.usage import check_cost_binds

    lm_concurrency = args.max_concurrency if args.lm_max_concurrency is None else args.lm_max_concurrency
    for flag, value in (("--max-calls", args.max_calls), ("--max-cost", args.max_cost)):
        if value is not None and not value > 0:
            raise ConfigError(f"{flag} must be a positive number, got {value}")
    deadline = DEFAULT_DEADLINE if args.deadline is None else args.deadline
    # an LM request that outlives its question is wasted, and holds an endpoint slot a live question needs
    timeout = deadline if args.timeout is None else min(args.timeout, deadline)
    config = {"program": args.program, "lm": args.lm, "api_base": args.api_base, "retriever": args.retriever,
              "knob": [], "no_cache": args.no_cache, "max_concurrency": lm_concurrency,
              "trust_retriever": args.trust_retriever, "timeout": timeout, "price": args.price,
              "price_per_hour": args.price_per_hour}
    refuse_secrets({"api_base": args.api_base or ""})
    lm = build_lm(config)
    check_cost_binds(lm, args.max_cost, getattr(lm, "price_per_hour", None))  # at start, not on every question
    program, description = program_from_config(config)
    name = args.name or f"ragzoo-{description['method']}"
    service = ProgramService(program, lm, name=name, method=description["method"],
                             max_concurrency=args.max_concurrency, max_queue=args.max_queue,
                             max_calls=args.max_calls, max_cost=args.max_cost, deadline=deadline)
    return service, name, description["method"], deadline, timeout


def _check_port_free(host: str, port: int) -> None:
    """A port in use is one line (ConfigError) before anything loads, as with --workers N; uvicorn binds it
    itself right after (a port taken in between still fails there)."""
    import socket

    from ragzoo.errors import ConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT port is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _listening_sockets(host: str, port: int, count: int) -> list:
    """`count` sockets listening on host:port (SO_REUSEPORT), bound here so a port in use fails once, clearly."""
    import socket

    from ragzoo.errors import ConfigError

    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--workers needs SO_REUSEPORT, which this system lacks; serve with --workers 1")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sockets


def _program_worker(options: dict, sock, workers: int) -> None:
    """One `--workers` process: its own program and service, serving the parent's listening socket."""
    from ragzoo.serving import create_app

    def make_service():
        service = _program_service(argparse.Namespace(**options))[0]
        return service, create_app(service, workers=workers)

    _run_worker(make_service, sock, options["host"], options["port"])


WORKER_GRACE = 30.0  # seconds a stopped server (or worker) has to finish the answers in flight before they are cut
SAME_STOP = 1.0  # seconds within which a worker counts a terminal's signal and its parent's SIGTERM as one stop


def _run_worker(make_service, sock, host: str, port: int) -> None:
    """Serve the app of `make_service()` ((service, app)) on the parent's listening socket `sock` until the parent
    stops this worker (SIGTERM) or is gone, as one process stops (`_serve_one`): the answers in flight finish, for
    at most WORKER_GRACE seconds or until a second signal, then what is left is answered 503 (`service.cut`). A
    terminal's Ctrl-C or a group's SIGTERM reaches the worker and its parent's SIGTERM follows at once: one stop
    (`SAME_STOP`), not two (two cut the connections at once: the clients got no answer). Ctrl-C while the program
    loads is ignored (the parent stops this worker, or kills it). A parent killed without its
    cleanup (SIGKILL, a crash) must not leave workers holding the port: each watches its parent and shuts down
    when it is gone."""
    import logging
    import multiprocessing
    import os
    import signal
    import sys
    import threading

    from ragzoo.retrieval.server import _stopping_server, uvicorn_config
    from ragzoo.secrets import RedactingStream

    # spawned: this process starts from the raw streams, not the CLI's redacting ones
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serving: dict = {}
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_stop_with_parent, args=(parent.sentinel, serving), daemon=True,
                         name="ragzoo-parent-watch").start()
    service, app = make_service()
    server = _stopping_server(uvicorn_config(app, host=host, port=port), WORKER_GRACE,
                              getattr(service, "cut", None), coalesce=SAME_STOP)
    serving["server"] = server
    try:
        server.run(sockets=[sock])
    finally:
        close = getattr(service, "close", None)
        if close is not None and close():  # a question still at a hung LM: its thread would hold the exit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def _stop_with_parent(sentinel: int, serving: dict) -> None:
    """In a worker: once the parent is gone, shut the server down as SIGTERM would (answers in flight finish, for
    at most WORKER_GRACE seconds, then the rest is answered 503), or exit at once when it is not serving yet."""
    import multiprocessing.connection
    import os
    import time

    multiprocessing.connection.wait([sentinel])
    server = serving.get("server")
    if server is None:
        os._exit(1)
    server.should_exit = True
    from ragzoo.retrieval.server import HURRIED_GRACE

    time.sleep(WORKER_GRACE + HURRIED_GRACE + 1)  # its answers in flight, then the 503s of what is left
    os._exit(1)


class _Terminated(BaseException):
    """SIGTERM while the command loads, or to the parent of `--workers` processes: stop, exit 0."""


def _terminated(signum, frame):
    raise _Terminated


def _serve_workers(args: argparse.Namespace, sockets: list) -> int:
    """Start `args.workers` spawned processes, one per listening socket, and wait. SIGTERM stops them all and
    exits 0, Ctrl-C too and exits 130 (as every interrupted command); each worker finishes its answers in flight,
    as uvicorn shuts down, for at most WORKER_GRACE seconds, or at once on a second Ctrl-C. A worker that dies
    stops the others and the exit status (1) says so, rather than leaving a server that answers a fraction of its
    connections."""
    import multiprocessing
    import multiprocessing.connection
    import signal
    import sys

    options = {key: value for key, value in vars(args).items() if isinstance(value, (str, int, float, bool, type(None)))}
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_program_worker, args=(options, sock, args.workers), name=f"ragzoo-serve-{i}")
                for i, sock in enumerate(sockets)]

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _terminated),
                signal.SIGINT: signal.getsignal(signal.SIGINT)}
    status = 0
    try:
        for child in children:
            child.start()
        ready = multiprocessing.connection.wait([child.sentinel for child in children])
        dead = next(child for child in children if child.sentinel in ready)
        dead.join(timeout=5)  # its pipe closes a moment before its exit status can be read
        print(f"ragzoo serve: worker process {dead.pid} exited (status {dead.exitcode}); stopping the others",
              file=sys.stderr)
        status = 1
    except _Terminated:
        pass
    finally:
        _stop_workers(children, previous)
        for sock in sockets:
            sock.close()
        _stop_resource_tracker()
    return status


def _stop_resource_tracker() -> None:
    """Stop, and wait for, the resource tracker process multiprocessing started beside the spawned workers: left
    to notice by itself that the parent is gone, it outlives the parent for a moment, so whoever waits for this
    command would see a process of it still running after it exited. Its own cleanup runs as at any exit."""
    from multiprocessing import resource_tracker

    stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)  # CPython 3.8+
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError):
            pass


def _stop_workers(children: list, previous: dict) -> None:
    """SIGTERM every worker still running and wait for them: each finishes its answers in flight for WORKER_GRACE
    seconds, then answers the rest 503 and closes (`_run_worker`). A further Ctrl-C or SIGTERM (the user is in a
    hurry) is passed on, so they answer 503 now. What is left after that is killed; the signal handlers are put
    back."""
    import multiprocessing.connection
    import signal
    import time

    from ragzoo.retrieval.server import HURRIED_GRACE

    hurry: list[int] = []
    for signum in previous:  # a second signal must not cut this cleanup short and leave workers behind
        signal.signal(signum, lambda number, frame: hurry.append(number))
    try:
        for child in children:
            if child.pid is not None and child.is_alive():
                child.terminate()
        started = time.monotonic()
        deadline = started + WORKER_GRACE + HURRIED_GRACE + 2  # a worker's own grace, its 503s, then killed
        passed_on = False
        while time.monotonic() < deadline:
            running = [child for child in children if child.pid is not None and child.is_alive()]
            if not running:
                break
            if hurry and not passed_on and time.monotonic() - started >= SAME_STOP:
                passed_on = True  # a terminal's second Ctrl-C reached them too; a SIGTERM to this process did not
                for child in running:
                    child.terminate()
                deadline = min(deadline, time.monotonic() + HURRIED_GRACE + 2)
            multiprocessing.connection.wait([child.sentinel for child in running], timeout=0.2)
        for child in children:
            if child.pid is not None and child.is_alive():
                child.kill()
            if child.pid is not None:  # SIGKILLed at the latest, so it ends: waited for, none outlives the parent
                child.join()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
