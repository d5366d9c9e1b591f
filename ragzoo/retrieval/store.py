"""Passages kept on disk beside an index: one JSON line per passage plus a table of byte offsets, read
through a memory map, so a 5.2M-passage collection is never held as Python objects."""

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
        self._offsets = np.load(self.folder / OFFSETS_FILE, mmap_mode="r")
        self._fh = open(self.folder / PASSAGES_FILE, "rb")
        size = (self.folder / PASSAGES_FILE).stat().st_size
        self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def get(self, row: int, score: float = 0.0) -> Passage:
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        pid, title, text = ujson.loads(self._map[start:end])  # ujson: ~3x faster per hit
        return Passage(pid=pid, title=title, text=text, score=score)

    def __iter__(self):
        for row in range(len(self)):
            yield self.get(row)
