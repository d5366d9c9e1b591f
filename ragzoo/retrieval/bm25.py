"""The embedded default retriever: BM25 on `bm25s` (Lucene BM25, k1 0.9, b 0.4, English stopwords,
Snowball stemming via PyStemmer, as DSPy's wiki17 tutorials configure it).

The index is built by streaming the corpus: passages are tokenized in chunks with bm25s's own
`Tokenizer.streaming_tokenize`, each chunk's (document, term, tf) postings are spooled to disk, and the
compressed-sparse-column score matrix is then filled column by column into memory-mapped `.npy` files in
exactly the layout `bm25s.BM25.save` writes. Peak memory is therefore the vocabulary plus one chunk, not
the corpus (bm25s's own `index()` needs every token list in memory, ≈3 GB per million short documents).
Queries are answered over `bm25s.BM25.load(..., mmap=True)`'s score matrix by `bm25_topk.PrunedTopK` (exact top
k with MaxScore pruning: frequent terms are looked up for the candidates of the rare ones instead of scanned),
batched on `n_threads` threads; `backend="numba"` answers each query in one compiled call (numba), `"numpy"` in a
numpy call or two per term, and `"auto"` (the default) picks numba from `AUTO_NUMBA_FROM` passages on when numba
is installed (the `[fast]` extra), numpy below that or without it.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from ragzoo.errors import ConfigError, DataError, RetrieverError, error_line
from ragzoo.retrieval import index_cache
from ragzoo.retrieval.base import BaseRetriever, Passage
from ragzoo.retrieval.store import PassageStore, PassageStoreWriter, describe_files

logger = logging.getLogger(__name__)

BACKEND = "bm25"
TERM_MAX = "term_max.npy"


@dataclass(frozen=True)
class BM25Settings:
    k1: float = 0.9
    b: float = 0.4
    stopwords: str = "en"
    stemmer: str = "english"  # a PyStemmer (Snowball) language, or "" for none
    method: str = "lucene"


def _versions() -> dict:
    import bm25s
    import Stemmer

    return {"bm25s": bm25s.__version__, "PyStemmer": getattr(Stemmer, "__version__", "?")}


def make_tokenizer(settings: BM25Settings):
    """bm25s's tokenizer with our settings; the same object tokenizes documents and queries."""
    from bm25s.tokenization import Tokenizer

    stemmer = None
    if settings.stemmer:
        import Stemmer

        stemmer = Stemmer.Stemmer(settings.stemmer)
    return Tokenizer(lower=True, stopwords=settings.stopwords, stemmer=stemmer)


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def build_bm25_index(corpus: Path, out_dir: Path, settings: BM25Settings = BM25Settings(),
                     fingerprint: dict | None = None, show_progress: bool = True,
                     chunk_size: int = 20_000, index_format: str = "csc", memory_budget: int = 2 << 30) -> dict:
    """Stream `corpus` into a bm25 index at `out_dir` (replaced atomically): bm25s's CSC (`index_format="csc"`)
    or ragzoo's compressed postings (`"packed"`, `bm25_packed`; one bucket of postings at a time within
    `memory_budget` bytes). Returns the index metadata."""
    from tqdm.auto import tqdm

    from ragzoo.retrieval import bm25_packed
    from ragzoo.retrieval.corpus import count_lines, iter_corpus

    bm25_packed.check_format(index_format)
    index_cache.check_replaceable(out_dir)  # before any work: never build over what ragzoo did not write
    started = time.perf_counter()
    fingerprint = fingerprint or index_cache.corpus_fingerprint(corpus)
    staging = index_cache.staging_dir(out_dir)
    try:
        tokenizer = make_tokenizer(settings)
        store = PassageStoreWriter(staging, compress=index_format == bm25_packed.FORMAT)  # wiki-scale: blocks
        packed = index_format == bm25_packed.FORMAT
        if packed:
            buckets = bm25_packed.BucketSpool(staging, bm25_packed.bucket_count(corpus.stat().st_size,
                                                                                 memory_budget))
        else:
            spool_terms = open(staging / "spool.terms.i32", "wb")
            spool_tfs = open(staging / "spool.tfs.f32", "wb")
        first_doc = 0
        doc_lengths: list[np.ndarray] = []
        doc_nnz: list[np.ndarray] = []
        doc_freq = np.zeros(1 << 16, dtype=np.int64)
        total = count_lines(corpus) if show_progress else None
        progress = tqdm(total=total, desc=f"bm25 index {corpus.name}", unit="doc", disable=not show_progress)
        for chunk in _chunks(iter_corpus(corpus, progress=progress), chunk_size):
            for passage in chunk:
                store.add(passage.pid, passage.title, passage.text)
            token_ids = list(tokenizer.streaming_tokenize([p.long_text for p in chunk], update_vocab=True,
                                                          allow_empty=False))
            lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
            flat = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=int(lengths.sum()))
            local_doc = np.repeat(np.arange(len(chunk), dtype=np.int64), lengths)
            # one posting per distinct (document, term): sorting the packed key groups by doc, then term
            keys, tfs = np.unique((local_doc << 32) | flat, return_counts=True)
            terms = (keys & 0xFFFFFFFF).astype(np.int32)
            if packed:
                buckets.add(first_doc, keys >> 32, terms, tfs)
            else:
                terms.tofile(spool_terms)
                tfs.astype(np.float32).tofile(spool_tfs)
            first_doc += len(chunk)
            doc_lengths.append(lengths)
            if not packed:  # the csc's rows per passage; the packed build needs no such table
                doc_nnz.append(np.bincount(keys >> 32, minlength=len(chunk)))
            vocab_size = len(tokenizer.stem_to_sid if tokenizer.stemmer else tokenizer.word_to_id)
            if vocab_size > len(doc_freq):
                doc_freq = np.concatenate([doc_freq, np.zeros(max(vocab_size, 2 * len(doc_freq)) - len(doc_freq),
                                                              dtype=np.int64)])
            doc_freq += np.bincount(terms, minlength=len(doc_freq))
            progress.update(len(chunk))
        progress.close()
        if packed:
            buckets.close()
        else:
            spool_terms.close()
            spool_tfs.close()
        num_docs = store.close()
        if num_docs == 0:
            raise DataError(f"corpus has no passages: {corpus}")
        vocab = dict(tokenizer.stem_to_sid if tokenizer.stemmer else tokenizer.word_to_id)
        lengths = np.concatenate(doc_lengths)
        extra = {}
        if packed:
            del doc_nnz
            extra = bm25_packed.write_packed(staging, buckets, doc_freq[:len(vocab)], lengths, settings.k1,
                                             settings.b, show_progress)
            bm25_packed.write_sorted_vocab(staging, vocab)
        else:
            nnz = np.concatenate(doc_nnz)
            _write_score_matrix(staging, settings, doc_freq[:len(vocab)], lengths, nnz, show_progress)
            _write_term_max(staging)
            for spool in ("spool.terms.i32", "spool.tfs.f32"):
                (staging / spool).unlink()
        _write_bm25s_params(staging, settings, num_docs, vocab)
        files = ("bm25s index (data/indices/indptr .csc.index.npy, vocab.index.json, params.index.json) "
                 "+ term_max.npy (largest weight per term)") if not packed else \
            "packed postings (bm25_packed: packed_*.npy, term_max.npy, vocab.index.json, params.index.json)"
        meta = {"backend": BACKEND, "index_format": index_format, "corpus": fingerprint, "num_docs": num_docs,
                "vocab_size": len(vocab), "settings": asdict(settings), "versions": _versions(),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "build_seconds": round(time.perf_counter() - started, 3),
                "files": f"{files} + {describe_files(store.compress)}", **extra}
        index_cache.publish(staging, out_dir, meta)
        return meta
    except BaseException:
        index_cache.discard(staging)
        raise


def _write_score_matrix(folder: Path, settings: BM25Settings, doc_freq: np.ndarray, lengths: np.ndarray,
                        nnz: np.ndarray, show_progress: bool, docs_per_step: int = 200_000) -> None:
    """Fill the CSC matrix (rows = documents, columns = terms) with Lucene BM25 weights, as bm25s does."""
    from tqdm.auto import tqdm

    num_docs = len(lengths)
    # Lucene idf, as bm25s computes it (float64 then stored as float32)
    idf = np.log1p((num_docs - doc_freq + 0.5) / (doc_freq + 0.5)).astype(np.float32)
    avg_len = float(lengths.mean())
    indptr = np.zeros(len(doc_freq) + 1, dtype=np.int64)
    np.cumsum(doc_freq, out=indptr[1:])
    total = int(indptr[-1])
    data = np.lib.format.open_memmap(folder / "data.csc.index.npy", mode="w+", dtype=np.float32, shape=(total,))
    indices = np.lib.format.open_memmap(folder / "indices.csc.index.npy", mode="w+", dtype=np.int32,
                                        shape=(total,))
    np.save(folder / "indptr.csc.index.npy", indptr)
    terms_all = np.memmap(folder / "spool.terms.i32", dtype=np.int32, mode="r") if total else np.zeros(0, np.int32)
    tfs_all = np.memmap(folder / "spool.tfs.f32", dtype=np.float32, mode="r") if total else np.zeros(0, np.float32)
    posting_start = np.zeros(num_docs + 1, dtype=np.int64)
    np.cumsum(nnz, out=posting_start[1:])
    cursor = indptr[:-1].copy()
    k1, b = np.float32(settings.k1), np.float32(settings.b)
    for first in tqdm(range(0, num_docs, docs_per_step), desc="bm25 scores", disable=not show_progress):
        last = min(first + docs_per_step, num_docs)
        lo, hi = posting_start[first], posting_start[last]
        if lo == hi:
            continue
        docs = np.repeat(np.arange(first, last, dtype=np.int32), nnz[first:last])
        terms = np.asarray(terms_all[lo:hi])
        tfs = np.asarray(tfs_all[lo:hi])
        norm = k1 * ((1 - b) + b * lengths[docs].astype(np.float32) / np.float32(avg_len))
        scores = idf[terms] * (tfs / (norm + tfs))
        # documents arrive in order, so a stable sort by term keeps each column's rows ascending
        order = np.argsort(terms, kind="stable")
        sorted_terms = terms[order]
        unique_terms, group_start, group_size = np.unique(sorted_terms, return_index=True, return_counts=True)
        positions = cursor[sorted_terms] + (np.arange(len(order)) - np.repeat(group_start, group_size))
        data[positions] = scores[order]
        indices[positions] = docs[order]
        cursor[unique_terms] += group_size
        # write this step's pages back and unmap them: they stay in the page cache (the next step maps them
        # again at the cost of a minor fault) but no longer count in this process's resident memory, which
        # otherwise grows to the whole index plus the spools (5.7 GB at 5.2M passages)
        for array in (data, indices):
            array.flush()
        _release_pages(data, indices, terms_all, tfs_all)
    data.flush()
    indices.flush()
    del data, indices, terms_all, tfs_all


def _write_term_max(folder: Path) -> None:
    """`term_max.npy`: every term's largest weight, the bounds the pruned scorer needs (its columns are sorted,
    as `_write_score_matrix` writes them), and the bounds of its blocks of 128 postings, which the windowed scorer
    needs (`bm25_packed.write_csc_blocks`; computed at load for an index built without them). Not bm25s files:
    bm25s ignores them."""
    from ragzoo.retrieval.bm25_packed import write_csc_blocks
    from ragzoo.retrieval.bm25_topk import term_maxima

    data = np.load(folder / "data.csc.index.npy", mmap_mode="r")
    np.save(folder / TERM_MAX, term_maxima(data, np.load(folder / "indptr.csc.index.npy")))
    _release_pages(data)
    del data
    write_csc_blocks(folder)


def _release_pages(*arrays) -> None:
    """Unmap the resident pages of file-backed memory maps (MADV_DONTNEED; Linux, Python >= 3.8)."""
    _advise(*arrays, advice="MADV_DONTNEED")


def _advise(*arrays, advice: str) -> None:
    """madvise(`advice`) on the np.memmap `arrays` (Linux, Python >= 3.8); a no-op for anything else."""
    import mmap

    flag = getattr(mmap, advice, None)
    for array in arrays:
        handle = getattr(array, "_mmap", None)
        if flag is None or handle is None:
            continue
        try:
            handle.madvise(flag)
        except (OSError, ValueError):
            pass


def _write_bm25s_params(folder: Path, settings: BM25Settings, num_docs: int, vocab: dict) -> None:
    import bm25s

    params = {"k1": settings.k1, "b": settings.b, "delta": 0.5, "method": settings.method,
              "idf_method": settings.method, "dtype": "float32", "int_dtype": "int32", "num_docs": num_docs,
              "version": bm25s.__version__, "backend": "numpy"}
    (folder / "params.index.json").write_text(json.dumps(params, indent=4))
    (folder / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False))


def index_dir_for(corpus: Path, settings: BM25Settings = BM25Settings(),
                  index_format: str = "csc") -> tuple[Path, dict]:
    fingerprint = index_cache.corpus_fingerprint(corpus)
    # the format joins the key only when not csc, so the csc indexes already cached keep their folders
    keyed = asdict(settings) if index_format == "csc" else {**asdict(settings), "index_format": index_format}
    return index_cache.cached_index_dir(BACKEND, corpus, fingerprint, keyed, _versions()), fingerprint


def index_format_of(meta: dict) -> str:
    return meta.get("index_format", "csc")


def ensure_bm25_index(corpus: Path, settings: BM25Settings = BM25Settings(), out_dir: Path | None = None,
                      show_progress: bool = True, rebuild: bool = False,
                      index_format: str = "csc") -> tuple[Path, dict, bool]:
    """The index folder for `corpus` (built if missing or stale). Returns (folder, meta, built_now)."""
    cached, fingerprint = index_dir_for(corpus, settings, index_format)
    folder = Path(out_dir) if out_dir else cached
    if not rebuild and index_cache.is_index_dir(folder):
        meta = index_cache.read_meta(folder, BACKEND)
        if meta.get("corpus", {}).get("sha256") == fingerprint["sha256"] and meta.get("settings") == asdict(settings) \
                and index_format_of(meta) == index_format:
            return folder, meta, False
    meta = build_bm25_index(corpus, folder, settings, fingerprint, show_progress=show_progress,
                            index_format=index_format)
    return folder, meta, True


# `backend="auto"` picks numba from this many passages on (when installed). Below it numpy answers in well under a
# millisecond (0.22 ms a question on the 17,703-passage sample) and a process starts with no numba import and no
# compile (~10-13 s the first time on 2 cores, then ~0.3 s a process from numba's disk cache). Above it numpy's
# per-term Python grows with the postings (15-19 ms a question at 5.2M passages, 52-66 q/s in issue 24's
# side-by-side, against numba's 5.1 ms), holding the interpreter lock where many threads share it (`evaluate
# --threads`, `serve`). The README's advice: "up to ~1M passages either backend is fast".
AUTO_NUMBA_FROM = 1_000_000
# why numba could not run in this process, once it failed (`BM25Retriever`'s fallback): `auto` then picks numpy
# without compiling and warning again for each index loaded (each cell of a grid, each corpus)
_numba_failure: str | None = None


def _select_backend(model, backend: str, num_docs: int = 0) -> str:
    """numpy (no compile, no numba import) or numba (the pruned scorer in one compiled call a query: several times
    faster on large corpora, compiled once and cached on disk by numba); "auto": numba from `AUTO_NUMBA_FROM`
    passages on when numba is installed, else numpy."""
    if backend not in ("auto", "numpy", "numba"):
        raise ConfigError(f"bm25 backend must be auto, numpy or numba, got {backend!r}")
    if backend == "auto":
        from ragzoo.retrieval.bm25_packed import numba_installed

        if num_docs >= AUTO_NUMBA_FROM and _numba_failure is not None:
            logger.info("bm25 backend auto: numpy, numba could not run in this process (%s)", _numba_failure)
            return "numpy"
        return "numba" if num_docs >= AUTO_NUMBA_FROM and numba_installed() else "numpy"
    if backend == "numba":
        from ragzoo.retrieval.bm25_packed import require_numba

        require_numba("the numba bm25 backend")
    return backend


def _numba_cannot_run(error: BaseException) -> bool:
    """Whether `error` says numba cannot run here (it does not import, compile, or find a folder to cache in),
    rather than a fault of the index (stale block files: a ConfigError) or of ragzoo, or no memory."""
    from ragzoo.retrieval.bm25_packed import NumbaUnavailable

    if isinstance(error, (ImportError, OSError, NumbaUnavailable)):
        return True
    try:
        from numba.core.errors import NumbaError
    except ImportError:
        NumbaError = ()  # noqa: N806 - no numba to raise its errors
    if NumbaError and isinstance(error, NumbaError):
        return True
    return isinstance(error, RuntimeError) and "cannot cache" in str(error)


class BM25Retriever(BaseRetriever):
    """BM25 over a built index folder. `n_threads` threads answer batches (0 = the calling thread)."""

    def __init__(self, index_dir: Path, spec: str = "", n_threads: int = 0, check_stale: bool = True,
                 backend: str = "auto", index_format: str | None = None):
        import bm25s

        from ragzoo.retrieval import bm25_packed

        self.index_dir = Path(index_dir)
        self.meta = index_cache.read_meta(self.index_dir, BACKEND)
        self.index_format = index_format_of(self.meta)
        if index_format is not None and bm25_packed.check_format(index_format) != self.index_format:
            raise ConfigError(f"{self.index_dir} is a {self.index_format} bm25 index, not {index_format}; build "
                              f"one with `ragzoo index build --corpus FILE --format {index_format}`")
        if check_stale:
            index_cache.check_not_stale(self.meta, self.index_dir)
        self.settings = BM25Settings(**self.meta["settings"])
        self.spec = spec or f"bm25:{self.index_dir}"
        self.n_threads = n_threads
        self.pruned = None
        self._pool = None
        if self.index_format == bm25_packed.FORMAT:
            # compressed postings, scored in one compiled call per query whatever `backend` says
            self.model = None
            self.backend = "numba"
            self.pruned = bm25_packed.PackedIndex(self.index_dir)
            self.vocab = bm25_packed.SortedVocab(self.index_dir) if (self.index_dir / bm25_packed.VOCAB_IDS).exists() \
                else json.loads((self.index_dir / "vocab.index.json").read_text(encoding="utf-8"))
            if len(self.vocab):  # term 0 exists: numba compiles now, not in the first questions' --deadline
                try:
                    self.pruned.compile()
                except Exception as error:  # noqa: BLE001 - sorted by _numba_cannot_run
                    if not _numba_cannot_run(error):
                        raise
                    raise ConfigError(f"the packed bm25 format needs numba, which cannot run here "
                                      f"({error_line(error)})") from None
        else:
            self.model = bm25s.BM25.load(str(self.index_dir), mmap=True, load_corpus=False)
            self.backend = _select_backend(self.model, backend, int(self.meta["num_docs"]))
            self.vocab = self.model.vocab_dict
            if self.model.nonoccurrence_array is None:  # Lucene BM25 (ours): no per-document constant to add
                from ragzoo.retrieval.bm25_topk import PrunedTopK

                scores = self.model.scores
                term_max = np.load(self.index_dir / TERM_MAX) if (self.index_dir / TERM_MAX).exists() else None
                blocks = bm25_packed.read_csc_blocks(self.index_dir)  # read once, whichever scorer takes them

                def scorer(kernels: str) -> PrunedTopK:
                    return PrunedTopK(scores["data"], scores["indices"], scores["indptr"], scores["num_docs"],
                                      blocks=blocks, kernels=kernels, term_max=term_max)

                try:
                    self.pruned = scorer(self.backend)
                    # numba compiles now (~10-13 s the first time), not in the first questions' --deadline
                    self.pruned.compile()
                except Exception as error:  # noqa: BLE001 - sorted by _numba_cannot_run
                    if self.backend != "numba" or not _numba_cannot_run(error):
                        raise
                    if backend == "numba":  # asked for by name: refused in one line
                        raise ConfigError(f"the numba bm25 backend cannot run here ({error_line(error)}); use "
                                          f"backend=numpy") from None
                    global _numba_failure
                    _numba_failure = error_line(error)
                    logger.warning("numba cannot run here (%s): the bm25 index of %d passages is scored with numpy, "
                                   "several times slower at this size, and so is every index this process loads "
                                   "(backend=numpy chooses it without this warning; NUMBA_CACHE_DIR=<a writable "
                                   "folder> where numba cannot cache)", _numba_failure, int(self.meta["num_docs"]))
                    self.backend = "numpy"
                    self.pruned = scorer("numpy")
            elif self.backend == "numba":
                self.model.backend = "numba"
                self.model.activate_numba_scorer()
        self.num_docs = int(self.meta["num_docs"])
        self.tokenizer = make_tokenizer(self.settings)
        if self.tokenizer.stemmer:
            self.tokenizer.stem_to_sid = self.vocab
        else:
            self.tokenizer.word_to_id = self.vocab if self.model is None else dict(self.vocab)
        self.store = PassageStore(self.index_dir)

    @classmethod
    def from_corpus(cls, corpus: str | Path, settings: BM25Settings = BM25Settings(), spec: str = "",
                    show_progress: bool = True, asked: Iterable[str] = (), **kwargs) -> "BM25Retriever":
        """`asked`: the settings the spec named (k1, b); over an index folder, one its build did not use is
        refused, not dropped (the folder's settings are what a search scores with)."""
        path = index_cache.resolve_corpus(corpus)
        if index_cache.is_index_dir(path):
            built = index_cache.read_meta(path, BACKEND).get("settings") or {}
            index_cache.check_asked_settings(path, {name: getattr(settings, name) for name in asked}, built)
            return cls(path, spec=spec, **kwargs)
        if path.is_dir():
            raise RetrieverError(f"{path} is a folder but not a ragzoo index; pass a corpus JSONL file")
        index_format = kwargs.get("index_format") or "csc"
        if index_format != "csc":
            from ragzoo.retrieval.bm25_packed import check_format

            check_format(index_format)  # before a build: refused in one line without numba
        folder, _meta, _built = ensure_bm25_index(path, settings, show_progress=show_progress,
                                                  index_format=index_format)
        return cls(folder, spec=spec or f"bm25:{corpus}", check_stale=False, **kwargs)

    def __len__(self) -> int:
        return self.num_docs

    WARM_UP_QUERIES = ("who directed the film", "capital city of the country", "album released by the band",
                       "when was the university founded")

    def warm_up(self) -> None:
        """A few searches, single and batched: numba compiles the scorer's loops on the first (or loads them
        from its disk cache), the common terms' largest weights are computed, and the pages of the
        memory-mapped index that those terms touch come in. The whole score matrix is also advised
        MADV_WILLNEED, so the kernel reads it into the page cache in the background instead of query by query."""
        if self.model is None:
            _advise(*self.pruned.maps(), advice="MADV_WILLNEED")
        else:
            _advise(self.model.scores.get("data"), self.model.scores.get("indices"), advice="MADV_WILLNEED")
        for query in self.WARM_UP_QUERIES:
            self._search(query, 10)
        self._search_batch(list(self.WARM_UP_QUERIES), 10)

    def tokenize(self, queries: Sequence[str]) -> list[list[int]]:
        # bm25s's streaming_tokenize(update_vocab=False)'s ids (unknown words and stopwords drop out), from a
        # bounded per-word cache instead of caches that grow with every new query word
        try:
            terms = self._query_terms
        except AttributeError:
            from ragzoo.retrieval.query_terms import QueryTerms

            terms = self._query_terms = QueryTerms.from_tokenizer(self.tokenizer)
        return terms.many(queries)

    def _map(self, function, items: list) -> list:
        """`function` over `items`, on `n_threads` threads when there are several items (each thread keeps its
        own scratch scores)."""
        if self.n_threads < 2 or len(items) < 2:
            return [function(item) for item in items]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.n_threads, thread_name_prefix="bm25")
        return list(self._pool.map(function, items))

    def _search(self, query: str, k: int) -> list[Passage]:
        return self._search_batch([query], k)[0]

    def _search_batch(self, queries: list[str], k: int) -> list[list[Passage]]:
        token_ids = self.tokenize(queries)
        answerable = [i for i, ids in enumerate(token_ids) if ids]
        if not answerable:
            return [[] for _ in queries]  # no query term is in the vocabulary: nothing matches
        asked = token_ids if len(answerable) == len(queries) else [token_ids[i] for i in answerable]
        if self.pruned is None:
            documents, scores = self.model.retrieve(asked, k=min(k, self.num_docs), show_progress=False,
                                                    n_threads=self.n_threads if len(answerable) > 1 else 0)
            documents, scores = list(documents), list(scores)
            for n, row_scores in enumerate(scores):
                if len(row_scores) and not row_scores[-1] > 0:
                    # a zero score means no query term occurs in the passage: not a match, just filler (rows
                    # come best first, so the fillers are a tail; the pruned scorers return matches only)
                    matched = int(np.count_nonzero(row_scores > 0))
                    documents[n], scores[n] = documents[n][:matched], row_scores[:matched]
            rows, scores, counts = np.concatenate(documents), np.concatenate(scores), list(map(len, documents))
        elif self.n_threads >= 2 and len(answerable) > 1:
            documents, scores = zip(*self._map(lambda ids: self.pruned.top_k(ids, k), asked))
            rows, scores, counts = np.concatenate(documents), np.concatenate(scores), list(map(len, documents))
        else:
            rows, scores, counts = self.pruned.top_k_many(asked, k)
        # every hit of the batch in one store call (rows and scores, nothing read yet), then cut per query: at
        # 17.7k passages the per-query Python around the ~30 us kernel is what bm25s's batch does not pay
        hits = self.store.get_many(rows, scores)
        ranked, start = [], 0
        for end in itertools.accumulate(counts):
            ranked.append(hits[start:end])
            start = end
        if len(answerable) == len(queries):
            return ranked
        results: list[list[Passage]] = [[] for _ in queries]
        for slot, slot_hits in zip(answerable, ranked):
            results[slot] = slot_hits
        return results
