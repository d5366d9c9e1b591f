"""Retrieval: the Passage type, the Retriever protocol, the corpus reader (`corpus`), backends built from
spec strings (`specs`, whose `DEFAULT_RETRIEVER` is the one default), index building and caching
(`index_cache`), and the ColBERTv2-compatible REST server (`server`)."""

from ragzoo.retrieval.base import MAX_K, BaseRetriever, Passage, Retriever, check_k

__all__ = ["MAX_K", "BaseRetriever", "Passage", "Retriever", "check_k", "make_retriever"]


def make_retriever(spec: str, **kwargs) -> Retriever:
    """Build a retriever from a spec string (`bm25:<corpus>`, `dense:<corpus>`, `hybrid:<corpus>`,
    `colbertv2:<url>`, `colbert:<index-dir>`, `fixed`)."""
    from ragzoo.retrieval.specs import make_retriever as _make

    return _make(spec, **kwargs)
