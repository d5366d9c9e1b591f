"""The onnx dense engines: engine parsing and cache keys always; the local export, fp32 / int8 embeddings
against torch's, and a dense index built with `model=...@onnx-int8` only when onnxruntime is installed
(`pip install 'ragzoo[onnx]'`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragzoo.errors import ConfigError
from ragzoo.retrieval.dense import _settings, split_engine

DOCS = [
    ("cat", "Cat", "The domestic cat is a small carnivorous mammal kept as a pet."),
    ("car", "Automobile", "A car is a motor vehicle with four wheels used for transport."),
    ("sun", "Sun", "The Sun is the star at the center of the Solar System."),
    ("bread", "Bread", "Bread is a staple food prepared from a dough of flour and water."),
    ("piano", "Piano", "The piano is a keyboard instrument whose strings are struck by hammers."),
    ("python", "Python (language)", "Python is a high-level programming language created by Guido van Rossum, "
                                    "used for scripting, data analysis and web servers; its syntax stresses "
                                    "readability and its standard library is large."),
]

needs_onnx = pytest.mark.skipif(
    __import__("importlib").util.find_spec("onnxruntime") is None,
    reason="onnxruntime is not installed (optional extra: pip install 'ragzoo[onnx]')")


def test_engine_parsing_and_cache_key():
    assert split_engine("all-MiniLM-L6-v2") == ("all-MiniLM-L6-v2", "torch")
    assert split_engine("all-MiniLM-L6-v2@onnx-int8") == ("all-MiniLM-L6-v2", "onnx-int8")
    assert split_engine("minilm", "onnx") == ("minilm", "onnx")
    assert split_engine("org/model@v2") == ("org/model@v2", "torch")  # not an engine: part of the name
    with pytest.raises(ConfigError):
        split_engine("minilm", "tensorrt")
    with pytest.raises(ConfigError):
        split_engine("minilm@onnx", "onnx-int8")
    torch_key = _settings("all-MiniLM-L6-v2")
    assert "engine" not in torch_key  # torch indexes keep the key they had before engines existed
    assert _settings("all-MiniLM-L6-v2", "onnx-int8") == {**torch_key, "engine": "onnx-int8"}
    assert _settings("all-MiniLM-L6-v2", "onnx") != _settings("all-MiniLM-L6-v2", "onnx-int8")


@needs_onnx
def test_onnx_engines_match_torch_and_index(tmp_path):
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.dense import _encode, ensure_dense_index, load_encoder

    texts = [f"{title} | {text}" for _pid, title, text in DOCS] + ["kitten", "a bright star in space"]
    reference = _encode(load_encoder(engine="torch"), texts)
    fp32 = _encode(load_encoder(engine="onnx"), texts)
    int8 = _encode(load_encoder(engine="onnx-int8"), texts)
    assert fp32.shape == reference.shape and fp32.dtype == np.float32
    assert np.allclose(np.linalg.norm(int8, axis=1), 1, atol=1e-4)
    assert (fp32 * reference).sum(axis=1).min() > 0.9999
    assert (int8 * reference).sum(axis=1).min() > 0.95
    # order and batch do not matter: one text alone embeds like inside a padded batch
    assert np.allclose(_encode(load_encoder(engine="onnx"), texts[-1:]), fp32[-1:], atol=1e-5)

    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(json.dumps({"id": p, "title": t, "text": x}) + "\n" for p, t, x in DOCS))
    retriever = make_retriever(f"dense:{corpus}?model=all-MiniLM-L6-v2@onnx-int8", show_progress=False)
    assert retriever.meta["engine"] == "onnx-int8" and retriever.meta["settings"]["engine"] == "onnx-int8"
    assert retriever("a kitten that lives with people", 1)[0].pid == "cat"
    assert retriever("writing software code", 1)[0].pid == "python"
    torch_folder, _meta, _built = ensure_dense_index(corpus, show_progress=False)
    assert torch_folder != retriever.index_dir  # different embeddings, different cache entry
    _folder, _meta, built = ensure_dense_index(corpus, engine="onnx-int8", show_progress=False)
    assert not built and _folder == retriever.index_dir
