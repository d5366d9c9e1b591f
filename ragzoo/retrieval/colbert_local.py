"""A local ColBERTv2 (PLAID) index through colbert-ai, the optional extra `ragzoo[colbert]`.

colbert-ai is imported only when this backend is used. Building an index needs a ColBERTv2 checkpoint
(e.g. a local copy of `colbert-ir/colbertv2.0`); ragzoo never downloads one. The index folder is the one
colbert-ai's `Indexer` writes (`plan.json`, `metadata.json`, codec and residual files); the collection is
the TSV (`pid \\t title | text`) written beside it at build time, so answers carry "Title | text".
"""

from __future__ import annotations

import json
from pathlib import Path

from ragzoo.errors import ConfigError, RetrieverError
from ragzoo.retrieval.base import BaseRetriever, Passage

COLLECTION_FILE = "collection.tsv"
PIDS_FILE = "pids.json"


def _import_colbert():
    try:
        import colbert  # noqa: F401
        from colbert import Indexer, Searcher
        from colbert.infra import ColBERTConfig, Run, RunConfig
    except ImportError as error:
        raise ConfigError(f"the colbert backend needs colbert-ai ({error}); install it with "
                          f"`pip install 'ragzoo[colbert]'`, or use bm25:/dense:/colbertv2: instead")
    return Indexer, Searcher, ColBERTConfig, Run, RunConfig


def build_colbert_index(corpus: Path, out_dir: Path, checkpoint: str, nbits: int = 2, doc_maxlen: int = 180,
                        show_progress: bool = True) -> dict:
    """Write the collection TSV and let colbert-ai index it under `out_dir` (PLAID, `nbits` residuals)."""
    if not checkpoint:
        raise ConfigError("building a ColBERT index needs --checkpoint PATH to a ColBERTv2 checkpoint "
                          "(e.g. a local copy of colbert-ir/colbertv2.0); ragzoo does not download one")
    Indexer, _Searcher, ColBERTConfig, Run, RunConfig = _import_colbert()
    from ragzoo.data.corpus import iter_corpus

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pids = []
    with open(out_dir / COLLECTION_FILE, "w", encoding="utf-8") as tsv:
        for row, passage in enumerate(iter_corpus(corpus)):
            # colbert-ai wants row numbers as pids; we keep the corpus ids beside them
            tsv.write(f"{row}\t{passage.long_text.replace(chr(9), ' ').replace(chr(10), ' ')}\n")
            pids.append(passage.pid)
    (out_dir / PIDS_FILE).write_text(json.dumps(pids))
    with Run().context(RunConfig(nranks=1, experiment="ragzoo", root=str(out_dir))):
        config = ColBERTConfig(nbits=nbits, doc_maxlen=doc_maxlen, index_root=str(out_dir))
        Indexer(checkpoint=checkpoint, config=config).index(name="plaid", collection=str(out_dir / COLLECTION_FILE),
                                                            overwrite=True)
    return {"backend": "colbert", "num_docs": len(pids), "index": str(out_dir / "plaid")}


class ColBERTLocalRetriever(BaseRetriever):
    def __init__(self, index_dir: str | Path, spec: str = "", checkpoint: str | None = None):
        folder = Path(index_dir).expanduser()
        plaid = folder / "plaid" if (folder / "plaid" / "plan.json").exists() else folder
        if not (plaid / "plan.json").exists():
            raise RetrieverError(f"{folder} is not a colbert-ai index (no plan.json); build one with "
                                 f"`ragzoo index build --backend colbert --corpus FILE --out DIR --checkpoint CKPT`")
        _Indexer, Searcher, _Config, _Run, _RunConfig = _import_colbert()
        self.spec = spec or f"colbert:{folder}"
        collection = folder / COLLECTION_FILE
        self.pids = json.loads((folder / PIDS_FILE).read_text()) if (folder / PIDS_FILE).exists() else None
        self.searcher = Searcher(index=plaid.name, index_root=str(plaid.parent), checkpoint=checkpoint,
                                 collection=str(collection) if collection.exists() else None, verbose=0)

    def _search(self, query: str, k: int) -> list[Passage]:
        rows, _ranks, scores = self.searcher.search(query, k=k)
        passages = []
        for row, score in zip(rows, scores):
            pid = self.pids[row] if self.pids else str(row)
            passages.append(Passage.from_long_text(self.searcher.collection[row], pid=pid, score=float(score)))
        return passages
