"""`ragzoo serve --retriever SPEC [--host 127.0.0.1] [--port 8893] [--max-query-chars N]`: the ColBERTv2
REST API (see `ragzoo.retrieval.server` for the routes and bounds)."""

from __future__ import annotations

import argparse

from ragzoo.retrieval.specs import DEFAULT_RETRIEVER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.retrieval.base import MAX_K
    from ragzoo.retrieval.server import MAX_QUERY_CHARS

    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.epilog = (f"GET <path>?query=...&k=... or POST JSON {{\"query\", \"k\"}}; k is an integer in 1..{MAX_K}. "
                     f"A query over --max-query-chars is cut where the backend would cut it anyway (colbert, "
                     f"dense: their token budget), otherwise refused with HTTP 413 naming the limit.")
    parser.add_argument("--retriever", default=DEFAULT_RETRIEVER,
                        help="retriever spec: bm25:<corpus>, dense:<corpus>, hybrid:<corpus>, colbertv2:<url>, ...; "
                             "the default is bm25 over the shipped wiki17 abstracts sample")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback: this machine only)")
    parser.add_argument("--port", type=int, default=8893, help="TCP port")
    parser.add_argument("--path", default="/", help="search route (also served at /api/search)")
    parser.add_argument("--max-query-chars", type=int, default=MAX_QUERY_CHARS, metavar="N",
                        help="longest query accepted, in characters; generous by default because programs "
                             "send long queries on purpose (BlendFilter blends the question with a generated "
                             "passage or a chain-of-thought answer)")


def run(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.errors import ConfigError
    from ragzoo.retrieval.server import serve
    from ragzoo.retrieval.specs import make_retriever

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}")
    if not args.path.startswith("/"):
        raise ConfigError(f"--path must start with '/', got {args.path!r}")
    if args.max_query_chars < 1:
        raise ConfigError(f"--max-query-chars must be a positive number of characters, got {args.max_query_chars}")
    spec = args.retriever or DEFAULT_RETRIEVER
    retriever = make_retriever(spec)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ragzoo serve: warning: listening on {args.host}, reachable from other machines", file=sys.stderr)
    print(f"serving {spec} on http://{args.host}:{args.port}{args.path} (GET ?query=&k=, POST JSON; /health; "
          f"queries up to {args.max_query_chars:,} characters)", file=sys.stderr)
    serve(retriever, host=args.host, port=args.port, path=args.path, max_query_chars=args.max_query_chars)
    return 0
