"""Every damaged or mismatched artifact is refused with ArtifactError and a clear message; nothing half-loads."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo import programs
from ragzoo.artifacts import FORMAT_VERSION, load, save
from ragzoo.errors import ArtifactError


@pytest.fixture
def artifact(tmp_path, tiny_retriever):
    program = programs.get("_tinyqa", retriever=tiny_retriever, k=3)
    program.answer.demos = [dspy.Example(context=["c"], question="q?", answer="a")]
    return save(program, tmp_path / "art", dataset="toy")


def _edit_manifest(path, **changes):
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_roundtrip_keeps_knobs_and_demos(artifact, tiny_retriever):
    program = load(artifact, retriever=tiny_retriever)
    assert program.k == 3 and program.answer.demos[0]["answer"] == "a"
    assert json.loads((artifact / "manifest.json").read_text())["knobs"] == {"k": 3}


def test_other_method_refused(artifact, tiny_retriever):
    with pytest.raises(ArtifactError, match="holds a compiled '_tinyqa' program, not 'rag'"):
        load(artifact, retriever=tiny_retriever, method="rag")


def test_changed_signature_refused(artifact, tiny_retriever):
    _edit_manifest(artifact, signature_hashes={"answer": "0" * 64})
    with pytest.raises(ArtifactError, match="signature of answer changed"):
        load(artifact, retriever=tiny_retriever)


def test_predictor_set_change_refused(artifact, tiny_retriever):
    _edit_manifest(artifact, signature_hashes={"answer": "0" * 64, "filter": "1" * 64})
    with pytest.raises(ArtifactError, match="changed since compilation"):
        load(artifact, retriever=tiny_retriever)


@pytest.mark.parametrize("damage", ["truncate", "edit", "garbage"])
def test_corrupt_program_refused(artifact, tiny_retriever, damage):
    path = artifact / "program.json"
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "edit": data.replace(b'"a"', b'"b"'),
                      "garbage": b"\x00\xff not json"}[damage])
    with pytest.raises(ArtifactError, match="sha256"):
        load(artifact, retriever=tiny_retriever)


def test_truncated_manifest_refused(artifact, tiny_retriever):
    text = (artifact / "manifest.json").read_text()
    (artifact / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="corrupt or truncated"):
        load(artifact, retriever=tiny_retriever)


def test_newer_format_refused(artifact, tiny_retriever):
    _edit_manifest(artifact, format_version=FORMAT_VERSION + 1)
    with pytest.raises(ArtifactError, match="newer ragzoo"):
        load(artifact, retriever=tiny_retriever)


def test_missing_files_and_fields_refused(artifact, tiny_retriever, tmp_path):
    with pytest.raises(ArtifactError, match="not a compiled-program directory"):
        load(tmp_path / "nowhere")
    _edit_manifest(artifact, method=None)
    with pytest.raises(ArtifactError, match="lacks a valid 'method'"):
        load(artifact, retriever=tiny_retriever)
    (artifact / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        load(artifact, retriever=tiny_retriever)


def test_state_of_another_program_refused(artifact, tiny_retriever):
    import hashlib

    foreign = json.dumps({"other.predict": {"demos": []}}).encode()
    (artifact / "program.json").write_bytes(foreign)
    _edit_manifest(artifact, program_sha256=hashlib.sha256(foreign).hexdigest())
    with pytest.raises(ArtifactError, match="does not fit this method"):
        load(artifact, retriever=tiny_retriever)


def test_knob_mismatch_and_unrebuildable_retriever(artifact, tiny_retriever):
    with pytest.raises(ArtifactError, match="compiled with k=3, not 5"):
        load(artifact, retriever=tiny_retriever, knobs={"k": 5})
    with pytest.raises(ArtifactError, match="cannot be rebuilt"):
        load(artifact)  # saved with the test's StaticRetriever: no spec to rebuild it from


def test_save_refuses_existing_and_leaves_no_partial_dir(artifact, tiny_retriever):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    with pytest.raises(ArtifactError, match="already exists"):
        save(program, artifact)
    save(program, artifact, overwrite=True)
    assert load(artifact, retriever=tiny_retriever).answer.demos == []
    assert sorted(p.name for p in artifact.parent.iterdir()) == ["art"]
    assert sorted(p.name for p in artifact.iterdir()) == [".ragzoo-folder.json", "manifest.json", "program.json"]


@pytest.mark.parametrize("name", [".art.building-123-456-abc", ".art.old-123-456"])
def test_a_complete_copy_left_by_a_killed_swap_is_not_loaded(artifact, tiny_retriever, tmp_path, name):
    # a compile killed after writing manifest.json into its staging folder (or before dropping the backup of the
    # artifact it replaced) leaves a folder whose files are complete: it still must not pass for the artifact
    import shutil

    copy = tmp_path / name
    shutil.copytree(artifact, copy)
    load(artifact, retriever=tiny_retriever)  # the original loads
    with pytest.raises(ArtifactError, match="unfinished build or the backup"):
        load(copy, retriever=tiny_retriever)


@pytest.mark.parametrize("edit, says", [
    ({"lm": {"model": "openai/other-model", "model_type": "chat", "temperature": 1.7}}, "names an LM of its own"),
    ({"forward": "x"}, "keys DSPy does not save"),
    ({"config": {"n": 5, "temperature": 2.0}}, "keys DSPy does not save"),
    ({"traces": "x"}, "traces of"),
    ({"signature": {"instructions": 5, "fields": []}}, "signature of"),  # loaded, then failed every question
    ({"signature": {"instructions": "Answer.", "fields": [{"prefix": 7}]}}, "signature of"),
    ({"signature": "x"}, "signature of"),
])
def test_an_edited_predictor_state_is_refused(artifact, tiny_retriever, edit, says):
    """The program file, edited with its manifest's sha256 redone: an `lm` of its own would answer instead of the
    command's --lm, with the user's key and past every budget (found by review: a question sent to
    api.openai.com under --lm dry-run); any other key would be set on the predictor as it stands."""
    import hashlib

    state = json.loads((artifact / "program.json").read_text())
    name = next(key for key in state if key != "metadata")
    state[name].update(edit)
    data = json.dumps(state).encode()
    (artifact / "program.json").write_bytes(data)
    _edit_manifest(artifact, program_sha256=hashlib.sha256(data).hexdigest())
    with pytest.raises(ArtifactError, match=says):
        load(artifact, retriever=tiny_retriever)
