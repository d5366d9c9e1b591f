"""The onnx export recipe (issue 15): the fused graph, the int8 graph's quantized ops, the cache being reused,
the shared torch model left as it was, and int8 embeddings that depend on the text alone and stay close to
torch's on real sample passages. Skipped without onnxruntime (`pip install 'ragzoo[onnx]'`)."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from ragzoo.retrieval import onnx_embed  # noqa: E402
from ragzoo.retrieval.dense import DEFAULT_MODEL, _encode, load_encoder, load_model, model_identity  # noqa: E402

TEXTS = [
    "Cat | The domestic cat is a small carnivorous mammal kept as a pet.",
    "Sun | The Sun is the star at the center of the Solar System.",
    "Python (language) | Python is a high-level programming language created by Guido van Rossum, used for "
    "scripting, data analysis and web servers; its syntax stresses readability and its standard library is large.",
    "kitten",
]


def _sample_passages(count: int) -> list[str]:
    """Real passages when the data folder is there (they are longer and harder than TEXTS), else TEXTS."""
    from ragzoo.paths import data_root
    from ragzoo.retrieval.corpus import iter_corpus
    from ragzoo.retrieval.specs import DEFAULT_CORPUS

    try:
        path = data_root() / DEFAULT_CORPUS
        return [p.long_text for p in itertools.islice(iter_corpus(path), count)] if path.exists() else TEXTS
    except Exception:
        return TEXTS


def _ops(path: Path) -> Counter:
    import onnx

    return Counter(node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node)


def _files() -> tuple[Path, Path]:
    return onnx_embed.export_files(load_model(DEFAULT_MODEL), model_identity(DEFAULT_MODEL)[1])


def test_export_is_fused_and_int8_is_quantized():
    fp32, int8 = _files()
    fused = _ops(fp32)
    assert fused["Attention"] == 6 and fused["Softmax"] == 0  # one fused op per layer, no loose attention math
    quantized = _ops(int8)
    assert quantized["QAttention"] == 6 and quantized["MatMulInteger"] == 18  # attention out + both FFN
    assert quantized["MatMul"] == 0 and quantized["Attention"] == 0  # nothing left behind in fp32


def test_export_is_cached_and_reused(monkeypatch):
    fp32, int8 = _files()
    stamps = (fp32.stat().st_mtime_ns, int8.stat().st_mtime_ns)

    def no_export(*_args, **_kwargs):
        raise AssertionError("exported again although the cache holds the files")

    monkeypatch.setattr(onnx_embed, "_export", no_export)
    assert _files() == (fp32, int8)
    assert (fp32.stat().st_mtime_ns, int8.stat().st_mtime_ns) == stamps
    assert not [p for p in fp32.parent.iterdir() if p.name.startswith(".tmp-")]  # no half-made leftovers


def test_cache_key_follows_the_recipe(monkeypatch):
    fp32, _int8 = _files()
    monkeypatch.setattr(onnx_embed, "RECIPE", onnx_embed.RECIPE + "-other")
    monkeypatch.setattr(onnx_embed, "_export", lambda *_a, **_k: (_ for _ in ()).throw(RuntimeError("new key")))
    with pytest.raises(RuntimeError, match="new key"):  # another recipe must not reuse the old files
        _files()
    assert not [p for p in fp32.parent.parent.rglob(".tmp-*")]


def test_export_leaves_the_torch_model_as_it_was():
    model = load_model(DEFAULT_MODEL)
    before_impl = model[0].auto_model.config._attn_implementation
    before = _encode(model, TEXTS)
    folder = onnx_embed.export_files(model, model_identity(DEFAULT_MODEL)[1])[0].parent
    for path in folder.iterdir():  # force a fresh export in this process
        path.unlink()
    onnx_embed.export_files(model, model_identity(DEFAULT_MODEL)[1])
    assert model[0].auto_model.config._attn_implementation == before_impl
    assert np.allclose(_encode(model, TEXTS), before, atol=1e-6)


def test_int8_depends_on_the_text_alone_and_stays_close_to_torch():
    passages = _sample_passages(24)
    reference = _encode(load_encoder(engine="torch"), passages)
    encoder = load_encoder(engine="onnx-int8")
    int8 = _encode(encoder, passages)
    # one text alone embeds exactly like inside a run over many (activation ranges are per run)
    assert np.array_equal(encoder.encode(passages[-1:]), int8[-1:])
    assert np.array_equal(encoder.encode(passages[::-1])[::-1], int8)
    cosine = (int8 * reference).sum(axis=1)
    assert cosine.min() > 0.98 and cosine.mean() > 0.99, (cosine.min(), cosine.mean())
    fp32 = _encode(load_encoder(engine="onnx"), passages)
    assert (fp32 * reference).sum(axis=1).min() > 0.9999


def test_engines_listed():
    assert onnx_embed.ENGINES == ("torch", "onnx", "onnx-int8")
    assert onnx_embed.available()
    assert os.environ.get("RAGZOO_CACHE")  # the session fixture keeps exports out of the home cache
