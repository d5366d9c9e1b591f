"""`ownership.claim` on a read-only folder, with and without a caller's `remedy` (a mutant of the default
`read_only_remedy` survived tests/core/test_ownership_remedy.py): without one the advice is what it always was,
with `remedy` alone it ends with "make it writable or <remedy>", never with "None"."""

from __future__ import annotations

import os

import pytest

from ragzoo.errors import ConfigError
from ragzoo.ownership import claim


def _read_only_refusal(path, monkeypatch, **options) -> str:
    monkeypatch.setattr(os, "access", lambda _path, _mode: False)  # tests run as root: nothing is read-only
    with pytest.raises(ConfigError) as refused:
        claim(path, "run", **options)
    return str(refused.value)


def test_a_read_only_folder_without_a_remedy_is_told_to_choose_another_flag(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _read_only_refusal(empty, monkeypatch, flag="--out") == \
        f"--out {empty} is read-only; make it writable or choose another --out"


def test_a_read_only_folder_with_a_remedy_alone_ends_with_that_remedy(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _read_only_refusal(empty, monkeypatch, flag="--out", remedy="pass --fresh to start over")
    assert message == f"--out {empty} is read-only; make it writable or pass --fresh to start over"
