"""Streaming corpus reader shared by every index builder (only retrieval reads corpora).

Accepted shapes (JSONL detected per line; a `.tsv` file is read as TSV):
- `{"id", "title", "text": str, ...}`: the samples shipped in `RAGZOO_DATA`, BEIR's `corpus.jsonl` (`_id`);
- `{"title", "text": [sentence, ...]}`: the full 2017 Wikipedia abstracts release. Its sentences carry their
  own leading spaces (" In it, ..."), so they are joined with "" (checked against the sample, whose `text`
  equals the "".join of the HotPotQA sentences);
- `{"id" | "pid", "text": "Title | abstract"}` (no `title`): ColBERTv2's collections, whose passages are
  "title | text"; the title is what precedes the first " | " (none: an untitled passage);
- TSV `pid<TAB>text<TAB>title` (DPR's `psgs_w100.tsv`, with its `id text title` header and CSV-quoted text) or
  `pid<TAB>text` (ColBERT's `collection.tsv`, text "Title | abstract" as above).

Passage ids are the collection's own: `id`, else `pid`, else `_id`, else the 0-based line index (blank lines
count), which is the passage id ColBERTv2's `wiki17_abstracts` collection uses for the 2017 release. A JSON
line that has two of them keeps the others in `meta` (the shipped sample's `pid` is the original collection's).

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

_ID_FIELDS = ("id", "pid", "_id")
_TITLE_SEPARATOR = " | "  # ColBERTv2's long_text: "title | text"
_TSV_HEADERS = ({"id", "text", "title"}, {"pid", "text", "title"}, {"id", "text"}, {"pid", "text"})


def iter_corpus(path: str | os.PathLike, *, with_meta: bool = False, progress=None) -> Iterator[Passage]:
    """Yield one `Passage` per line, in file order, in bounded memory.

    with_meta: keep the line's other fields (e.g. `sources`, the original `pid`) in `Passage.meta`.
    progress: the caller's tqdm bar, ended before an error propagates so that the error is printed on a line
    of its own, not glued to the bar.
    Raises `DataError` (with file:line) for a missing or empty file, bad UTF-8, a malformed line, a line
    without text (string or list of strings) or without a title where one is needed, and a duplicate id.
    """
    try:
        yield from _passages(path, with_meta)
    except DataError:
        if progress is not None:
            progress.close()
        raise


def _passages(path: str | os.PathLike, with_meta: bool) -> Iterator[Passage]:
    path: Path = check_file(path)
    rows = _tsv_rows(path) if path.suffix.lower() == ".tsv" else _json_rows(path, with_meta)
    seen_ids: set[str] = set()
    yielded = 0
    for where, index, pid, title, text, meta in rows:
        implicit = pid is None
        if implicit:
            pid = str(index)  # its position: which another passage's explicit id may already be
        if pid in seen_ids:
            raise DataError(f"{where}: duplicate id {pid!r}" + (" (this passage has no id: its position is its id)"
                                                                if implicit else "") + "; passage ids must be unique")
        seen_ids.add(pid)
        yielded += 1
        yield Passage(pid=pid, title=title.strip(), text=text.strip(), meta=meta)
    if yielded == 0:
        raise DataError(f"{path}: no passages (only blank lines)")


def _split_title(text: str) -> tuple[str, str]:
    title, sep, rest = text.partition(_TITLE_SEPARATOR)
    return (title, rest) if sep else ("", text)


def _lines(path: Path) -> Iterator[tuple[str, int, str]]:
    with open(path, "rb") as handle:
        for index, raw in enumerate(handle):
            where = f"{path}:{index + 1}"
            if not raw.strip():
                continue
            try:
                yield where, index, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from None


def _json_rows(path: Path, with_meta: bool):
    # the hot loop of a 5M-line build: reads inline rather than through `_lines`
    with open(path, "rb") as handle:
        for index, raw in enumerate(handle):
            if not raw.strip():
                continue
            where = f"{path}:{index + 1}"
            if index == 0 and raw.startswith(b"\xef\xbb\xbf"):  # a byte-order mark, as question files allow
                raw = raw[3:]
            try:
                data = ujson.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from None
            except ValueError as error:
                raise DataError(f"{where}: malformed JSON ({error})") from None
            if b"\\ud" in raw or b"\\uD" in raw:  # a surrogate escape: valid JSON, but alone not valid Unicode
                _check_unicode(data, where)
            yield _json_row(data, where, index, with_meta)


def _check_unicode(data, where: str) -> None:
    import json

    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise DataError(f"{where}: holds an unpaired surrogate ({error.object[error.start]!r}), which is not valid "
                        f"Unicode; fix or drop that line") from None


def _json_row(data, where: str, index: int, with_meta: bool):
    if not isinstance(data, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
    text = data.get("text")
    if isinstance(text, list):
        if not all(isinstance(sentence, str) for sentence in text):
            raise DataError(f"{where}: field 'text' must be a string or a list of strings")
        text = "".join(text)
    elif not isinstance(text, str):
        raise DataError(f"{where}: missing field 'text' (a string or a list of sentences)")
    title = data.get("title")
    if title is None:
        if not isinstance(data.get("text"), str):
            raise DataError(f"{where}: missing string field 'title' (only a string 'text' may carry it "
                            f"as 'Title | text')")
        title, text = _split_title(text)
    elif not isinstance(title, str):
        raise DataError(f"{where}: field 'title' must be a string, got {type(title).__name__}")
    id_field = next((key for key in _ID_FIELDS if data.get(key) is not None), None)
    pid = None if id_field is None else str(data[id_field])
    meta = {key: value for key, value in data.items() if key not in (id_field, "title", "text")} \
        if with_meta else {}
    return where, index, pid, title, text, meta


def _unquote(field: str) -> str:
    # DPR's TSV quotes its text CSV-style ("...""..."); ColBERT's collections are never quoted
    if len(field) >= 2 and field[0] == field[-1] == '"':
        return field[1:-1].replace('""', '"')
    return field


def _tsv_rows(path: Path):
    first = True
    for where, index, line in _lines(path):
        fields = line.rstrip("\r\n").split("\t")
        if first and {field.strip().lower() for field in fields} in _TSV_HEADERS:
            first = False
            continue
        first = False
        if len(fields) == 3:
            pid, text, title = fields[0].strip(), _unquote(fields[1]), _unquote(fields[2])
        elif len(fields) == 2:
            pid, text = fields[0].strip(), _unquote(fields[1])
            title, text = _split_title(text)
        else:
            raise DataError(f"{where}: expected 'pid<TAB>text' or 'pid<TAB>text<TAB>title', got "
                            f"{len(fields)} field(s)")
        if not pid:
            raise DataError(f"{where}: empty pid")
        yield where, index, pid, title, text, {}
