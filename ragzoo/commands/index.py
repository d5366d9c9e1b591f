"""`ragzoo index build --corpus FILE [--backend bm25|dense|colbert] [--out DIR]`

`--out` replaces only what ragzoo wrote: a path that does not exist yet, an empty folder, or an index folder
ragzoo built (its `meta.json` says so); anything else is refused (exit 2) and left as it is. A SIGTERM
during a build removes the unfinished staging folder, as Ctrl-C does; folders left by a build killed outright
(SIGKILL) are removed by the next build of the same target.
"""

from __future__ import annotations

import argparse


# What an interrupted run keeps (the CLI prints it on Ctrl-C and on SIGTERM).
INTERRUPTED = "the unfinished index was discarded; an index already at --out is untouched"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build (or reuse the cached) index of a corpus",
                           description="Build (or reuse the cached) index of a corpus.",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    build.add_argument("--corpus", required=True, help="corpus JSONL (path, or relative to RAGZOO_DATA)")
    build.add_argument("--backend", choices=["bm25", "dense", "colbert"], default="bm25", help="index kind")
    build.add_argument("--out", default=None,
                       help="index folder: a new or empty folder, or an index ragzoo built (replaced); "
                            "anything else is refused. None: the cache under RAGZOO_CACHE")
    build.add_argument("--model", default=None,
                       help="dense: sentence-transformers model name or path (None: all-MiniLM-L6-v2)")
    build.add_argument("--checkpoint", default=None, help="colbert: path to a ColBERTv2 checkpoint")
    build.add_argument("--format", choices=["csc", "packed"], default="csc", dest="index_format",
                       help="bm25: bm25s's score matrix (csc) or ragzoo's compressed postings (packed: about half "
                            "the postings' size, same scores, needs numba)")
    build.add_argument("--rebuild", action="store_true", help="rebuild even if an up-to-date index exists")
    build.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from ragzoo.retrieval.index_cache import check_replaceable, resolve_corpus

    _check_backend_options(args)
    corpus = resolve_corpus(args.corpus)
    if corpus.is_dir():
        from ragzoo.errors import DataError

        raise DataError(f"--corpus must be a JSONL file, {corpus} is a folder")
    out = Path(args.out).expanduser().resolve() if args.out else None
    if out is not None:
        check_replaceable(out)  # before anything is read or built
    started = time.perf_counter()
    if args.backend == "bm25":
        from ragzoo.retrieval.bm25 import ensure_bm25_index

        folder, meta, built = ensure_bm25_index(corpus, out_dir=out, show_progress=not args.quiet,
                                                rebuild=args.rebuild, index_format=args.index_format)
    elif args.backend == "dense":
        from ragzoo.retrieval.dense import DEFAULT_MODEL, ensure_dense_index

        folder, meta, built = ensure_dense_index(corpus, args.model or DEFAULT_MODEL, out_dir=out,
                                                 show_progress=not args.quiet, rebuild=args.rebuild)
    else:
        from ragzoo.errors import ConfigError
        from ragzoo.retrieval.colbert_local import build_colbert_index

        if out is None:
            raise ConfigError("--backend colbert needs --out DIR")
        meta = build_colbert_index(corpus, out, args.checkpoint, show_progress=not args.quiet)
        folder, built = out, True
    seconds = time.perf_counter() - started
    state = "built" if built else "up to date (cached)"
    print(f"{args.backend} index {state}: {folder}")
    print(f"  {meta['num_docs']:,} passages from {corpus} in {seconds:.1f}s")
    packed = "?format=packed" if args.backend == "bm25" and args.index_format == "packed" and not args.out else ""
    print(f"  use it with: --retriever {args.backend}:{folder if args.out else _as_in_data(corpus, args.corpus)}"
          f"{packed}")
    return 0


def _as_in_data(corpus, given: str) -> str:
    """The corpus as a spec names it best: relative to RAGZOO_DATA when it is in there (an artifact compiled with
    it is then followed by ask/evaluate/serve, which refuse paths outside RAGZOO_DATA), else as given."""
    from ragzoo.paths import data_root

    try:
        return str(corpus.resolve().relative_to(data_root().resolve()))
    except ValueError:
        return given


# the flags each backend reads; given to another, a flag would be dropped without a word
_BACKEND_FLAGS = {"--model": ("model", None, ("dense",)), "--checkpoint": ("checkpoint", None, ("colbert",)),
                  "--format": ("index_format", "csc", ("bm25",))}


def _check_backend_options(args: argparse.Namespace) -> None:
    from ragzoo.errors import ConfigError

    for flag, (name, default, backends) in _BACKEND_FLAGS.items():
        if getattr(args, name, default) != default and args.backend not in backends:
            raise ConfigError(f"{flag} applies to --backend {' or '.join(backends)} only, not {args.backend}")
