"""Retrievers from spec strings.

    bm25:<corpus.jsonl | index-dir>[?k1=0.9&b=0.4][&backend=auto|numba|numpy][&threads=2][&format=packed]
                                                      the embedded default (no service needed); numba
                                                      compiles the scorer (faster on big corpora; auto:
                                                      numba from 1M passages when installed);
                                                      threads answer a batch's queries in parallel;
                                                      format=packed: compressed postings (bm25_packed)
    dense:<corpus.jsonl | index-dir>[?model=NAME]     sentence-transformers + faiss
    hybrid:<corpus.jsonl>[?model=NAME]                reciprocal-rank fusion of bm25 and dense
    colbertv2:http://host:port/path                   the ColBERTv2 REST API (e.g. `ragzoo serve`)
    colbert:<index-dir>                               a local colbert-ai (PLAID) index, extra [colbert]
    fixed                                             passages recorded per question (examples=... / by_question=...)

Corpus paths may be relative to RAGZOO_DATA, e.g. `bm25:hotpotqa/corpus_wiki17_abstracts.jsonl`.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from ragzoo.errors import ConfigError
from ragzoo.retrieval.base import Retriever

# The one place the default is defined: every command, benchmark and example takes it from here.
DEFAULT_CORPUS = "hotpotqa/corpus_wiki17_abstracts.jsonl"  # the wiki17 abstracts sample, under RAGZOO_DATA
DEFAULT_RETRIEVER = f"bm25:{DEFAULT_CORPUS}"

SPEC_FORMS = ("bm25:<corpus.jsonl>", "dense:<corpus.jsonl>[?model=NAME]", "hybrid:<corpus.jsonl>",
              "colbertv2:http://host:port/path", "colbert:<index-dir>", "fixed")


def _split_options(rest: str) -> tuple[str, dict[str, str]]:
    target, sep, query = rest.partition("?")
    if not sep:
        return target, {}
    pairs = parse_qsl(query, keep_blank_values=True)
    repeated = sorted({name for name, _ in pairs if sum(1 for other, _ in pairs if other == name) > 1})
    if repeated:  # which one was meant? not the last one silently
        raise ConfigError(f"retriever spec option(s) {repeated} given twice in {rest!r}; give each once")
    return target, dict(pairs)


# the range of each numeric option of a spec: BM25's k1 >= 0 (term-frequency saturation), b in [0, 1] (length
# normalisation); a value outside it gives scores that rank nothing (k1=-1, b=5: every score inf)
_OPTION_RANGES = {"k1": (0.0, None), "b": (0.0, 1.0)}


def _float_options(options: dict[str, str], names: tuple[str, ...], spec: str) -> dict[str, float]:
    import math

    unknown = set(options) - set(names)
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)} in retriever spec {spec!r}; known: {list(names)}")
    try:
        values = {name: float(value) for name, value in options.items()}
    except ValueError:
        raise ConfigError(f"retriever spec {spec!r}: options must be numbers") from None
    for name, value in values.items():
        low, high = _OPTION_RANGES.get(name, (None, None))
        if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}" if low is not None else "finite"
            raise ConfigError(f"retriever spec {spec!r}: {name}={options[name]} must be a finite number {bounds}")
    return values


def make_retriever(spec: str, **kwargs) -> Retriever:
    """Build a retriever from `spec`; keyword arguments go to the backend (e.g. `show_progress=False`,
    `post=True` for colbertv2, `examples=`/`by_question=` for fixed)."""
    scheme, target, options = _plan(spec, kwargs)
    if scheme == "fixed":
        return _make_fixed(target, kwargs)
    if scheme == "bm25":
        from ragzoo.retrieval.bm25 import BM25Retriever

        return BM25Retriever.from_corpus(target, spec=spec.strip(), **options, **kwargs)
    if scheme == "dense":
        from ragzoo.retrieval.dense import DenseRetriever

        return DenseRetriever.from_corpus(target, spec=spec.strip(), **options, **kwargs)
    if scheme == "hybrid":
        from ragzoo.retrieval.hybrid import HybridRetriever

        return HybridRetriever.from_corpus(target, spec=spec.strip(), **options, **kwargs)
    if scheme == "colbertv2":
        from ragzoo.retrieval.colbertv2 import ColBERTv2Client

        return ColBERTv2Client(target, spec=spec.strip(), **kwargs)
    from ragzoo.retrieval.colbert_local import ColBERTLocalRetriever

    return ColBERTLocalRetriever(target, spec=spec.strip(), **kwargs)


def check_spec(spec: str) -> None:
    """What `make_retriever` refuses before it reads or builds anything (the spec's form, scheme and options),
    and a corpus that is not there: a grid checks every cell's retriever before any cell runs."""
    from ragzoo.retrieval.index_cache import resolve_corpus

    scheme, target, _options = _plan(spec, {})
    if scheme in ("bm25", "dense", "hybrid"):
        resolve_corpus(target)


def _plan(spec: str, kwargs: dict) -> tuple[str, str, dict]:
    """(scheme, target, the backend's options) of `spec`, every option checked; `kwargs` takes the options that
    are build arguments (a bm25 index's format and threads)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"empty retriever spec; valid forms: {', '.join(SPEC_FORMS)}")
    from ragzoo.secrets import strip_spec

    spec = spec.strip()
    shown = strip_spec(spec)  # what a refusal names: a URL's credentials never (and registered for redaction)
    scheme, sep, rest = spec.partition(":")
    scheme = scheme.lower()
    if scheme == "fixed":
        return scheme, rest, {}
    if scheme in ("http", "https") and sep and rest:
        raise ConfigError(f"a URL needs the colbertv2: prefix: use 'colbertv2:{shown}'")
    if not sep or not rest or scheme not in ("bm25", "dense", "hybrid", "colbertv2", "colbert"):
        raise ConfigError(f"unknown retriever spec {shown!r}; valid forms: {', '.join(SPEC_FORMS)}")
    if scheme in ("colbertv2", "colbert"):
        return scheme, rest, {}
    target, options = _split_options(rest)
    if scheme != "bm25":
        return scheme, target, _model_option(options, spec)
    from dataclasses import replace

    from ragzoo.retrieval.bm25 import BM25Settings

    backend = options.pop("backend", "auto")
    if "format" in options:
        kwargs.setdefault("index_format", options.pop("format"))
    threads = options.pop("threads", None)
    if threads is not None:
        if not threads.isdigit() or not 1 <= int(threads) <= 64:
            raise ConfigError(f"retriever spec {spec!r}: threads must be a whole number from 1 to 64")
        kwargs.setdefault("n_threads", int(threads))
    asked = _float_options(options, ("k1", "b"), spec)
    return scheme, target, {"settings": replace(BM25Settings(), **asked), "backend": backend, "asked": tuple(asked)}


def _model_option(options: dict[str, str], spec: str) -> dict[str, str]:
    unknown = set(options) - {"model"}
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)} in retriever spec {spec!r}; known: ['model']")
    return {"model": options["model"]} if options.get("model") else {}


def _make_fixed(rest: str, kwargs: dict) -> Retriever:
    from ragzoo.retrieval.fixed import FixedRetriever

    if "by_question" in kwargs:
        return FixedRetriever(kwargs.pop("by_question"))
    if "examples" in kwargs:
        return FixedRetriever.from_examples(kwargs.pop("examples"), field=kwargs.pop("field", rest or "retrieved"))
    raise ConfigError("the 'fixed' retriever replays passages recorded on a dataset's examples; it needs "
                      "examples=... (or by_question=...), e.g. from a dataset with a 'retrieved' field")
