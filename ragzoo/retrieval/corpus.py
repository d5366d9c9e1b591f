"""Streaming corpus reader shared by every index builder (only retrieval reads corpora).

Two line formats are read, detected per line:
- `{"id", "title", "text": str, ...}`: the samples shipped in `RAGZOO_DATA` (pid = `id`);
- `{"title", "text": [sentence, ...]}`: the full 2017 Wikipedia abstracts release. Its sentences carry their
  own leading spaces (" In it, ..."), so they are joined with "" (checked against the sample, whose `text`
  equals the "".join of the HotPotQA sentences). Without an `id`, pid = the 0-based line index, which is the
  passage id ColBERTv2's `wiki17_abstracts` collection uses.

`count_lines(path)` (from `ragzoo.data.records`) counts the passages cheaply for progress bars. The import
runs one way only: retrieval uses `ragzoo.data.records`; `ragzoo.data` never imports `ragzoo.retrieval`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import ujson

from ragzoo.data.records import check_file, count_lines
from ragzoo.errors import DataError
from ragzoo.retrieval.base import Passage

__all__ = ["count_lines", "iter_corpus"]

_CORE_FIELDS = ("id", "title", "text")


def iter_corpus(path: str | os.PathLike, *, with_meta: bool = False) -> Iterator[Passage]:
    """Yield one `Passage` per line, in file order, in bounded memory.

    with_meta: keep the line's other fields (e.g. `sources`, the original `pid`) in `Passage.meta`.
    Raises `DataError` (with file:line) for a missing or empty file, bad UTF-8, a malformed line, a line
    without a string `title` or without `text` (string or list of strings), and a duplicate `id`.
    """
    path: Path = check_file(path)
    seen_ids: set[str] = set()
    yielded = 0
    with open(path, "rb") as handle:
        for index, raw in enumerate(handle):
            where = f"{path}:{index + 1}"
            if not raw.strip():
                continue
            try:
                data = ujson.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from None
            except ValueError as error:
                raise DataError(f"{where}: malformed JSON ({error})") from None
            if not isinstance(data, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
            title = data.get("title")
            if not isinstance(title, str):
                raise DataError(f"{where}: missing string field 'title'")
            text = data.get("text")
            if isinstance(text, list):
                if not all(isinstance(sentence, str) for sentence in text):
                    raise DataError(f"{where}: field 'text' must be a string or a list of strings")
                text = "".join(text)
            elif not isinstance(text, str):
                raise DataError(f"{where}: missing field 'text' (a string or a list of sentences)")
            raw_id = data.get("id")
            if raw_id is None:
                pid = str(index)
            else:
                pid = str(raw_id)
                if pid in seen_ids:
                    raise DataError(f"{where}: duplicate id {pid!r}; passage ids must be unique")
                seen_ids.add(pid)
            meta = {key: value for key, value in data.items() if key not in _CORE_FIELDS} if with_meta else {}
            yielded += 1
            yield Passage(pid=pid, title=title.strip(), text=text.strip(), meta=meta)
    if yielded == 0:
        raise DataError(f"{path}: no passages (only blank lines)")
