"""`ragzoo search "query" [-k 5] [--retriever SPEC] [--json]`"""

from __future__ import annotations

import argparse

from ragzoo.retrieval.specs import DEFAULT_RETRIEVER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragzoo.retrieval.base import MAX_K

    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.add_argument("query", help="the search query")
    parser.add_argument("-k", type=int, default=5, help=f"how many passages (1..{MAX_K})")
    parser.add_argument("--retriever", default=DEFAULT_RETRIEVER,
                        help="retriever spec: bm25:<corpus>, dense:<corpus>, hybrid:<corpus>, colbertv2:<url>, ...; "
                             "the default is bm25 over the shipped wiki17 abstracts sample")
    parser.add_argument("--json", action="store_true", help="print the ColBERTv2-style JSON answer")


def run(args: argparse.Namespace) -> int:
    import json

    from ragzoo.retrieval.base import check_k, check_query
    from ragzoo.retrieval.specs import make_retriever

    check_query(args.query)
    check_k(args.k)
    retriever = make_retriever(args.retriever or DEFAULT_RETRIEVER)
    passages = retriever(args.query, args.k)
    if args.json:
        from ragzoo.retrieval.server import topk_payload

        print(json.dumps(topk_payload(args.query, passages), ensure_ascii=False, indent=2))
        return 0
    if not passages:
        print("no passage matches the query")
    for rank, passage in enumerate(passages, start=1):
        text = passage.text if len(passage.text) <= 240 else passage.text[:237] + "..."
        print(f"{rank:>3}. [{passage.score:.3f}] {passage.title}  ({passage.pid})\n     {text}")
    return 0
