"""Passages kept on disk beside an index, read by row number through a memory map, so a 5.2M-passage collection
is never held as Python objects. Two layouts, told apart by their files:

- plain (`passages.jsonl` + `passage_offsets.npy`): one JSON line `[pid, title, text]` per passage and a table
  of byte offsets; ~605 bytes a passage on the scale benchmark's corpus model (~12.7 GB at 21M passages).
- blocks (`passage_blocks.zlib` + `passage_block_offsets.npy` + `passage_zdict.bin`, declared by
  `passage_store.json`, written last): the same lines, `BLOCK_ROWS` to a block, each block zlib-compressed on
  its own with a preset dictionary (the first ~32 KB of lines: zlib's window), so a hit costs one small
  block's decompression, not a whole file's. Row r lives in block r // BLOCK_ROWS, line r % BLOCK_ROWS, so no
  row table is needed. ~272 bytes a passage on the same corpus model (2.25x smaller; ~5.7 GB at 21M); stdlib
  only (zstandard, not a dependency, would compress short similar texts better with a trained dictionary).
  A hit's block is decompressed when the hit is first read, and kept in a small thread-safe LRU: a query's 10
  hits cost at most 10 decompressions (~70 us CPU a hit read at 1M), hits in one block one, never-read hits none.

A search's hits come back as `StoredPassage`s (`PassageStore.get_many`): each holds its row (its class holds the
store) and reads and decodes its line on first access to pid, title or text. Decoding ten ~500-byte lines and
building ten dataclasses costs ~30 us, as much as the rest of a bm25 query over the 17.7k-passage sample; a caller
that keeps only the first hits, or only counts them, no longer pays it, and one that reads them pays it once.

`python -m ragzoo.retrieval.store compress INDEX_DIR` converts an index's plain store to blocks in place (an
index built before the block layout, e.g. a 21M-passage one): the new files are written beside the old, declared
by their manifest, and only then is the plain store removed, so a killed conversion leaves a loadable store."""

from __future__ import annotations

import json
import mmap
import os
import threading
import zlib
from array import array
from collections import OrderedDict
from pathlib import Path

import numpy as np
import ujson

from ragzoo.retrieval.base import Passage

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "passage_offsets.npy"
PLAIN_FILES = (PASSAGES_FILE, OFFSETS_FILE)
BLOCKS_FILE = "passage_blocks.zlib"
BLOCK_OFFSETS_FILE = "passage_block_offsets.npy"
ZDICT_FILE = "passage_zdict.bin"
# the block layout's manifest, written last: the layout exists once this file does (names start with "passage":
# bm25_packed.index_bytes counts them as the passage store)
MANIFEST_FILE = "passage_store.json"
BLOCK_FILES = (BLOCKS_FILE, BLOCK_OFFSETS_FILE, ZDICT_FILE, MANIFEST_FILE)
LAYOUT = "zlib-blocks"
# 16 lines (~10 KB) a block: on 1M passages of the scale corpus model 272 B/passage and ~70 us CPU per hit read
# (8 lines: 277 B; 64: ~3% smaller than 16 at ~3x the time per hit read)
BLOCK_ROWS = 16
_ZDICT_BYTES = 32 * 1024  # zlib's window: a longer dictionary is never referenced
_LEVEL = 6  # level 9 saved <1% on the same sample, at twice the time to write
# decompressed blocks kept per store: ~11 KB each, so ~22 MB; holds all 1,107 blocks of the 17.7k-passage sample
# (a bm25 query reading its 10 hits there: 0.13 ms CPU warm, as over the plain store, against 0.33 with 256)
_CACHED_BLOCKS = 2048


def _line(pid: str, title: str, text: str) -> bytes:
    return json.dumps([pid, title, text], ensure_ascii=False).encode("utf-8")


class PassageStoreWriter:
    """Appends passages in index order; `close()` writes the offsets table (and, for blocks, the manifest last).
    `compress=True` writes the block layout (`block_rows` lines a block, zlib `level`), else the plain one."""

    def __init__(self, folder: Path, compress: bool = False, block_rows: int = BLOCK_ROWS, level: int = _LEVEL):
        if block_rows < 1 or not 0 <= level <= 9:
            raise ValueError(f"block_rows must be >= 1 and level 0..9, not {block_rows} and {level}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.compress = compress
        self.block_rows, self.level = block_rows, level
        self._count = 0
        if compress:
            self._file = open(self.folder / BLOCKS_FILE, "wb")
            self._block_offsets = array("q", [0])
            self._block: list[bytes] = []
            self._head: list[bytes] | None = []  # the first lines, until they make the dictionary
            self._head_bytes = 0
            self._zdict = b""
            return
        self._file = open(self.folder / PASSAGES_FILE, "wb")
        self._offsets: list[np.ndarray] = []
        self._pending: list[int] = []
        self._position = 0

    def add(self, pid: str, title: str, text: str) -> None:
        self.add_line(_line(pid, title, text))

    def add_line(self, line: bytes) -> None:
        """One passage's JSON line `[pid, title, text]` (UTF-8, no newline), as the plain store holds it."""
        self._count += 1
        if self.compress:
            if self._head is not None:
                self._head.append(line)
                self._head_bytes += len(line) + 1
                if self._head_bytes >= _ZDICT_BYTES:
                    self._start_blocks()
                return
            self._block.append(line)
            if len(self._block) == self.block_rows:
                self._flush_block()
            return
        line += b"\n"
        self._pending.append(self._position)
        self._position += len(line)
        self._file.write(line)
        if len(self._pending) >= 100_000:  # keep the offsets compact while streaming
            self._offsets.append(np.asarray(self._pending, dtype=np.int64))
            self._pending = []

    def _start_blocks(self) -> None:
        head, self._head = self._head, None
        self._zdict = b"\n".join(head)[-_ZDICT_BYTES:]
        for line in head:
            self._block.append(line)
            if len(self._block) == self.block_rows:
                self._flush_block()

    def _flush_block(self) -> None:
        packer = zlib.compressobj(self.level, zdict=self._zdict) if self._zdict else zlib.compressobj(self.level)
        data = packer.compress(b"\n".join(self._block)) + packer.flush()
        self._file.write(data)
        self._block_offsets.append(self._block_offsets[-1] + len(data))
        self._block = []

    def close(self) -> int:
        if not self.compress:
            self._file.close()
            self._offsets.append(np.asarray(self._pending + [self._position], dtype=np.int64))
            offsets = np.concatenate(self._offsets)
            np.save(self.folder / OFFSETS_FILE, offsets)
            return len(offsets) - 1
        from ragzoo.files import atomic_write_json

        if self._head is not None:
            self._start_blocks()
        if self._block:
            self._flush_block()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        np.save(self.folder / BLOCK_OFFSETS_FILE, np.frombuffer(self._block_offsets, dtype=np.int64))
        (self.folder / ZDICT_FILE).write_bytes(self._zdict)
        atomic_write_json(self.folder / MANIFEST_FILE, {"layout": LAYOUT, "rows": self._count,
                                                        "block_rows": self.block_rows, "level": self.level})
        return self._count


def describe_files(compress: bool) -> str:
    """The files a store of that layout is made of, as an index's meta.json names them."""
    if compress:
        return "passages in zlib blocks (" + ", ".join(BLOCK_FILES) + ")"
    return "passages (" + ", ".join(PLAIN_FILES) + ")"


def is_blocks(folder: Path) -> bool:
    """Whether `folder`'s store is in the block layout (its manifest is there)."""
    return (Path(folder) / MANIFEST_FILE).is_file()


def _mapped(path: Path):
    """`path` memory-mapped read-only (b"" when empty); the map holds its own descriptor, the file is closed."""
    with open(path, "rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size \
            else b""


def _hit_class(store: "PassageStore") -> type:
    """The class of `store`'s hits: StoredPassage holding the store, so that a hit itself holds only its row and
    score (two dict writes; ints and floats, so the collector does not track that dict: a batch's 15k hits
    outlive its young collections, and the full collections they brought were up to half of a batch's time on
    the 17.7k sample). The class and the store refer to each other: a store is freed by the collector, once
    neither it nor any of its hits is referenced (the map's descriptor stays open until then)."""
    return type("StoredPassage", (StoredPassage,), {"__slots__": (), "_store": store})


class PassageStore:
    """Random access to the passages of an index by row number (either layout, as its files say)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._blocks = None
        if is_blocks(self.folder):
            self._open_blocks()
            return
        # a plain view of the memory map: indexing an np.memmap costs a Python-level __array_finalize__ per call
        self._offsets = np.asarray(np.load(self.folder / OFFSETS_FILE, mmap_mode="r"))
        self._map = _mapped(self.folder / PASSAGES_FILE)
        self._rows = len(self._offsets) - 1
        self._hit_class = _hit_class(self)

    def _open_blocks(self) -> None:
        manifest = json.loads((self.folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        if manifest.get("layout") != LAYOUT:
            raise ValueError(f"{self.folder / MANIFEST_FILE}: unknown passage store layout {manifest.get('layout')!r}")
        self._rows = int(manifest["rows"])
        self._block_rows = int(manifest["block_rows"])
        self._block_offsets = np.asarray(np.load(self.folder / BLOCK_OFFSETS_FILE, mmap_mode="r"))
        self._zdict = (self.folder / ZDICT_FILE).read_bytes()
        self._blocks = _mapped(self.folder / BLOCKS_FILE)
        self._hit_class = _hit_class(self)
        self._cache: OrderedDict[int, list[bytes]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __len__(self) -> int:
        return self._rows

    def _block_lines(self, block: int) -> list[bytes]:
        """The lines of `block`, decompressed once while it stays among the last `_CACHED_BLOCKS` read."""
        cache = self._cache
        with self._cache_lock:
            lines = cache.get(block)
            if lines is not None:
                cache.move_to_end(block)
                return lines
        # outside the lock: two threads may both decompress one block (same result), none waits on another's
        offset = self._block_offsets.item
        data = self._blocks[offset(block):offset(block + 1)]
        unpacker = zlib.decompressobj(zdict=self._zdict) if self._zdict else zlib.decompressobj()
        lines = (unpacker.decompress(data) + unpacker.flush()).split(b"\n")
        with self._cache_lock:
            cache[block] = lines
            cache.move_to_end(block)
            if len(cache) > _CACHED_BLOCKS:
                cache.popitem(last=False)
        return lines

    def _stored_line(self, row: int) -> bytes:
        if not 0 <= row < self._rows:
            raise IndexError(f"passage row {row} out of range 0..{self._rows - 1}")
        if self._blocks is None:
            offset = self._offsets.item
            return self._map[offset(row):offset(row + 1)]
        block, position = divmod(row, self._block_rows)
        return self._block_lines(block)[position]

    def line(self, row: int) -> bytes:
        """The stored JSON line of `row` (no newline)."""
        return self._stored_line(row).rstrip(b"\n")

    def get(self, row: int, score: float = 0.0) -> Passage:
        if self._blocks is None:
            start, end = int(self._offsets[row]), int(self._offsets[row + 1])
            pid, title, text = ujson.loads(self._map[start:end])  # ujson: ~3x faster per hit
        else:
            pid, title, text = ujson.loads(self._stored_line(int(row)))
        return Passage(pid=pid, title=title, text=text, score=score)

    def get_many(self, rows, scores) -> list[Passage]:
        """The passages at `rows`, with `scores`, in that order; each read and decoded when first read.

        Nothing of a hit's line is touched here: a hit is a row number and a score until a field is read (a
        bm25 batch over the 17.7k sample spent ~9 us a question slicing and wrapping its 10 lines here, about
        a quarter of the question). The rows are checked in one numpy pass, not one by one."""
        rows = np.asarray(rows, dtype=np.int64)
        listed = rows.tolist()
        if listed:
            count = self._rows
            # numpy's reductions cost ~2 us each on a query's 10 rows; Python's min/max less up to ~100 rows
            low, high = (int(rows.min()), int(rows.max())) if len(listed) > 64 else (min(listed), max(listed))
            if low < 0 or high >= count:
                raise IndexError(f"passage row {low if low < 0 else high} out of range 0..{count - 1}")
        scores = scores.tolist() if isinstance(scores, np.ndarray) else [float(score) for score in scores]
        # a StoredPassage without the frozen dataclass's __init__ (five checked setattrs): two dict writes
        new, cls, hits = object.__new__, self._hit_class, []
        append = hits.append
        for row, score in zip(listed, scores):
            hit = new(cls)
            state = hit.__dict__
            state["_row"] = row
            state["score"] = score
            append(hit)
        return hits

    def __iter__(self):
        for row in range(len(self)):
            yield self.get(row)


_FIELDS = ("pid", "title", "text")


class StoredPassage(Passage):
    """A `Passage` read from a store: pid, title and text are decoded from the stored line (a block store's: its
    block decompressed, or found in the store's cache) when first read.
    Equal to (and hashed as) the plain `Passage` with the same fields; `dataclasses.replace`, `to_dict`, pickling
    and `copy` see the decoded fields."""

    def __getattr__(self, name: str):
        # only reached while a field is still undecoded (decoded fields live in the instance's __dict__)
        if name in _FIELDS or name == "meta":
            state = self.__dict__
            row = state.get("_row")
            if row is not None:
                # the line sliced from the map, or from its block (decompressed or cached); fields first, then
                # the row goes: a thread reading the same hit meanwhile decodes it again or finds the fields
                state["pid"], state["title"], state["text"] = ujson.loads(self._store._stored_line(row))
                state.pop("_row", None)
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
        self.pid  # noqa: B018 -- decode first: a pickle holds the fields, never the raw line nor the store
        return {key: value for key, value in self.__dict__.items() if key != "_row"}

    def __reduce__(self):
        # a store's hit class is made per store, never pickled by name: the copy is a plain StoredPassage
        return _restored, (self.__getstate__(),)


def _restored(state: dict) -> StoredPassage:
    hit = object.__new__(StoredPassage)
    hit.__dict__.update(state)
    return hit


def compress_store(folder: Path, show_progress: bool = True, block_rows: int = BLOCK_ROWS,
                   level: int = _LEVEL) -> dict:
    """Convert the plain store in `folder` to the block layout in place, streaming (a line at a time, never the
    whole file). The block files are written beside the plain ones and declared by their manifest last; only
    then are passages.jsonl and its offsets removed, so at every moment one complete store is there (a killed
    conversion leaves the plain store, or both; run it again to finish). An index's ownership marker names the
    new files before they are written and drops the removed ones after. Returns sizes and counts."""
    import time

    from tqdm.auto import tqdm

    from ragzoo import ownership
    from ragzoo.files import atomic_write_json, fsync_dir

    folder = Path(folder)
    if block_rows < 1 or not 0 <= level <= 9:  # said before any work
        raise ValueError(f"block_rows must be >= 1 and level 0..9, not {block_rows} and {level}")
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    plain = [folder / name for name in PLAIN_FILES]
    has_plain = all(path.is_file() for path in plain)
    if not has_plain and not is_blocks(folder):
        raise FileNotFoundError(f"{folder} holds no passage store ({PASSAGES_FILE} + {OFFSETS_FILE})")
    _refuse_unless_ours(folder)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{folder} is read-only")
    started = time.perf_counter()
    plain_bytes = sum(path.stat().st_size for path in plain if path.is_file())
    rows = None
    is_index = ownership.kind_of(folder) == "index"
    if has_plain:
        rows = len(np.load(folder / OFFSETS_FILE, mmap_mode="r")) - 1
    if has_plain and not (is_blocks(folder) and len(PassageStore(folder)) == rows):
        if is_index:  # named before written: a killed conversion's partial files are ragzoo's, not the user's
            present = {entry.name for entry in folder.iterdir()}
            ownership.mark(folder, "index", (ownership.ragzoo_files(folder, "index") & present) | set(BLOCK_FILES))
        (folder / MANIFEST_FILE).unlink(missing_ok=True)  # a store of another run's rows: written anew
        writer = PassageStoreWriter(folder, compress=True, block_rows=block_rows, level=level)
        progress = tqdm(total=rows, desc=f"compress {folder.name}", unit="passage", disable=not show_progress)
        with open(folder / PASSAGES_FILE, "rb") as source:
            done = 0
            for line in source:
                writer.add_line(line.rstrip(b"\n"))
                done += 1
                if done % 65536 == 0:
                    progress.update(65536)
            progress.update(done % 65536)
        progress.close()
        written = writer.close()
        if written != rows:
            (folder / MANIFEST_FILE).unlink(missing_ok=True)
            raise ValueError(f"{folder / PASSAGES_FILE} holds {written} lines but {OFFSETS_FILE} lists {rows}")
    for path in plain:  # the blocks' manifest is in place: the plain store is no longer read
        path.unlink(missing_ok=True)
    fsync_dir(folder)
    _describe_blocks_in_meta(folder)
    marker = ownership.read_marker(folder)
    if marker is not None and set(PLAIN_FILES) & set(marker["files"]):
        marker["files"] = sorted(set(marker["files"]) - set(PLAIN_FILES))
        atomic_write_json(folder / ownership.MARKER, marker)
    block_bytes = sum((folder / name).stat().st_size for name in BLOCK_FILES)
    count = len(PassageStore(folder))
    seconds = time.perf_counter() - started
    return {"passages": count, "plain bytes": plain_bytes, "compressed bytes": block_bytes,
            "seconds": round(seconds, 3),
            "MB/s (plain)": round(plain_bytes / 1e6 / seconds, 1) if plain_bytes else None}


def _refuse_unless_ours(folder: Path) -> None:
    """ConfigError (one line, before any write) unless `folder` is an index ragzoo made (`ragzoo.ownership`): the
    conversion deletes passages.jsonl and its offsets and writes the block files, which in a folder of the user's
    (or another kind of ragzoo folder) would be their files. Inside an index, a file at a block file's name that
    its marker does not list is the user's too, and is never overwritten."""
    from ragzoo import ownership
    from ragzoo.errors import ConfigError

    kind = ownership.kind_of(folder)
    if kind is None:
        raise ConfigError(f"{folder} is not a ragzoo index: it holds files ragzoo did not write and no "
                          f"{ownership.MARKER}; ragzoo never writes into it (compress an index `ragzoo index build` "
                          f"made)")
    if kind != "index":
        raise ConfigError(f"{folder} is a {ownership.NOUNS[kind]}, not a ragzoo index; nothing was changed")
    if ownership.read_marker(folder) is None:
        return  # an earlier version's index: its files are the ones earlier builds and conversions wrote
    foreign = sorted(name for name in BLOCK_FILES if os.path.lexists(folder / name)
                     and name not in ownership.ragzoo_files(folder, "index"))
    if foreign:
        raise ConfigError(f"{folder} holds {', '.join(foreign)}, which ragzoo did not write; it is kept as it is and "
                          f"nothing was converted: move it away and run compress again")


def _describe_blocks_in_meta(folder: Path) -> None:
    """An index's meta.json names its files: after a conversion, the blocks instead of the plain store."""
    from ragzoo.files import atomic_write_json

    meta_file = folder / "meta.json"
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not an index's folder (or not one that describes its files): nothing to say
    described = meta.get("files") if isinstance(meta, dict) else None
    if isinstance(described, str) and describe_files(False) in described:
        meta["files"] = described.replace(describe_files(False), describe_files(True))
        atomic_write_json(meta_file, meta)


def main(argv: list[str] | None = None) -> int:
    """`python -m ragzoo.retrieval.store compress INDEX_DIR`."""
    import argparse
    import sys

    from ragzoo.errors import RagzooError

    parser = argparse.ArgumentParser(prog="python -m ragzoo.retrieval.store",
                                     description="Convert an index's plain passage store to compressed blocks.")
    commands = parser.add_subparsers(dest="command", required=True)
    compress = commands.add_parser("compress", help="compress the passage store of INDEX_DIR in place")
    compress.add_argument("index_dir", type=Path)
    compress.add_argument("--quiet", action="store_true", help="no progress bar")
    compress.add_argument("--block-rows", type=int, default=BLOCK_ROWS,
                          help=f"passages a block (default {BLOCK_ROWS}; 64: ~3%% smaller, ~3x the time per hit read)")
    compress.add_argument("--level", type=int, default=_LEVEL,
                          help=f"zlib level (default {_LEVEL}; 3: ~2x faster to write, ~5%% larger)")
    args = parser.parse_args(argv)
    try:
        result = compress_store(args.index_dir, show_progress=not args.quiet, block_rows=args.block_rows,
                                level=args.level)
    except (OSError, ValueError, RagzooError) as error:
        print(f"ragzoo: cannot compress the passage store: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
