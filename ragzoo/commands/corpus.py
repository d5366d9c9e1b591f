"""`ragzoo corpus list` (= `ragzoo corpus fetch --list`) / `ragzoo corpus fetch NAME [--force] [--quiet]`:
corpora by name (see `ragzoo.retrieval.fetch`): downloaded through `huggingface_hub` (cache, resume,
`HF_ENDPOINT`, `HF_HUB_OFFLINE`), unpacked or converted streaming within a size bound, published only when
complete and verified (an unverifiable file only with `--allow-unverified`)."""

from __future__ import annotations

import argparse

# What a stopped fetch keeps (the CLI prints it on Ctrl-C and on SIGTERM). huggingface_hub 1.x
# downloads each file into a temporary file of its own process, removed when stopped: no resume inside a file.
INTERRUPTED = ("files already downloaded are kept in the hub cache; rerun the same command to go on: the file "
               "that was downloading starts over, and no corpus is published until it is complete and verified")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="corpus_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="corpora known by name, their size, the papers that use them, whether fetched",
                   description="Corpora known by name: what each is, passages, size (download / unpacked), "
                               "the papers that retrieve from it, and whether it is fetched or fetchable.")
    fetch = sub.add_parser("fetch", help="download and unpack a corpus by name (--list: what can be fetched)",
                           description="Download (through huggingface_hub: cache, resume, HF_ENDPOINT, offline "
                                       "mode) and unpack a corpus by name; then `ragzoo index build --corpus NAME`.")
    fetch.add_argument("name", nargs="?", help="corpus name, e.g. wiki17-abstracts or wiki18-100w (see --list)")
    fetch.add_argument("--list", action="store_true", help="list the corpora known by name instead of fetching")
    fetch.add_argument("--force", action="store_true", help="unpack again even if a complete copy is there")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.add_argument("--allow-unverified", action="store_true",
                       help="fetch even when nothing can verify the archive (ragzoo pins no sha256 for it and the "
                            "hub or mirror gives no sha256 ETag); refused without it")


def listing() -> list[dict]:
    """One row per corpus name: what `corpus list` prints."""
    from ragzoo.retrieval import fetch as corpora

    rows = []
    for name, src in corpora.CORPORA.items():
        path = corpora.corpus_path(name)
        if src.why_not:
            state = f"not fetchable by name: {src.why_not}"
        elif corpora.is_complete(path):
            count = corpora.passages_in(path)  # what was fetched, which a mirror may make other than `passages`
            held = f", {count:,} passages" if count is not None else ""
            vouched = "verified" if corpora.verification(path) else "UNVERIFIED (fetched with --allow-unverified)"
            state = f"present at {path} ({path.stat().st_size / 1e6:,.0f} MB{held}; {vouched})"
        else:
            state = f"not fetched (ragzoo corpus fetch {name})"
        rows.append({"name": name, "what": src.description, "passages": src.passages,
                     "size": f"{src.download_size or '?'} / {src.unpacked_size or '?'}",
                     "papers": ", ".join(src.papers) or "-", "fetchable": not src.why_not, "state": state,
                     "hub": f"{src.repo_id} ({src.repo_type}) at {corpora.hub_shown()}"})
    return rows


def print_listing() -> None:
    for row in listing():
        print(f"{row['name']}  [{'fetchable' if row['fetchable'] else 'NOT fetchable'}]")
        print(f"    what:      {row['what']}")
        print(f"    passages:  {row['passages']}")
        print(f"    size:      {row['size']} (download / unpacked)")
        print(f"    papers:    {row['papers']}")
        print(f"    hub:       {row['hub']}")
        print(f"    state:     {row['state']}")


def run(args: argparse.Namespace) -> int:
    import sys

    from ragzoo.errors import ConfigError
    from ragzoo.retrieval import fetch as corpora

    if args.corpus_command == "list" or args.list:
        print_listing()
        return 0
    if not args.name:
        raise ConfigError(f"name a corpus to fetch ({', '.join(corpora.CORPORA)}), or pass --list")
    path, fetched = corpora.fetch(args.name, force=args.force, progress=not args.quiet,
                                  allow_unverified=args.allow_unverified, log=lambda line: print(line, file=sys.stderr))
    verified_by = corpora.verification(path)
    how = {"pin": "verified against ragzoo's pinned sha256", "hub": "verified against the hub's sha256",
           "hub+pin": "verified: each file against ragzoo's pinned sha256, or the hub's where ragzoo pins none"}.get(
        verified_by, "UNVERIFIED: no sha256 checked it")
    count = corpora.passages_in(path)
    print(f"corpus {args.name} {'fetched' if fetched else 'already complete'} ({how}): {path}"
          f"{f' ({count:,} passages)' if count is not None else ''}")
    packed = " --format packed" if "format=packed" in corpora.source(args.name).options else ""
    print(f"next: ragzoo index build --corpus {args.name}{packed}")
    return 0
