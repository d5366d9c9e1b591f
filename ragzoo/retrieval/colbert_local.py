"""A local ColBERTv2 (PLAID) index through colbert-ai, the optional extra `ragzoo[colbert]`.

colbert-ai is imported only when this backend is used. Building an index needs a ColBERTv2 checkpoint
(e.g. a local copy of `colbert-ir/colbertv2.0`); ragzoo never downloads one. The index folder is the one
colbert-ai's `Indexer` writes (`plan.json`, `metadata.json`, codec and residual files); the collection is
the TSV (`pid \\t title | text`) written beside it at build time, so answers carry "Title | text".

Runs on CPU: colbert-ai picks the GPU path only when torch sees a CUDA device. On CPU it JIT-compiles four
small C++ extensions with torch.utils.cpp_extension on first use (gcc + ninja needed; about 25 s each on
2 cores, cached afterwards under ~/.cache/torch_extensions or $TORCH_EXTENSIONS_DIR).
colbert-ai 0.2.22 does not work with transformers 5 (its model class calls `init_weights()` before
`post_init()` and declares `_keys_to_ignore_on_load_unexpected` as a list), so the extra needs transformers<5.
The index metadata records the checkpoint's path; pass `checkpoint=` to the retriever if it has moved.

`make_random_checkpoint` writes an untrained, tiny BERT checkpoint in colbert-ai's format: its rankings
mean nothing, it only lets the wiring (index build, load, search) be checked where no real checkpoint can
be downloaded.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Iterable
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
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        raise ConfigError(f"colbert-ai does not work with transformers {transformers.__version__}; "
                          f"install transformers<5 beside it (`pip install 'transformers<5'`)")
    return Indexer, Searcher, ColBERTConfig, Run, RunConfig


def build_colbert_index(corpus: Path, out_dir: Path, checkpoint: str, nbits: int = 2, doc_maxlen: int = 180,
                        show_progress: bool = True) -> dict:
    """Write the collection TSV and let colbert-ai index it under `out_dir` (PLAID, `nbits` residuals)."""
    if not checkpoint:
        raise ConfigError("building a ColBERT index needs --checkpoint PATH to a ColBERTv2 checkpoint "
                          "(e.g. a local copy of colbert-ir/colbertv2.0); ragzoo does not download one")
    Indexer, _Searcher, ColBERTConfig, Run, RunConfig = _import_colbert()
    from ragzoo import files
    from ragzoo.retrieval import index_cache
    from ragzoo.retrieval.corpus import iter_corpus

    out_dir = Path(out_dir)
    index_cache.check_replaceable(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # colbert-ai writes into the folder itself; the marker makes an unfinished build ours to redo later
    marker = {"format": index_cache.FORMAT, "format_version": index_cache.FORMAT_VERSION, "backend": "colbert"}
    files.atomic_write_json(out_dir / index_cache.META_FILE, {**marker, "state": "building"})
    pids = []
    with open(out_dir / COLLECTION_FILE, "w", encoding="utf-8") as tsv:
        for row, passage in enumerate(iter_corpus(corpus)):
            # colbert-ai wants row numbers as pids; we keep the corpus ids beside them
            tsv.write(f"{row}\t{passage.long_text.replace(chr(9), ' ').replace(chr(10), ' ')}\n")
            pids.append(passage.pid)
    (out_dir / PIDS_FILE).write_text(json.dumps(pids))
    # one rank in this process: no spawned workers (which would re-import the caller's __main__)
    # index_root must sit in the RunConfig: the Indexer lets Run().config override the ColBERTConfig given to it
    run_config = RunConfig(nranks=1, avoid_fork_if_possible=True, experiment="ragzoo", root=str(out_dir),
                           index_root=str(out_dir))
    with Run().context(run_config):
        config = ColBERTConfig(nbits=nbits, doc_maxlen=doc_maxlen, index_root=str(out_dir))
        # overwrite=True would wait 20 s before deleting an old index; the silent form does not
        Indexer(checkpoint=checkpoint, config=config).index(name="plaid", collection=str(out_dir / COLLECTION_FILE),
                                                            overwrite="force_silent_overwrite")
    meta = {"backend": "colbert", "num_docs": len(pids), "index": str(out_dir / "plaid")}
    files.atomic_write_json(out_dir / index_cache.META_FILE, {**marker, **meta, "state": "built"})
    return meta


class ColBERTLocalRetriever(BaseRetriever):
    native_threads = True  # torch's pools (the encoder and PLAID's search): see BaseRetriever.native_threads

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
        from ragzoo.machine import cap_native_threads

        cap_native_threads()  # torch's pool (the encoder, PLAID's search) counts the host's cores, not a quota

    def truncate_query(self, query: str) -> str | None:
        """What ColBERT reads: its query tokenizer keeps `query_maxlen` tokens, three of them [CLS], the
        [Q] marker and [SEP]."""
        from ragzoo.retrieval.base import cut_to_tokens

        query_tokenizer = getattr(getattr(self.searcher, "checkpoint", None), "query_tokenizer", None)
        tokenizer = getattr(query_tokenizer, "tok", None)
        budget = int(getattr(query_tokenizer, "query_maxlen", 0) or 0) - 3
        if budget < 1 or tokenizer is None or not getattr(tokenizer, "is_fast", False):
            return None
        return cut_to_tokens(query, tokenizer, budget)

    def _search(self, query: str, k: int) -> list[Passage]:
        rows, _ranks, scores = self.searcher.search(query, k=k)
        passages = []
        for row, score in zip(rows, scores):
            pid = self.pids[row] if self.pids else str(row)
            passages.append(Passage.from_long_text(self.searcher.collection[row], pid=pid, score=float(score)))
        return passages


def make_random_checkpoint(folder: str | Path, texts: Iterable[str], dim: int = 32, vocab_size: int = 4000,
                           seed: int = 0) -> Path:
    """Write a tiny randomly initialised BERT ColBERT checkpoint (vocab from `texts`) for wiring checks only."""
    _import_colbert()
    import torch
    from colbert.infra import ColBERTConfig
    from colbert.modeling.hf_colbert import class_factory
    from transformers import BertConfig, BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # colbert-ai marks queries and documents with [unused0]/[unused1] and pads queries with [MASK]
    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += list(string.punctuation) + list(string.ascii_lowercase + string.digits)
    vocab += ["##" + char for char in string.ascii_lowercase + string.digits]
    counts = Counter(word for text in texts for word in re.findall(r"[a-z0-9]+", text.lower()))
    known = set(vocab)
    vocab += [word for word, _ in counts.most_common(max(0, vocab_size - len(vocab))) if word not in known]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=128, max_position_embeddings=512).save_pretrained(folder)
    colbert_config = ColBERTConfig(dim=dim)
    torch.manual_seed(seed)
    # the model class colbert-ai itself loads, so the projection to `dim` is saved too (not re-drawn per load)
    model = class_factory(str(folder))(BertConfig.from_pretrained(folder), colbert_config)
    model.save_pretrained(folder)
    colbert_config.save_for_checkpoint(str(folder))
    return folder
