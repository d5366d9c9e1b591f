"""Programs served by the serving tests: a saved `rag` artifact (for `ragzoo serve` and ProgramService) and an
in-memory `rag` over five static passages."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, wiki17_corpus):
    import ragzoo
    from ragzoo import programs
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    # a spec relative to RAGZOO_DATA: the kind of retriever an artifact may name without --trust-retriever
    retriever = make_retriever(DEFAULT_RETRIEVER, show_progress=False)
    out = tmp_path_factory.mktemp("served") / "rag"
    ragzoo.save(programs.get("rag", retriever=retriever, k=3), out, method="rag")
    return out


@pytest.fixture(scope="module")
def program():
    from ragzoo import programs
    from ragzoo.testing import StaticRetriever, make_passages

    return programs.get("rag", retriever=StaticRetriever(make_passages(5)), k=3)
