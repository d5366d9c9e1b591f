"""ONNX Runtime embedding for dense retrieval: the same sentence-transformers model, exported locally to
ONNX (no download), optionally quantized to int8, run on CPU with onnxruntime.

    engine "onnx"       fp32 ONNX graph (embeddings equal torch's to ~1e-6)
    engine "onnx-int8"  dynamic int8 quantization (per-channel int8 weights, per-run uint8 activations) of
                        the same graph: faster, slightly different embeddings (top-5 agreement with torch
                        ~0.89 on HotPotQA questions over 1,000 sample passages; see benchmarks/embedding.py)

The graph is exported with eager attention so the onnxruntime transformer optimizer fuses each layer into
Attention / SkipLayerNormalization / BiasGelu ops (and quantization then yields QAttention), which is what
makes both engines faster than the unfused export of the default (sdpa) attention. The exported files are
cached under `ragzoo.paths.cache_root()/onnx/<model key>/` and made once per model (export takes a few
seconds). Pooling and normalization follow the sentence-transformers pipeline of the packaged
all-MiniLM-L6-v2 (mean over non-padding tokens, then L2 normalization); models with another pooling are
refused. Needs the optional extra: `pip install 'ragzoo[onnx]'`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from ragzoo.errors import ConfigError

ENGINES = ("torch", "onnx", "onnx-int8")
# part of the cache key: bump when the export / optimization / quantization recipe changes
RECIPE = "eager-fused-v2"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_encoders: dict[tuple[str, str], "OnnxEncoder"] = {}
_lock = threading.Lock()


def available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _require_onnx():
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError("the onnx dense engines need onnxruntime: install ragzoo[onnx]")
    return onnxruntime


def _check_pipeline(model) -> None:
    """Refuse models whose pooling this module does not reproduce (mean pooling, optional Normalize)."""
    names = [type(module).__name__ for module in model]
    if names[:2] != ["Transformer", "Pooling"] or any(n not in ("Transformer", "Pooling", "Normalize") for n in names):
        raise ConfigError(f"onnx engine supports Transformer + mean Pooling (+ Normalize) models, not {names}")
    pooling = model[1]
    mode = getattr(pooling, "get_pooling_mode_str", lambda: getattr(pooling, "pooling_mode", "mean"))()
    if "mean" not in str(mode) or any(getattr(pooling, flag, False) for flag in
                                      ("pooling_mode_cls_token", "pooling_mode_max_tokens")):
        raise ConfigError(f"onnx engine supports mean pooling only, not {mode!r}")


def export_files(model, identity: str) -> tuple[Path, Path]:
    """(fp32 path, int8 path) for a loaded SentenceTransformer, exported and quantized once into the cache."""
    from ragzoo.paths import cache_root, writable_cache_root

    onnxruntime = _require_onnx()
    label = f"{identity}|onnxruntime={onnxruntime.__version__}|recipe={RECIPE}"
    key = hashlib.sha256(label.encode()).hexdigest()[:16]
    folder = cache_root() / "onnx" / key
    fp32, int8 = folder / "model.onnx", folder / "model-int8.onnx"
    if fp32.exists() and int8.exists():
        return fp32, int8
    writable_cache_root("onnx")  # only into ragzoo's cache root
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{os.getpid()}-{threading.get_ident()}"
    tmp.mkdir(exist_ok=True)
    try:
        _export(model, tmp / "raw.onnx")
        _optimize(tmp / "raw.onnx", tmp / "model.onnx", model)
        _quantize(tmp / "model.onnx", tmp / "model-int8.onnx")
        os.replace(tmp / "model.onnx", fp32)  # atomic: a reader never sees a partial file
        os.replace(tmp / "model-int8.onnx", int8)
    finally:
        for leftover in tmp.iterdir():
            leftover.unlink()
        tmp.rmdir()
    return fp32, int8


@contextlib.contextmanager
def _eager_attention(transformer):
    """Trace with eager attention: the optimizer fuses its MatMul/Softmax pattern into one Attention op, but
    not the sdpa export's. The model object is shared with the torch engine, so its setting is restored."""
    before = getattr(transformer.config, "_attn_implementation", None)
    switch = getattr(transformer, "set_attn_implementation", None)
    if switch is None or before in (None, "eager"):
        yield
        return
    switch("eager")
    try:
        yield
    finally:
        switch(before)


def _export(model, path: Path) -> None:
    import warnings

    import torch

    transformer = model[0].auto_model.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = model.tokenizer(["an example passage to trace", "short"], padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad(), _eager_attention(transformer):
        warnings.simplefilter("ignore")
        # the TorchScript exporter: no onnxscript dependency, and it handles this BERT graph
        torch.onnx.export(LastHidden(transformer), tuple(sample[name] for name in _INPUTS), str(path),
                          input_names=list(_INPUTS), output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


def _optimize(source: Path, target: Path, model) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    config = model[0].auto_model.config
    optimized = optimize_model(str(source), model_type="bert", num_heads=int(config.num_attention_heads),
                               hidden_size=int(config.hidden_size))
    optimized.save_model_to_file(str(target))


def _quantize(source: Path, target: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))  # quiet its "consider pre-processing" hint, then restore
    try:
        # Attention -> QAttention, MatMul -> MatMulInteger; the embedding Gather is left in fp32 (no speed
        # to gain there). Measured alternatives were no better: per-tensor weights (top-5 agreement 0.75),
        # reduce_range (0.88), QUInt8 weights (0.89), SmoothQuant-style scaling (<= 0.86), fp32 FFN-output
        # in layers 0-2 (0.91, slower), batch size 1 vs 32 (same).
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"],
                         extra_options={"DefaultTensorType": 1})  # 1 = FLOAT, for the fused ops' outputs
    finally:
        root.setLevel(level)


def _batch_size(engine: str) -> int:
    """Texts per onnxruntime run: one. Dynamic int8 quantizes activations with one range per run, so in a
    batch a passage's embedding would depend on its neighbours (and their padding); one text per run makes
    it a function of the text alone. It is also faster for both engines on 2 cores (no padding tokens at
    all): measured 1.4-1.5x over length-sorted batches of 32 for fp32 and int8 alike."""
    return 1


class OnnxEncoder:
    """Encodes like `SentenceTransformer.encode(..., normalize_embeddings=True)`, with onnxruntime."""

    def __init__(self, model, identity: str, engine: str, threads: int | None = None):
        if engine not in ("onnx", "onnx-int8"):
            raise ConfigError(f"unknown onnx engine {engine!r}; known: onnx, onnx-int8")
        onnxruntime = _require_onnx()
        _check_pipeline(model)
        self.engine = engine
        self.tokenizer = model.tokenizer
        self.max_seq_length = int(model.max_seq_length)
        fp32, int8 = export_files(model, identity)
        options = onnxruntime.SessionOptions()
        if not threads:
            from ragzoo.machine import usable_cpus

            threads = usable_cpus()  # the CPUs this process may use (affinity, a container's quota), not the host's
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = int8 if engine == "onnx-int8" else fp32
        self.batch_size = _batch_size(engine)
        self.session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self._feeds = [i.name for i in self.session.get_inputs()]

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        texts = list(texts)
        batch_size = batch_size or self.batch_size
        out = np.zeros((len(texts), 0), dtype=np.float32)
        # longest first, like sentence-transformers: batches of similar length pad little
        order = np.argsort([-len(text) for text in texts], kind="stable")
        for first in range(0, len(texts), batch_size):
            rows = order[first:first + batch_size]
            tokens = self.tokenizer([texts[row] for row in rows], padding=True, truncation=True,
                                    max_length=self.max_seq_length, return_tensors="np")
            feeds = {name: np.asarray(tokens[name], dtype=np.int64) for name in self._feeds}
            hidden = self.session.run(None, feeds)[0]
            mask = tokens["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
        return np.ascontiguousarray(out, dtype=np.float32)


def load_onnx_encoder(model, identity: str, engine: str) -> OnnxEncoder:
    """One encoder per (model, engine) per process."""
    with _lock:
        if (identity, engine) not in _encoders:
            _encoders[(identity, engine)] = OnnxEncoder(model, identity, engine)
        return _encoders[(identity, engine)]
