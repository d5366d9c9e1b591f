"""`ragzoo serve --retriever SPEC [--host 127.0.0.1] [--port 8893]`: the ColBERTv2 REST API."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retriever", default=None, help="retriever spec (default: bm25 over the wiki17 sample)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    parser.add_argument("--port", type=int, default=8893)
    parser.add_argument("--path", default="/", help="search route (also served at /api/search)")


def run(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.errors import ConfigError
    from ragzoo.retrieval.server import serve
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER, make_retriever

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}")
    if not args.path.startswith("/"):
        raise ConfigError(f"--path must start with '/', got {args.path!r}")
    spec = args.retriever or DEFAULT_RETRIEVER
    retriever = make_retriever(spec)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ragzoo serve: warning: listening on {args.host}, reachable from other machines", file=sys.stderr)
    print(f"serving {spec} on http://{args.host}:{args.port}{args.path} (GET ?query=&k=, POST JSON; /health)",
          file=sys.stderr)
    serve(retriever, host=args.host, port=args.port, path=args.path)
    return 0
