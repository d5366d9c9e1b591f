"""`ragzoo corpus list` / `ragzoo corpus fetch NAME [--force] [--quiet]`: corpora by name (see
`ragzoo.retrieval.fetch`): downloaded through `huggingface_hub` (cache, resume, `HF_ENDPOINT`,
`HF_HUB_OFFLINE`), unpacked streaming within a size bound, published only when complete and verified (an
unverifiable archive only with `--allow-unverified`)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="corpus_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="corpora known by name and whether they are fetched",
                   description="Corpora known by name and whether they are fetched.")
    fetch = sub.add_parser("fetch", help="download and unpack a corpus by name",
                           description="Download (through huggingface_hub: cache, resume, HF_ENDPOINT, offline "
                                       "mode) and unpack a corpus by name; then `ragzoo index build --corpus NAME`.")
    fetch.add_argument("name", help="corpus name, e.g. wiki17-abstracts")
    fetch.add_argument("--force", action="store_true", help="unpack again even if a complete copy is there")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.add_argument("--allow-unverified", action="store_true",
                       help="fetch even when nothing can verify the archive (ragzoo pins no sha256 for it and the "
                            "hub or mirror gives no sha256 ETag); refused without it")


def run(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.retrieval import fetch as corpora

    if args.corpus_command == "list":
        for name, src in corpora.CORPORA.items():
            path = corpora.corpus_path(name)
            state = f"fetched: {path}" if corpora.is_complete(path) else "not fetched"
            print(f"{name:20s} {src.passages:>12s}  {src.description}\n{'':20s} hub {src.repo_id}/{src.filename}"
                  f"  [{state}]")
        return 0
    from ragzoo.commands.index import _sigterm_unwinds

    with _sigterm_unwinds():
        path, fetched = corpora.fetch(args.name, force=args.force, progress=not args.quiet,
                                      allow_unverified=args.allow_unverified,
                                      log=lambda line: print(line, file=sys.stderr))
    verified_by = corpora.verification(path)
    how = {"pin": "verified against ragzoo's pinned sha256", "hub": "verified against the hub's sha256"}.get(
        verified_by, "UNVERIFIED: no sha256 checked it")
    print(f"corpus {args.name} {'fetched' if fetched else 'already complete'} ({how}): {path}")
    print(f"next: ragzoo index build --corpus {args.name}")
    return 0
