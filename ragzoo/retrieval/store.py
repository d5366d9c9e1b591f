"""Passages kept on disk beside an index: one JSON line per passage plus a table of byte offsets, read
through a memory map, so a 5.2M-passage collection is never held as Python objects.

A search's hits come back as `StoredPassage`s (`PassageStore.get_many`): each holds its line's bytes and decodes
them on first access to pid, title or text. Decoding ten ~500-byte lines and building ten dataclasses costs
~30 us, as much as the rest of a bm25 query over the 17.7k-passage sample; a caller that keeps only the first
hits, or only counts them, no longer pays it, and one that reads them pays it once."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import ujson

from ragzoo.retrieval.base import Passage

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "passage_offsets.npy"


class PassageStoreWriter:
    """Appends passages in index order; `close()` writes the offsets table."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = open(self.folder / PASSAGES_FILE, "wb")
        self._offsets: list[np.ndarray] = []
        self._pending: list[int] = []
        self._position = 0

    def add(self, pid: str, title: str, text: str) -> None:
        line = json.dumps([pid, title, text], ensure_ascii=False).encode("utf-8") + b"\n"
        self._pending.append(self._position)
        self._position += len(line)
        self._file.write(line)
        if len(self._pending) >= 100_000:  # keep the offsets compact while streaming
            self._offsets.append(np.asarray(self._pending, dtype=np.int64))
            self._pending = []

    def close(self) -> int:
        self._file.close()
        self._offsets.append(np.asarray(self._pending + [self._position], dtype=np.int64))
        offsets = np.concatenate(self._offsets)
        np.save(self.folder / OFFSETS_FILE, offsets)
        return len(offsets) - 1


class PassageStore:
    """Random access to the passages of an index by row number."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        # a plain view of the memory map: indexing an np.memmap costs a Python-level __array_finalize__ per call
        self._offsets = np.asarray(np.load(self.folder / OFFSETS_FILE, mmap_mode="r"))
        self._fh = open(self.folder / PASSAGES_FILE, "rb")
        size = (self.folder / PASSAGES_FILE).stat().st_size
        self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def get(self, row: int, score: float = 0.0) -> Passage:
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        pid, title, text = ujson.loads(self._map[start:end])  # ujson: ~3x faster per hit
        return Passage(pid=pid, title=title, text=text, score=score)

    def get_many(self, rows, scores) -> list[Passage]:
        """The passages at `rows`, with `scores`, in that order; each decoded when first read."""
        rows = rows.tolist() if isinstance(rows, np.ndarray) else [int(row) for row in rows]
        scores = scores.tolist() if isinstance(scores, np.ndarray) else [float(score) for score in scores]
        # per-row .item() beats fancy indexing for the ~10 hits of a query (no temporary arrays)
        offset, lines, new, hits = self._offsets.item, self._map, object.__new__, []
        for row, score in zip(rows, scores):
            if row < 0:  # (a row past the end fails in .item)
                raise IndexError(f"passage row {row} out of range 0..{len(self._offsets) - 2}")
            # StoredPassage without the frozen dataclass's __init__: two dict writes instead of five setattrs
            hit = new(StoredPassage)
            state = hit.__dict__
            state["_line"] = lines[offset(row):offset(row + 1)]
            state["score"] = score
            hits.append(hit)
        return hits

    def __iter__(self):
        for row in range(len(self)):
            yield self.get(row)


_FIELDS = ("pid", "title", "text")


class StoredPassage(Passage):
    """A `Passage` read from a store: pid, title and text are decoded from the stored line when first read.
    Equal to (and hashed as) the plain `Passage` with the same fields; `dataclasses.replace`, `to_dict`, pickling
    and `copy` see the decoded fields."""

    def __getattr__(self, name: str):
        # only reached while a field is still undecoded (decoded fields live in the instance's __dict__)
        if name in _FIELDS or name == "meta":
            state = self.__dict__
            line = state.get("_line")
            if line is not None:
                # fields first, then the line goes: a thread reading the same hit meanwhile decodes it again or
                # finds the fields, never neither
                state["pid"], state["title"], state["text"] = ujson.loads(line)  # ujson: ~3x faster per hit
                state.pop("_line", None)
            state.setdefault("meta", {})
            if name in state:
                return state[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __eq__(self, other):
        if not isinstance(other, Passage):
            return NotImplemented
        return (self.pid, self.title, self.text, self.score) == (other.pid, other.title, other.text, other.score)

    def __hash__(self):
        return hash((self.pid, self.title, self.text, self.score))  # as the frozen dataclass Passage hashes

    def __repr__(self):
        return (f"Passage(pid={self.pid!r}, title={self.title!r}, text={self.text!r}, score={self.score!r}, "
                f"meta={self.meta!r})")

    def __getstate__(self):
        self.pid  # noqa: B018 -- decode first: a pickle holds the fields, never the raw line
        return dict(self.__dict__)
