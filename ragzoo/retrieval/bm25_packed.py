"""The "packed" BM25 index: compressed postings of term frequencies and a one-call compiled top-k scorer.

Why another format beside bm25s's CSC ("csc", `bm25.py`): the CSC stores a float32 weight and an int32 row
per posting (8 bytes), 22 GB at wiki18's 21M passages, and its scorer runs a Python loop per query term. Here:

- **Term frequencies, not weights** (as Lucene stores them). The weight is computed at query time with the
  float32 operations `bm25._write_score_matrix` uses, `idf[t] * (tf / (norm[doc] + tf))`, with
  `norm = k1 * ((1 - b) + b * len / avg)` precomputed per passage as float32 at build (`norm.npy`, 4 bytes a
  passage: one load instead of a length load, a multiply, an add and a divide per posting). So every weight
  is bit-identical to the CSC index's (and bm25s's), and the top k is the exhaustive top k.
- **Blocks of 128 postings** in the BP128 layout (Lemire & Boytsov 2015, "Decoding billions of integers per
  second through vectorization"; scalar here): per block, doc-id gaps minus one bit-packed with the block's
  own width (a run of consecutive passages needs 0 bits), then tf - 1 with its own width (most tf are 1:
  0 bits). Per block: the last doc id (int32), the word offset (int64), the two widths (uint8) and the
  block's largest weight (float32, computed exactly at build) for block-max skipping (Ding & Suel 2011,
  "Faster top-k document retrieval using block-max indexes"). Per term: its first block, df, idf, and its
  largest weight. A term's blocks are contiguous; terms are laid out bucket by bucket (see the build).
- **One numba call per query** (`_top_k`, nogil, cache=True; no per-term Python), **window by window**: MaxScore
  (Turtle & Flood 1995) run over windows of `WINDOW` passages with per-window bounds from the block maxima, the idea
  of Lucene's MaxScoreBulkScorer. The query's distinct terms, rarest first (ties by term id, the order
  `bm25_topk.PrunedTopK` sums in). Per window [start, start + W): (1) each term's bound there, the largest block max
  of its blocks overlapping it (for a sparse block, spanning `SPARSE_SPAN` windows or more, decoded once and its
  largest weight in the window: exact); if all bounds together cannot reach theta, the window is skipped, nothing
  decoded. (2) The essential terms are a prefix of the rarest-first order: the longest suffix whose bounds together
  cannot lift a passage to theta is only looked up (a suffix, so every passage still sums 0 + w1 + w2 + ... in the
  same order: scores bit-identical to the exhaustive scorer's, `PrunedTopK`'s and bm25s's csc weights). (3) The
  essential terms' postings in the window go into a window-sized float32 accumulator (L2-resident, with the
  window's slice of the norms), first reaches marked in a bitset, so candidates come out in row order; an essential
  block whose best weight plus the later terms' bounds cannot reach theta only adds to passages already reached, and
  is not decoded at all when none lies in its range. (4) Candidates whose partial score plus the looked-up terms'
  bounds cannot reach theta are dropped (branch-free); (5) the looked-up terms, in order, term at a time over the
  candidates: skip blocks by their last doc id (galloping), drop a candidate whose block's max cannot lift it,
  decode a block's doc ids once (weights only for the postings wanted: a weight reads the passage's norm, a cache
  miss); where the candidates number `DENSE` or more per block of the term in the window (nearly every block would
  be decoded anyway) its postings there are marked in a bitset instead and each candidate tested branch-free;
  (6) the survivors have their exact final score: into a k-heap, theta its worst once it holds k, a true
  lower bound that rises fast. Ties go to the lower row (windows go in row order, so a later passage that only ties
  the k-th never enters). Each block is decoded at most once per query, even when it spans many windows. Only what
  a window touched is reset. Bounds carry a 1e-5 relative margin for float32 rounding, as in `PrunedTopK`.
- **A streaming build within a memory budget**: tokenisation as for the CSC (bm25.py's loop), but each chunk's
  (doc, term, tf) postings go to B bucket spools by `term % B` (B from the corpus size and `memory_budget`),
  so no whole-corpus posting array ever exists; then per bucket: load, counting-sort by term (passages
  arrive in order, so each term's postings come out sorted), encode blocks, append to `packed_words.npy`.

Needs numba (the `[fast]` extra): there is no numpy fallback; without numba `format=packed` is refused.

Measured (CPU time a question, token ids in, top 10 out; 2 cores shared with other jobs at load 4-8, so figures move
by +-10%): 21M passages (issue 24's synthetic wiki18-like corpus, 1,000 HotpotQA questions' terms hold 11M postings a
question): the windowed kernel 35-38 ms on the first 200 questions, 42.5 ms on all 1,000 (kernel alone: 25-28 q/s
wall at load 2), against 105-108 ms for the kernel before it (term at a time over the whole index, a random read into
84 MB arrays a posting), the top 10 of all 1,000 identical. 1M passages: 2.98 ms against 4.13 for the kernel
before it and 1.56 for bm25s's numba `retrieve` on the same index (0.52x). Choices, measured at 21M: W = 2^14..2^15
(2^12: 37 ms, 2^16: 35-37, 2^18: 52 before the decode split); weights computed in a loop of their own after the doc
ids (the norm reads, cache misses, overlap: 47 -> 34 ms); a looked-up block decoded without weights (the few wanted are
computed alone); an oracle that knew the final theta from the start would save only ~17% (27 ms): theta from the
first windows is close to final. Where the rest goes at 21M: per question 2.3-2.6M postings decoded, 0.8M weighed,
0.7M passages reached by essential terms of which ~98% dropped after one look-up, 0.5M look-ups (~55% of the time
before the dense marking, which took 38.5 -> 34.8 ms; DENSE 1 and 2 measure the same).
Earlier (the previous kernel): at 1M passages the postings take 217 MB against the csc's 456 MB.

API (the retriever in `bm25.py` builds and loads this format: `bm25.build_bm25_index(corpus, out_dir,
index_format="packed", memory_budget=...)`, `bm25.BM25Retriever(index_dir)`; this module imports nothing of
`bm25.py`, which imports it):
    PackedIndex(folder, window=WINDOW): the arrays, memory-mapped; `.top_k(token_ids, k)` -> (rows int64, scores
        float32); `.top_k_many(token_id_lists, k)` -> (rows, scores, counts), the queries one after another;
        `.stats` running totals named by STATS (postings decoded, windows skipped, candidates, look-ups, postings
        weighed, ...); `.df` document frequency per term id.
    CscWindows(data, indices, indptr, window=WINDOW, blocks=None): the same kernel (`_top_k` with csc=True) over a
        csc index's columns, blocks of 128 postings laid over them (`csc_blocks`, the builder's `CSC_BLOCK_*`
        files): no decoding, no norm reads, the same answers bit for bit (`bm25_topk.PrunedTopK` uses it from
        `bm25_topk.WINDOWED_FROM` passages on). Both are `WindowedScorer`s.
    to_csc(packed_dir, out_dir): writes bm25s's CSC files (data/indices/indptr .csc.index.npy, vocab, params)
        with identical weights, so `bm25s.BM25.load(out_dir, mmap=True)` runs on the same index.
    is_packed(folder) -> bool
The csc index's one-call kernel (`_top_k_csc`, `bm25_topk.PrunedTopK`'s numba path) is defined here too, beside the
compiled heap both kernels call: numba's disk cache checks only the defining file's stamp, so every function compiled
with cache=True lives in the file of every compiled function it calls (else an edit here would leave it stale).
Spec: `bm25:<corpus>?format=packed` (`ragzoo index build --format packed`); the index cache key includes
the format, so a packed and a csc index of one corpus never collide.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ragzoo.errors import ConfigError, error_line

FORMAT = "packed"
FORMATS = ("csc", FORMAT)
BLOCK = 128
MARGIN = 1e-5  # relative slack on score bounds for float32 rounding, as bm25_topk
WORDS = "packed_words.npy"  # uint32: every block's bit-packed gaps then tfs (plus one padding word)
BLOCK_LAST = "packed_block_last.npy"  # int32 last doc id per block
BLOCK_OFFSET = "packed_block_offset.npy"  # int64 first word of the block
BLOCK_WIDTHS = "packed_block_widths.npy"  # uint8 (blocks, 2): gap width, tf width
BLOCK_MAX = "packed_block_max.npy"  # float32 largest weight in the block
TERM_FIRST = "packed_term_first_block.npy"  # int64
TERM_DF = "packed_term_df.npy"  # int64
IDF = "packed_idf.npy"  # float32
NORM = "packed_norm.npy"  # float32 per passage
TERM_MAX = "term_max.npy"  # float32 largest weight per term (same name and meaning as the csc index's)
SPOOL_PREFIX = "spool.bucket"
BYTES_PER_SPOOLED = 12  # int32 doc, term, tf
# in-memory bytes per posting while one bucket is encoded: the spool (12), sorted docs and tfs (8), offsets
BYTES_PER_BUCKET_POSTING = 28
# PackedIndex.stats, running totals over the queries answered
STATS = ("postings decoded", "essential blocks skipped", "windows skipped", "windows scored", "candidates",
         "look-ups", "candidates dropped", "terms looked up in a window", "postings weighed")
WINDOW = 1 << 15  # passages a query is scored over at a time (see the module docstring)
# a block spanning this many windows is weighed when first met, for its exact largest weight in each window
SPARSE_SPAN = 4
# a looked-up term is marked for the window's candidates when they number this many per block of it there
DENSE = 2
# the lowest set bit of a word -> its index: (bit * magic) >> 58 is distinct for each of the 64 bits (a de Bruijn
# sequence), so a window's reached passages come out of its bitset in row order without a loop over bits
_DEBRUIJN_MAGIC = 0x022FDD63CC95386D
_DEBRUIJN = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _DEBRUIJN[(((1 << _bit) * _DEBRUIJN_MAGIC) & (2**64 - 1)) >> 58] = _bit
assert sorted(_DEBRUIJN.tolist()) == list(range(64))
del _bit


class NumbaUnavailable(ConfigError):
    """numba is missing, or installed but does not import here."""


def numba_installed() -> bool:
    """Whether a numba distribution is installed (whether or not it imports here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("numba")
    except PackageNotFoundError:
        return False
    return True


def require_numba(what: str = "bm25 format=packed") -> None:
    """numba importable, else one line (`NumbaUnavailable`): install it where it is missing; where it is installed
    but does not import here (built for another numpy, say), why."""
    try:
        import numba  # noqa: F401
    except ImportError as error:
        if not numba_installed():
            raise NumbaUnavailable(f"{what} needs numba: pip install 'ragzoo[fast]'") from None
        raise NumbaUnavailable(f"{what} needs numba, which is installed but does not import here "
                               f"({error_line(error)})") from None


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise ConfigError(f"bm25 format must be one of {list(FORMATS)}, got {name!r}")
    if name == FORMAT:
        require_numba()
    return name


def is_packed(folder: Path) -> bool:
    return (Path(folder) / WORDS).exists()


# ---------------------------------------------------------------------------------------------- building


def bucket_count(corpus_bytes: int, memory_budget: int) -> int:
    """Buckets so that one bucket's postings fit `memory_budget` while it is encoded. Postings are estimated
    from the corpus size at one per 8 bytes of JSONL (wiki abstracts: ~14), an overestimate on purpose."""
    postings = max(1, corpus_bytes // 8)
    return max(1, math.ceil(postings * BYTES_PER_BUCKET_POSTING / max(1, memory_budget)))


class BucketSpool:
    """Each chunk's postings, appended to bucket `term % n_buckets` as int32 (doc, term, tf) triples."""

    def __init__(self, folder: Path, n_buckets: int):
        self.folder = Path(folder)
        self.n_buckets = int(n_buckets)
        self.paths = [self.folder / f"{SPOOL_PREFIX}{i:04d}.i32" for i in range(self.n_buckets)]
        self._files = [open(path, "wb") for path in self.paths]
        self.sizes = np.zeros(self.n_buckets, dtype=np.int64)

    def add(self, first_doc: int, local_docs: np.ndarray, terms: np.ndarray, tfs: np.ndarray) -> None:
        triples = np.empty((len(terms), 3), dtype=np.int32)
        triples[:, 0] = local_docs + first_doc
        triples[:, 1] = terms
        triples[:, 2] = tfs
        if self.n_buckets == 1:
            triples.tofile(self._files[0])
            self.sizes[0] += len(triples)
            return
        buckets = terms % self.n_buckets
        order = np.argsort(buckets, kind="stable")  # stable: each bucket keeps its passages in order
        counts = np.bincount(buckets, minlength=self.n_buckets)
        ends = np.cumsum(counts)
        triples = triples[order]
        for bucket in np.flatnonzero(counts):
            triples[ends[bucket] - counts[bucket]:ends[bucket]].tofile(self._files[bucket])
        self.sizes += counts

    def close(self) -> None:
        for handle in self._files:
            handle.close()

    def remove(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)


def norms(lengths: np.ndarray, k1: float, b: float) -> np.ndarray:
    """k1 * ((1 - b) + b * len / avg) per passage, with exactly the float32 operations of
    `bm25._write_score_matrix` (so weights computed from it are bit-identical to the CSC's)."""
    k1, b = np.float32(k1), np.float32(b)
    avg_len = float(np.asarray(lengths).mean())
    if avg_len == 0:  # no passage has a term (a corpus of stopwords): no posting to weight, nothing to divide by
        avg_len = 1.0
    return k1 * ((1 - b) + b * np.asarray(lengths).astype(np.float32) / np.float32(avg_len))


def lucene_idf(doc_freq: np.ndarray, num_docs: int) -> np.ndarray:
    return np.log1p((num_docs - doc_freq + 0.5) / (doc_freq + 0.5)).astype(np.float32)


def write_packed(folder: Path, spool: BucketSpool, doc_freq: np.ndarray, lengths: np.ndarray, k1: float,
                 b: float, show_progress: bool = True) -> dict:
    """Encode the spooled buckets into the packed files in `folder`; removes the spools. Returns counts."""
    from tqdm.auto import tqdm

    spool.close()
    encode_bucket = _compiled()["encode_bucket"]
    num_docs = len(lengths)
    vocab = len(doc_freq)
    doc_freq = np.asarray(doc_freq, dtype=np.int64)
    idf = lucene_idf(doc_freq, num_docs)
    norm = norms(lengths, k1, b).astype(np.float32)
    np.save(folder / IDF, idf)
    np.save(folder / NORM, norm)
    np.save(folder / TERM_DF, doc_freq)
    n_blocks = (doc_freq + BLOCK - 1) // BLOCK
    total_blocks = int(n_blocks.sum())
    term_first = np.zeros(vocab, dtype=np.int64)
    term_max = np.zeros(vocab, dtype=np.float32)
    block_last = np.lib.format.open_memmap(folder / BLOCK_LAST, mode="w+", dtype=np.int32, shape=(total_blocks,))
    block_offset = np.lib.format.open_memmap(folder / BLOCK_OFFSET, mode="w+", dtype=np.int64,
                                             shape=(total_blocks,))
    block_widths = np.lib.format.open_memmap(folder / BLOCK_WIDTHS, mode="w+", dtype=np.uint8,
                                             shape=(total_blocks, 2))
    block_max = np.lib.format.open_memmap(folder / BLOCK_MAX, mode="w+", dtype=np.float32, shape=(total_blocks,))
    words_path = folder / (WORDS + ".raw")
    first_block = 0
    word_cursor = 0
    all_terms = np.arange(vocab, dtype=np.int64)
    with open(words_path, "wb") as words_out:
        for bucket in tqdm(range(spool.n_buckets), desc="bm25 packed blocks", disable=not show_progress):
            terms = all_terms[bucket::spool.n_buckets]
            count = int(spool.sizes[bucket])
            triples = np.fromfile(spool.paths[bucket], dtype=np.int32).reshape(-1, 3) if count else \
                np.zeros((0, 3), dtype=np.int32)
            spool.paths[bucket].unlink()
            local_df = doc_freq[terms]
            local_blocks = n_blocks[terms]
            starts = np.zeros(len(terms) + 1, dtype=np.int64)
            np.cumsum(local_df, out=starts[1:])
            block_starts = np.zeros(len(terms) + 1, dtype=np.int64)
            np.cumsum(local_blocks, out=block_starts[1:])
            nb = int(block_starts[-1])
            sl = slice(first_block, first_block + nb)
            words = encode_bucket(triples, spool.n_buckets, starts, block_starts, idf[terms], norm,
                                  block_last[sl], block_offset[sl], block_widths[sl], block_max[sl],
                                  np.int64(word_cursor))
            del triples
            words.tofile(words_out)
            word_cursor += len(words)
            term_first[terms] = first_block + block_starts[:-1]
            if nb:
                has = local_blocks > 0
                term_max[terms[has]] = np.maximum.reduceat(np.asarray(block_max[sl]), block_starts[:-1][has])
            first_block += nb
        np.zeros(2, dtype=np.uint32).tofile(words_out)  # padding: the decoder reads a word past the last
    word_cursor += 2
    # a .npy header in front of the raw words, without a second copy of the file
    words = np.lib.format.open_memmap(folder / WORDS, mode="w+", dtype=np.uint32, shape=(word_cursor,))
    with open(words_path, "rb") as raw:
        step = 1 << 24
        for first in range(0, word_cursor, step):
            chunk = np.fromfile(raw, dtype=np.uint32, count=min(step, word_cursor - first))
            words[first:first + len(chunk)] = chunk
    words.flush()
    del words
    words_path.unlink()
    for array in (block_last, block_offset, block_widths, block_max):
        array.flush()
    del block_last, block_offset, block_widths, block_max
    np.save(folder / TERM_FIRST, term_first)
    np.save(folder / TERM_MAX, term_max)
    return {"postings": int(doc_freq.sum()), "blocks": total_blocks, "words": word_cursor,
            "buckets": spool.n_buckets}


def _encode_bucket(triples, n_buckets, starts, block_starts, idf, norm, block_last, block_offset, block_widths,
                   block_max, word_base):
    """Counting-sort one bucket's (doc, term, tf) triples by term (stable: docs stay ascending) and encode
    every term's blocks. Returns the bucket's words; fills the block arrays (offsets from `word_base`)."""
    n = triples.shape[0]
    n_terms = len(starts) - 1
    docs = np.empty(n, dtype=np.int32)
    tfs = np.empty(n, dtype=np.int32)
    cursor = starts[:-1].copy()
    for i in range(n):
        local = triples[i, 1] // n_buckets
        slot = cursor[local]
        docs[slot] = triples[i, 0]
        tfs[slot] = triples[i, 2]
        cursor[local] = slot + 1
    # pass 1: widths and sizes
    total_words = 0
    for t in range(n_terms):
        lo, hi = starts[t], starts[t + 1]
        for j in range(block_starts[t + 1] - block_starts[t]):
            b = block_starts[t] + j
            first = lo + j * 128
            last = min(first + 128, hi)
            prev = -1 if j == 0 else docs[first - 1]
            gap_or = 0
            tf_or = 0
            for i in range(first, last):
                gap_or |= docs[i] - prev - 1
                prev = docs[i]
                tf_or |= tfs[i] - 1
            wd = 0
            while gap_or >> wd:
                wd += 1
            wt = 0
            while tf_or >> wt:
                wt += 1
            count = last - first
            block_widths[b, 0] = wd
            block_widths[b, 1] = wt
            block_offset[b] = word_base + total_words
            block_last[b] = docs[last - 1]
            total_words += (count * wd + 31) // 32 + (count * wt + 31) // 32
    words = np.zeros(total_words, dtype=np.uint32)
    values = np.empty(128, dtype=np.int64)
    # pass 2: pack, and the block maxima
    for t in range(n_terms):
        lo, hi = starts[t], starts[t + 1]
        term_idf = idf[t]
        for j in range(block_starts[t + 1] - block_starts[t]):
            b = block_starts[t] + j
            first = lo + j * 128
            last = min(first + 128, hi)
            count = last - first
            wd = np.int64(block_widths[b, 0])
            at = block_offset[b] - word_base
            prev = -1 if j == 0 else docs[first - 1]
            best = np.float32(0)
            for i in range(first, last):
                values[i - first] = docs[i] - prev - 1
                prev = docs[i]
                tf = np.float32(tfs[i])
                weight = term_idf * (tf / (norm[docs[i]] + tf))
                if weight > best:
                    best = weight
            block_max[b] = best
            _pack(words, at, values, count, wd)
            for i in range(first, last):
                values[i - first] = tfs[i] - 1
            _pack(words, at + (count * wd + 31) // 32, values, count, np.int64(block_widths[b, 1]))
    return words


def _pack(words, at, values, count, width):
    """values[:count] (each < 2**width) as `width`-bit fields from word `at` on, LSB first (BP128's layout,
    scalar). The words must be zero."""
    if width == 0:
        return
    for i in range(count):
        value = np.uint64(values[i])
        bit = i * width
        word = at + (bit >> 5)
        shift = np.uint64(bit & 31)
        words[word] |= np.uint32((value << shift) & np.uint64(0xFFFFFFFF))
        if (bit & 31) + width > 32:
            words[word + 1] |= np.uint32(value >> (np.uint64(32) - shift))


# ---------------------------------------------------------------------------------------------- querying


def _unpack(words, at, count, width, out):
    """`count` values of `width` bits from word `at` on (LSB first), into out[:count]."""
    if width == 0:
        for i in range(count):
            out[i] = 0
        return
    mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    for i in range(count):
        bit = i * width
        word = at + (bit >> 5)
        pair = np.uint64(words[word]) | (np.uint64(words[word + 1]) << np.uint64(32))
        out[i] = np.int64((pair >> np.uint64(bit & 31)) & mask)


def _decode_block(words, block_offset, block_widths, block_last, b, j, count, docs):
    """The doc ids of block `b` (the term's `j`-th, `count` postings) into docs; returns (tf width, tf word)."""
    wd = np.int64(block_widths[b, 0])
    at = block_offset[b]
    _unpack(words, at, count, wd, docs)
    prev = np.int64(-1) if j == 0 else np.int64(block_last[b - 1])
    for i in range(count):
        prev += docs[i] + 1
        docs[i] = prev
    return np.int64(block_widths[b, 1]), at + (count * wd + 31) // 32


def _hold(words, block_offset, block_widths, block_last, b, j, count, docs, tfs):
    """Block `b` (the term's `j`-th, `count` postings): doc ids into docs, tf - 1 into tfs; returns the tf width."""
    wt, at = _decode_block(words, block_offset, block_widths, block_last, b, j, count, docs)
    _unpack(words, at, count, wt, tfs)
    return wt


def _hold_term(t, b, j, count, csc, indices, base, words, block_offset, block_widths, block_last, docs, tfs, wts,
               held, pos, weighed, stats):
    """`_top_k`'s query term t takes its j-th block (b, `count` postings) as the one it holds: doc ids into docs[t]
    (tf - 1 into tfs[t], the tf width into wts[t]), decoded from the packed words, or for a csc index (`csc`) its
    rows indices[base[t] + 128 j:][:count] copied (width 0, tfs unused); its cursor at the block's start, its
    weights not computed yet."""
    if csc:
        at = base[t] + j * 128
        for i in range(count):
            docs[t, i] = indices[at + i]
        wts[t] = 0
    else:
        wts[t] = _hold(words, block_offset, block_widths, block_last, b, j, count, docs[t], tfs[t])
    held[t] = j
    pos[t] = 0
    weighed[t] = False
    stats[0] += count


def _weigh_term(t, j, count, csc, data, base, idfs, norm, inv1, repeats, docs, tfs, wts, weights, weighed, stats):
    """The weights x repeat of term t's held block (its j-th, `count` postings) into weights[t]: `_weigh`, or for a
    csc index its stored weights data[base[t] + 128 j:][:count] x repeat (the same float32 values: the csc builder
    computed them as `_weigh` does)."""
    if csc:
        at = base[t] + j * 128
        for i in range(count):
            weights[t, i] = data[at + i] * repeats[t]
    else:
        _weigh(count, idfs[t], norm, inv1, repeats[t], docs[t], tfs[t], wts[t], weights[t])
    weighed[t] = True
    stats[8] += count


def _weigh(count, idf, norm, inv1, repeat, docs, tfs, wt, weights):
    """The held block's weights x repeat into weights, float32 as the csc builder computes them (inv1 = 1 / (norm
    + 1), the tf-1 factor, saves the division in a block whose tfs are all 1, the common case). A loop of its own
    after the doc ids are known: the norm reads (cache misses where the block is sparse) do not wait on each
    other, as they would interleaved with the doc ids' running sum (27 -> 18 ns a posting, a term in 1 of 54
    passages at 21M)."""
    if wt == 0:
        for i in range(count):
            weights[i] = (idf * inv1[docs[i]]) * repeat
    else:
        for i in range(count):
            tf = np.float32(tfs[i] + 1)
            weights[i] = (idf * (tf / (norm[docs[i]] + tf))) * repeat


def _weight(idf, tf_minus_1, norm, inv1, doc, repeat):
    """One posting's weight x repeat, the same float32 value `_weigh` computes (1 / (norm + 1) is inv1's value)."""
    if tf_minus_1 == 0:
        return (idf * inv1[doc]) * repeat
    tf = np.float32(tf_minus_1 + 1)
    return (idf * (tf / (norm[doc] + tf))) * repeat


def _heap_push(heap_scores, heap_rows, size, k, score, row):
    """Keep the k best (score high first, then row low) in a heap whose root is the worst kept. Returns the
    new size."""
    if size < k:
        i = size
        while i > 0:
            parent = (i - 1) >> 1
            if score < heap_scores[parent] or (score == heap_scores[parent] and row > heap_rows[parent]):
                heap_scores[i] = heap_scores[parent]
                heap_rows[i] = heap_rows[parent]
                i = parent
            else:
                break
        heap_scores[i] = score
        heap_rows[i] = row
        return size + 1
    if score > heap_scores[0] or (score == heap_scores[0] and row < heap_rows[0]):
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            right = child + 1
            if right < size and (heap_scores[right] < heap_scores[child] or
                                 (heap_scores[right] == heap_scores[child] and heap_rows[right] > heap_rows[child])):
                child = right
            if heap_scores[child] < score or (heap_scores[child] == score and heap_rows[child] > row):
                heap_scores[i] = heap_scores[child]
                heap_rows[i] = heap_rows[child]
                i = child
            else:
                break
        heap_scores[i] = score
        heap_rows[i] = row
    return size


def _offer(heap_scores, heap_rows, size, k, worst, row, score):
    """Put `row` with its new partial `score` among the k best kept so far (heap_*[:size], in no order; `worst`
    indexes the worst kept, ties: the higher row), in its own slot when kept already (a partial score only
    grows), else a free one, else the worst's. Returns (size, worst); worst means something once size == k.
    The caller offers only a score that beats the worst (or while size < k): the common case costs no call.
    A linear scan, as k <= 64 here: cheaper than a heap that would have to find a kept row again."""
    slot = -1
    for i in range(size):
        if heap_rows[i] == row:
            slot = i
            break
    if slot < 0:
        if size < k:
            slot = size
            size += 1
        else:
            slot = worst
    heap_rows[slot] = row
    heap_scores[slot] = score
    if size == k:
        worst = 0
        for i in range(1, k):
            if heap_scores[i] < heap_scores[worst] or \
                    (heap_scores[i] == heap_scores[worst] and heap_rows[i] > heap_rows[worst]):
                worst = i
    return size, worst


def _best_k(scratch, rows, count, k, heap_scores, heap_rows):
    """The k best of rows[:count] by partial score (ties: lower row) into the heap; returns how many."""
    size = 0
    for i in range(count):
        score = scratch[rows[i]]
        row = np.int64(rows[i])
        # the common case, not better than the worst kept, decided here without a call
        if size == k and (score < heap_scores[0] or (score == heap_scores[0] and row > heap_rows[0])):
            continue
        size = _heap_push(heap_scores, heap_rows, size, k, score, row)
    return size


def _kth_best(scratch, rows, count, k, heap_scores, heap_rows):
    """The k-th best partial score among rows[:count] (-inf when fewer than k)."""
    if count < k:
        return -np.inf
    _best_k(scratch, rows, count, k, heap_scores, heap_rows)
    return np.float64(heap_scores[0])


def _query_terms(token_ids, term_df):
    """The query's distinct known terms, rarest first (ties by term id: the order `PrunedTopK` sums in), and how
    often each occurs (float32: a term repeated in the query counts as often, as in bm25s)."""
    ordered = np.sort(token_ids)
    uniq = np.empty(len(ordered), dtype=np.int64)
    reps = np.empty(len(ordered), dtype=np.float32)
    n_uniq = 0
    for i in range(len(ordered)):
        t = ordered[i]
        if t < 0 or t >= len(term_df) or term_df[t] == 0:
            continue
        if n_uniq and uniq[n_uniq - 1] == t:
            reps[n_uniq - 1] += 1
        else:
            uniq[n_uniq] = t
            reps[n_uniq] = 1
            n_uniq += 1
    dfs = np.empty(n_uniq, dtype=np.int64)
    for i in range(n_uniq):
        dfs[i] = term_df[uniq[i]]
    order = np.argsort(dfs, kind="mergesort")
    return uniq[:n_uniq][order], reps[:n_uniq][order]


def _top_k(token_ids, k, window, words, block_last, block_offset, block_widths, block_max, term_first, term_df, idf,
           norm, inv1, acc, bits, cands, has, tf_of, marked, stats, csc, data, indices, indptr, w_of):
    """Exact top k of one query, window by window (see the module docstring). Returns (rows, scores), best first.
    acc: float32[window], zero; bits, has: uint64[window / 64], zero; tf_of: int32[window], zero (all left zero);
    cands, marked: int32[window]. stats: see `PackedIndex.stats`.
    `csc`: the postings are a csc index's columns (data, indices, indptr: its stored weights and rows, blocks of
    128 postings laid over them by `csc_blocks`) instead of packed words; words, block_offset, block_widths, idf,
    norm, inv1 are then unused, and w_of (float32[window], zero, left zero) holds a looked-up term's marked
    weights where tf_of holds its tfs for packed postings."""
    empty_rows = np.zeros(0, dtype=np.int64)
    empty_scores = np.zeros(0, dtype=np.float32)
    if k <= 0:
        return empty_rows, empty_scores
    terms, repeats = _query_terms(token_ids, term_df)
    n_terms = len(terms)
    if n_terms == 0:
        return empty_rows, empty_scores
    first = np.empty(n_terms, dtype=np.int64)
    dfs = np.empty(n_terms, dtype=np.int64)
    nbs = np.empty(n_terms, dtype=np.int64)
    last = np.int64(0)
    for i in range(n_terms):
        first[i] = term_first[terms[i]]
        dfs[i] = term_df[terms[i]]
        nbs[i] = (dfs[i] + 127) // 128
        last = max(last, np.int64(block_last[first[i] + nbs[i] - 1]))
    # per term: its idf (packed), or where its postings start in data/indices (csc: its j-th block holds the
    # postings base[i] + 128 j on); an array a layout does not have is empty and never read
    base = np.zeros(n_terms, dtype=np.int64)
    term_idfs = np.zeros(n_terms, dtype=np.float32)
    for i in range(n_terms):
        if csc:
            base[i] = indptr[terms[i]]
        else:
            term_idfs[i] = idf[terms[i]]
    # per term: cur, its first block not wholly before the window; the block held decoded in its buffer (docs,
    # weights x repeat) and pos, the next posting there not yet passed
    cur = np.zeros(n_terms, dtype=np.int64)
    held = np.full(n_terms, -1, dtype=np.int64)
    pos = np.zeros(n_terms, dtype=np.int64)
    docs = np.empty((n_terms, 128), dtype=np.int64)
    tfs = np.empty((n_terms, 128), dtype=np.int64)  # tf - 1
    wts = np.zeros(n_terms, dtype=np.int64)  # the held block's tf width (0: every tf is 1)
    weighed = np.zeros(n_terms, dtype=np.bool_)  # whether the held block's weights x repeat are in weights
    weights = np.empty((n_terms, 128), dtype=np.float32)
    bound = np.zeros(n_terms, dtype=np.float64)
    rest = np.zeros(n_terms + 1, dtype=np.float64)  # rest[i]: the most terms i.. can add to a passage in the window
    heap_scores = np.empty(k, dtype=np.float32)
    heap_rows = np.empty(k, dtype=np.int64)
    size = 0
    theta = -np.inf  # the k-th best final score so far: only a passage scoring above it can still enter
    slack = 1 + 1e-5  # bounds are float64 sums of float32 maxima; the float32 sums they bound may round above
    magic = np.uint64(_DEBRUIJN_MAGIC)
    n_words = (window + 63) >> 6
    sparse = window * SPARSE_SPAN
    start = np.int64(0)
    while start <= last:
        end = start + window
        # 1. each term's bound in the window: the largest block max of its blocks overlapping it, or for a block
        # held decoded, the largest weight it has in the window
        for i in range(n_terms):
            f = first[i]
            nb = nbs[i]
            j = cur[i]
            while j < nb and block_last[f + j] < start:
                j += 1
            cur[i] = j
            top = 0.0
            while j < nb:
                b = f + j
                low = np.int64(0) if j == 0 else np.int64(block_last[b - 1]) + 1
                if low >= end:
                    break
                high = np.int64(block_last[b])
                count = min(128, dfs[i] - j * 128)
                if held[i] != j and high - low >= sparse:
                    # a sparse block, spanning more than a window: read once now, it bounds each window exactly
                    _hold_term(i, b, j, count, csc, indices, base, words, block_offset, block_widths,
                               block_last, docs, tfs, wts, held, pos, weighed, stats)
                if held[i] == j and (weighed[i] or high - low >= sparse):
                    if not weighed[i]:
                        _weigh_term(i, j, count, csc, data, base, term_idfs, norm, inv1, repeats, docs, tfs, wts,
                                    weights, weighed, stats)
                    p = pos[i]
                    while p < count and docs[i, p] < start:
                        p += 1
                    pos[i] = p
                    while p < count and docs[i, p] < end:
                        top = max(top, np.float64(weights[i, p]))
                        p += 1
                else:
                    top = max(top, np.float64(block_max[b]) * repeats[i])
                if high >= end - 1:
                    break
                j += 1
            bound[i] = top
        for i in range(n_terms - 1, -1, -1):
            rest[i] = rest[i + 1] + bound[i]
        if rest[0] == 0 or rest[0] * slack < theta:
            stats[2] += 1  # no passage in the window can enter the top k: skipped, nothing decoded
            start = end
            continue
        stats[3] += 1
        # 2. the essential terms, a prefix of the rarest-first order (the summation order: scores stay
        # bit-identical); the longest suffix whose bounds cannot lift a passage to theta is only looked up
        e = n_terms
        while e > 0 and rest[e - 1] * slack < theta:
            e -= 1
        stats[7] += n_terms - e
        # 3. every posting of the essential terms in the window added, first reaches marked in the bitset
        for i in range(e):
            f = first[i]
            nb = nbs[i]
            j = cur[i]
            while j < nb:
                b = f + j
                low = np.int64(0) if j == 0 else np.int64(block_last[b - 1]) + 1
                if low >= end:
                    break
                high = np.int64(block_last[b])
                count = min(128, dfs[i] - j * 128)
                # a passage first reached here can make the top k only if this block's best lifts it to theta
                fresh = not ((min(np.float64(block_max[b]) * repeats[i], bound[i]) + rest[i + 1]) * slack < theta)
                if not fresh:
                    # then only passages earlier terms reached need the block: any in its range in this window?
                    earlier = False
                    for w in range((max(low, start) - start) >> 6, ((min(high, end - 1) - start) >> 6) + 1):
                        if bits[w]:
                            earlier = True
                            break
                    if not earlier:
                        if held[i] != j:
                            stats[1] += 1
                        if high >= end:
                            break
                        j += 1
                        continue
                if held[i] != j:
                    _hold_term(i, b, j, count, csc, indices, base, words, block_offset, block_widths,
                               block_last, docs, tfs, wts, held, pos, weighed, stats)
                p = pos[i]
                while p < count and docs[i, p] < start:
                    p += 1
                if not weighed[i] and p < count and docs[i, p] < end:  # not for a block starting past the window
                    _weigh_term(i, j, count, csc, data, base, term_idfs, norm, inv1, repeats, docs, tfs, wts,
                                weights, weighed, stats)
                if fresh:
                    while p < count:
                        local = docs[i, p] - start
                        if local >= window:
                            break
                        acc[local] += weights[i, p]
                        bits[local >> 6] |= np.uint64(1) << np.uint64(local & 63)
                        p += 1
                else:
                    while p < count:
                        local = docs[i, p] - start
                        if local >= window:
                            break
                        old = acc[local]
                        if old > 0:
                            acc[local] = old + weights[i, p]
                        p += 1
                pos[i] = p
                if p < count:
                    break  # the block goes on into the next window
                j += 1
            cur[i] = j
        # 4. the candidates, in row order out of the bitset, kept where what they have plus what the looked-up
        # terms could add reaches theta (branch-free: a passage kept or dropped is a coin toss to the CPU)
        n_cand = 0
        reached = 0
        for w in range(n_words):
            word = bits[w]
            if word == 0:
                continue
            bits[w] = 0
            while word:
                lowest = word & (~word + np.uint64(1))
                word ^= lowest
                local = (w << 6) + _DEBRUIJN[(lowest * magic) >> np.uint64(58)]
                reached += 1
                score = acc[local]
                alive = (np.float64(score) + rest[e]) * slack >= theta
                acc[local] = score * np.float32(alive)  # a dropped passage's entry back to zero
                cands[n_cand] = local
                n_cand += alive
        stats[4] += reached
        # 5. the looked-up terms in order, term at a time over the candidates (each term's cursor in registers),
        # each adding its weight where it has the passage; a candidate is dropped once its score plus what the
        # remaining terms could add falls below theta
        for m in range(e, n_terms):
            if n_cand == 0:
                break
            stats[5] += n_cand
            f = first[m]
            nb = nbs[m]
            j = cur[m]
            term_idf = term_idfs[m]
            repeat = repeats[m]
            later = rest[m + 1]
            kept = 0
            # the term's blocks overlapping the window
            spanned = 0
            while j + spanned < nb:
                spanned += 1
                if block_last[f + j + spanned - 1] >= end - 1:
                    break
            if n_cand >= DENSE * spanned:
                # candidates dense against the term's blocks (most would be decoded anyway): its postings in the
                # window marked in a bitset, tf - 1 > 0 kept aside, then one branch-free test a candidate
                n_marked = 0
                while j < nb:
                    b = f + j
                    if j and block_last[b - 1] + 1 >= end:
                        break
                    count = min(128, dfs[m] - j * 128)
                    if held[m] != j:
                        _hold_term(m, b, j, count, csc, indices, base, words, block_offset, block_widths,
                                   block_last, docs, tfs, wts, held, pos, weighed, stats)
                    p = pos[m]
                    while p < count and docs[m, p] < start:
                        p += 1
                    while p < count:
                        local = docs[m, p] - start
                        if local >= window:
                            break
                        if csc:
                            w_of[local] = data[base[m] + j * 128 + p] * repeat
                            marked[n_marked] = local
                            n_marked += 1
                        else:
                            has[local >> 6] |= np.uint64(1) << np.uint64(local & 63)
                            if tfs[m, p]:
                                tf_of[local] = tfs[m, p]
                                marked[n_marked] = local
                                n_marked += 1
                        p += 1
                    pos[m] = p
                    if p < count:
                        break  # the block goes on into the next window
                    j += 1
                for c in range(n_cand):
                    local = cands[c]
                    score = acc[local]
                    if csc:
                        score = score + w_of[local]  # x + 0 == x: a candidate the term lacks keeps its score
                    else:
                        hit = (has[local >> 6] >> np.uint64(local & 63)) & np.uint64(1)
                        if tf_of[local]:
                            weight = _weight(term_idf, tf_of[local], norm, inv1, start + local, repeat)
                        else:
                            weight = (term_idf * inv1[start + local]) * repeat
                        score = score + weight * np.float32(hit)  # x + w * 0 == x, x + w * 1 == x + w, bit for bit
                    alive = (np.float64(score) + later) * slack >= theta
                    acc[local] = score * np.float32(alive)
                    cands[kept] = local
                    kept += alive
                if csc:
                    for i in range(n_marked):
                        w_of[marked[i]] = 0
                else:
                    has[:n_words] = 0
                    for i in range(n_marked):
                        tf_of[marked[i]] = 0
                cur[m] = j
                n_cand = kept
                continue
            for c in range(n_cand):
                local = cands[c]
                d = start + local
                score = acc[local]
                if j < nb and block_last[f + j] < d:
                    # galloping from the current block: O(1) for dense candidates, O(log gap) for sparse ones
                    low, high, step = j, j + 1, 1
                    while high < nb and block_last[f + high] < d:
                        low = high
                        step *= 2
                        high = low + step
                    high = min(high, nb)
                    while high - low > 1:  # block_last[low] < d <= block_last[high] (or high == nb)
                        middle = (low + high) >> 1
                        if block_last[f + middle] < d:
                            low = middle
                        else:
                            high = middle
                    j = high
                if j < nb:
                    b = f + j
                    if (np.float64(score) + np.float64(block_max[b]) * repeat + later) * slack < theta:
                        acc[local] = 0  # not even this block's best lifts it to theta
                        continue
                    count = min(128, dfs[m] - j * 128)
                    if held[m] != j:
                        # doc ids only: of a looked-up block's postings few are wanted, and a weight costs a read
                        # of the passage's norm, a cache miss where the block is sparse
                        _hold_term(m, b, j, count, csc, indices, base, words, block_offset, block_widths,
                                   block_last, docs, tfs, wts, held, pos, weighed, stats)
                    p = pos[m]
                    while p < count and docs[m, p] < d:
                        p += 1
                    pos[m] = p
                    at = min(p, count - 1)
                    hit = docs[m, at] == d
                    if csc:
                        weight = data[base[m] + j * 128 + at] * repeat
                    elif hit and tfs[m, at]:
                        weight = _weight(term_idf, tfs[m, at], norm, inv1, d, repeat)
                    else:
                        weight = (term_idf * inv1[d]) * repeat  # x + w * 0 == x and x + w * 1 == x + w, bit for bit
                    score = score + weight * np.float32(hit)
                alive = (np.float64(score) + later) * slack >= theta
                acc[local] = score * np.float32(alive)
                cands[kept] = local
                kept += alive
            cur[m] = j
            n_cand = kept
        # 6. the survivors' scores are final: into the k best (ties: lower row; a later window's rows are higher,
        # so a passage only tying the k-th best is not kept), their entries back to zero for the next window
        stats[6] += reached - n_cand
        for c in range(n_cand):
            local = cands[c]
            score = acc[local]
            acc[local] = 0
            d = start + local
            if size < k or score > heap_scores[0]:  # (rows ascend: a tie with the k-th best never enters)
                size = _heap_push(heap_scores, heap_rows, size, k, score, d)
                if size == k:
                    theta = np.float64(heap_scores[0])
        start = end
    # best first, exact ties by lower row
    by_row = np.argsort(heap_rows[:size])
    rows = heap_rows[:size][by_row]
    scores = heap_scores[:size][by_row]
    ranking = np.argsort(-scores, kind="mergesort")
    return rows[ranking], scores[ranking]


# ---------------------------------------------------------------------------------------------- the csc's kernel
# `bm25_topk.PrunedTopK`'s one-call kernel lives here, not in bm25_topk.py, because it calls the heap above: numba's
# disk cache (cache=True) checks only the stamp of the file defining the cached function, so a kernel inlining
# compiled helpers of another file would keep running their old code after that file changed (numba PR #8396).
# Rule: a function compiled with cache=True lives in the same file as every compiled function it calls
# (tests/retrieval/test_retrieval_bm25_kernel_cache.py checks it).


def _top_k_csc(token_ids, k, data, indices, indptr, term_max, scratch, found, stats):
    """`bm25_topk.PrunedTopK.top_k` in one compiled call (the csc numba path): MaxScore as `_top_k` runs it, over
    the CSC's stored weights (no decode, no norm read). Distinct terms rarest first (term ids sorted, then
    stably by column length, as the numpy path), so every score is summed in the same order as there and
    bit-identical. Rare terms add every posting into `scratch` (float32 per passage, zero) and list the passages
    they reach first in `found` (int32 per passage); theta is the k-th best partial score; once the remaining
    terms' bounds fall below it the frequent terms are only looked up, by galloping search in their sorted
    columns, for the candidates still in reach, whose k best a heap keeps. Only touched entries are reset.
    stats: postings added in full, terms looked up, kernel calls. Returns (rows, scores), best first, exact
    ties by lower row."""
    empty_rows = np.zeros(0, dtype=np.int64)
    empty_scores = np.zeros(0, dtype=np.float32)
    stats[2] += 1
    n_columns = len(indptr) - 1
    if len(token_ids) == 0 or k <= 0:
        return empty_rows, empty_scores
    ordered = np.sort(token_ids)
    uniq = np.empty(len(ordered), dtype=np.int64)
    reps = np.empty(len(ordered), dtype=np.float32)
    n_uniq = 0
    for i in range(len(ordered)):
        t = ordered[i]
        if t < 0 or t >= n_columns or indptr[t + 1] == indptr[t]:
            continue  # unknown ids and empty columns add nothing
        if n_uniq and uniq[n_uniq - 1] == t:
            reps[n_uniq - 1] += 1
        else:
            uniq[n_uniq] = t
            reps[n_uniq] = 1
            n_uniq += 1
    if n_uniq == 0:
        return empty_rows, empty_scores
    lengths = np.empty(n_uniq, dtype=np.int64)
    for i in range(n_uniq):
        lengths[i] = indptr[uniq[i] + 1] - indptr[uniq[i]]
    order = np.argsort(lengths, kind="mergesort")
    terms = uniq[:n_uniq][order]
    repeats = reps[:n_uniq][order]
    n_terms = n_uniq
    # the most terms i.. can still add, and the same with the float32 margin (as the numpy path)
    rest = np.zeros(n_terms + 1, dtype=np.float64)
    for i in range(n_terms - 1, -1, -1):
        rest[i] = rest[i + 1] + np.float64(repeats[i]) * np.float64(term_max[terms[i]])
    bound = rest * (1 + 1e-5)
    heap_scores = np.empty(k, dtype=np.float32)
    heap_rows = np.empty(k, dtype=np.int64)
    n_found = 0
    theta = -np.inf
    n = 0
    # the k best partial scores so far (ties: lower row), kept up to date as the rare terms are added: theta
    # without a pass over the reached passages; for a large k the offers cost more, theta is then taken by a pass
    track = k <= 64
    size = 0
    worst = 0
    worst_score = np.float32(-np.inf)
    worst_row = np.int64(-1)
    while n < n_terms:
        if n and bound[n] < theta:
            break
        repeat = repeats[n]
        start, end = indptr[terms[n]], indptr[terms[n] + 1]
        stats[0] += end - start
        for j in range(start, end):
            d = indices[j]
            old = scratch[d]
            # branch-free: a first reach is unpredictable, a mispredicted branch costs more than the store
            found[n_found] = d
            n_found += np.int64(old == 0)
            new = old + data[j] * repeat
            scratch[d] = new
            if track and (new > worst_score or (new == worst_score and d < worst_row) or size < k):
                size, worst = _offer(heap_scores, heap_rows, size, k, worst, d, new)
                if size == k:
                    worst_score = heap_scores[worst]
                    worst_row = heap_rows[worst]
        n += 1
        if track:
            if size == k:
                theta = max(theta, np.float64(worst_score))
        elif n < n_terms and rest[n + 1] < rest[0] - rest[n]:  # a pass helps only once the terms read could
            theta = max(theta, _kth_best(scratch, found, n_found, k, heap_scores, heap_rows))  # outweigh the rest
    stats[1] += n_terms - n
    if n < n_terms:
        candidates = np.empty(n_found, dtype=found.dtype)
        n_cand = 0
        for c in range(n_found):
            d = found[c]
            if np.float64(scratch[d]) + bound[n] >= theta:
                candidates[n_cand] = d
                n_cand += 1
        in_order = False
        size = 0
        for m in range(n, n_terms):
            repeat = repeats[m]
            start, end = indptr[terms[m]], indptr[terms[m] + 1]
            length = end - start
            kept = 0
            size = 0
            if n_cand * 32 > length:
                # many candidates for this column: one pass adding to every passage already reached is cheaper
                # than finding each (a reached passage no longer a candidate gains weight nobody reads); 32 was
                # the fastest of 1-256 at 1M passages (1.21 ms a question against 1.37 at 8) and at 17.7k
                for j in range(start, end):
                    d = indices[j]
                    old = scratch[d]
                    scratch[d] = old + data[j] * repeat * np.float32(old > 0)  # x + w * 1 == x + w, bit for bit
            else:
                if not in_order:
                    candidates[:n_cand] = np.sort(candidates[:n_cand])
                    in_order = True
                at = start
                for c in range(n_cand):
                    d = candidates[c]
                    if at < end and indices[at] < d:
                        # galloping: O(1) for dense candidates, O(log gap) for sparse ones
                        low, high, step = at, at + 1, 1
                        while high < end and indices[high] < d:
                            low = high
                            step *= 2
                            high = low + step
                        if high > end:
                            high = end
                        while high - low > 1:  # indices[low] < d <= indices[high] (or high == end)
                            middle = (low + high) >> 1
                            if indices[middle] < d:
                                low = middle
                            else:
                                high = middle
                        at = high
                    if at < end and indices[at] == d:
                        scratch[d] += data[at] * repeat
            for c in range(n_cand):
                d = candidates[c]
                score = scratch[d]
                if np.float64(score) + bound[m + 1] >= theta:
                    candidates[kept] = d
                    kept += 1
                    row = np.int64(d)
                    if size < k or score > heap_scores[0] or (score == heap_scores[0] and row < heap_rows[0]):
                        size = _heap_push(heap_scores, heap_rows, size, k, score, row)
            n_cand = kept
            if size == k:
                theta = max(theta, np.float64(heap_scores[0]))
    elif not track:
        size = _best_k(scratch, found, n_found, k, heap_scores, heap_rows)
    by_row = np.argsort(heap_rows[:size])
    rows = heap_rows[:size][by_row]
    scores = heap_scores[:size][by_row]
    ranking = np.argsort(-scores, kind="mergesort")
    rows = rows[ranking]
    scores = scores[ranking]
    if n_found > len(scratch) // 16:
        scratch[:] = 0
    else:
        for i in range(n_found):
            scratch[found[i]] = 0
    return rows, scores


_COMPILED: dict = {}
_COMPILE_LOCK = threading.Lock()


def _compiled() -> dict:
    """The numba versions of the loops above (compiled on first use, cached on disk by numba)."""
    with _COMPILE_LOCK:
        if not _COMPILED:
            require_numba()
            import numba

            jit = numba.njit(nogil=True, cache=True)
            # the helpers the kernels call are module globals: numba resolves them when it compiles a kernel,
            # so they are swapped for their compiled versions first
            for name in ("_pack", "_unpack", "_decode_block", "_hold", "_weigh", "_hold_term", "_weigh_term",
                         "_weight", "_heap_push", "_offer", "_best_k", "_kth_best", "_query_terms"):
                globals()[name] = jit(globals()[name])
            _COMPILED["encode_bucket"] = jit(_encode_bucket)
            _COMPILED["top_k"] = jit(_top_k)
            _COMPILED["top_k_csc"] = jit(_top_k_csc)
            _COMPILED["to_csc"] = jit(_to_csc_columns)
    return _COMPILED


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view: the memory maps are read-only, and numba compiles one kernel per argument type, so every
    array a `_top_k` call passes is read-only and both layouts run one compiled kernel."""
    view = np.asarray(array).view()
    view.flags.writeable = False
    return view


_NONE = {dtype: _read_only(np.zeros(0, dtype=dtype)) for dtype in (np.float32, np.int32, np.int64, np.uint32)}


class WindowedScorer:
    """`_top_k` over blocks of 128 postings: the calls, per-thread scratch arrays (safe to call from several threads)
    and running `stats`. A layout sets `_postings`, the kernel's arguments after the window: `PackedIndex` (packed
    words) or `CscWindows` (a csc index's columns)."""

    _postings: tuple

    def __init__(self, window: int):
        require_numba()
        if int(window) < 1:
            raise ConfigError(f"the bm25 scorer's window must be a positive number of passages, got {window}")
        self.window = int(window)
        self._top_k = _compiled()["top_k"]
        self._local = threading.local()
        self._stats_lock = threading.Lock()
        # running totals (STATS names them)
        self.stats = np.zeros(len(STATS), dtype=np.int64)

    def _scratch(self):
        """This thread's window accumulator and bitsets (the kernel leaves them zero), for the current window."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None or len(scratch[0]) != self.window:
            scratch = self._local.scratch = (np.zeros(self.window, dtype=np.float32),
                                             np.zeros((self.window + 63) // 64, dtype=np.uint64),
                                             np.empty(self.window, dtype=np.int32),
                                             np.zeros((self.window + 63) // 64, dtype=np.uint64),
                                             np.zeros(self.window, dtype=np.int32),
                                             np.empty(self.window, dtype=np.int32),
                                             np.zeros(self.window, dtype=np.float32))
        return scratch

    def top_k(self, token_ids, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best passages, best first, exact ties by lower row; fewer when fewer match."""
        acc, bits, cands, has, tf_of, marked, w_of = self._scratch()
        stats = np.zeros(len(STATS), dtype=np.int64)
        words, block_last, block_offset, block_widths, block_max, term_first, df, idf, norm, inv1, csc, data, \
            indices, indptr = self._postings
        rows, values = self._top_k(np.asarray(token_ids, dtype=np.int64), int(k), np.int64(len(acc)), words,
                                   block_last, block_offset, block_widths, block_max, term_first, df, idf, norm, inv1,
                                   acc, bits, cands, has, tf_of, marked, stats, csc, data, indices, indptr, w_of)
        with self._stats_lock:
            self.stats += stats
        return rows, values

    def compile(self) -> None:
        """Have numba compile the kernel now, by one query of term 0 (which must exist): ~10-13 s the first time on
        2 cores, then ~0.3 s from numba's disk cache. The running `stats` are left as they were."""
        with self._stats_lock:
            saved = self.stats.copy()
        self.top_k(np.zeros(1, dtype=np.int64), 1)
        with self._stats_lock:
            self.stats[:] = saved
        self._local.__dict__.clear()  # the building thread may never query: its scratch is not kept

    def top_k_many(self, token_ids, k: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Every query's `top_k`, one query after another in two arrays, and each query's count (as
        `bm25_topk.PrunedTopK.top_k_many`)."""
        ranked = [self.top_k(ids, k) for ids in token_ids]
        return (np.concatenate([rows for rows, _ in ranked] or [np.zeros(0, dtype=np.int64)]),
                np.concatenate([values for _, values in ranked] or [np.zeros(0, dtype=np.float32)]),
                [len(rows) for rows, _ in ranked])

    @property
    def postings_scanned(self) -> int:
        return int(self.stats[0])

    @property
    def blocks_skipped(self) -> int:
        return int(self.stats[1])

    @property
    def terms_searched(self) -> int:
        """(term, window) pairs where the term was only looked up for the window's candidates."""
        return int(self.stats[7])


class PackedIndex(WindowedScorer):
    """A packed index folder's arrays (memory-mapped) and its scorer: `top_k(token_ids, k)` answers one query
    in one compiled call."""

    def __init__(self, folder: Path, window: int = WINDOW):
        super().__init__(window)
        self.folder = Path(folder)
        self._maps = [np.load(self.folder / name, mmap_mode="r")
                      for name in (WORDS, BLOCK_LAST, BLOCK_OFFSET, BLOCK_WIDTHS, BLOCK_MAX)]
        # plain ndarray views of the maps: numba takes them as arrays, no copy
        self.words, self.block_last, self.block_offset, self.block_widths, self.block_max = \
            (np.asarray(array) for array in self._maps)
        self.term_first = np.load(self.folder / TERM_FIRST)
        self.df = np.load(self.folder / TERM_DF)
        self.idf = np.load(self.folder / IDF)
        self.norm = np.load(self.folder / NORM)
        # 1 / (norm + 1) per passage, the weight's factor where tf is 1 (most postings): computed once here with
        # the same float32 division the scorer would do, so weights stay bit-identical
        self.inv1 = np.float32(1) / (self.norm + np.float32(1))
        self.num_docs = len(self.norm)
        self._postings = (*map(_read_only, (self.words, self.block_last, self.block_offset, self.block_widths,
                                            self.block_max, self.term_first, self.df, self.idf, self.norm,
                                            self.inv1)),
                          False, _NONE[np.float32], _NONE[np.int32], _NONE[np.int64])

    def maps(self) -> tuple:
        """The memory maps worth reading ahead (`BM25Retriever.warm_up`)."""
        return tuple(self._maps)


CSC_BLOCK_LAST = "csc_block_last.npy"  # int32 last row of each block of 128 postings laid over the csc's columns
CSC_BLOCK_MAX = "csc_block_max.npy"  # float32 largest weight of each such block


def csc_blocks(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(block_last int32, block_max float32) of the blocks of 128 postings laid over a csc index's columns (rows
    ascending in each column), column after column as `csc_block_layout` numbers them: one pass over `data`."""
    starts, ends = _csc_block_ranges(indptr, *csc_block_layout(indptr))
    if not len(starts):
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
    # the blocks tile data[indptr[0]:indptr[-1]] in order, so each block's maximum is one segment of a reduceat
    block_max = np.maximum.reduceat(np.asarray(data)[:ends[-1]], starts).astype(np.float32)
    return np.asarray(indices)[ends - 1].astype(np.int32), block_max


def csc_block_layout(indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(term_first int64, term_df int64) of the blocks of 128 postings laid over the columns: a column's blocks are
    contiguous, the j-th holds its postings indptr[t] + 128 j on, as `_top_k` reads them."""
    df = np.diff(np.asarray(indptr, dtype=np.int64))
    term_first = np.zeros(len(df), dtype=np.int64)
    np.cumsum(((df + 127) // 128)[:-1], out=term_first[1:])
    return term_first, df


def _csc_block_ranges(indptr: np.ndarray, term_first: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every block's first and one-past-last posting (int64 a block: only to compute the bounds, not at load)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    block_term = np.repeat(np.arange(len(df)), (df + 127) // 128)
    starts = indptr[:-1][block_term] + 128 * (np.arange(len(block_term)) - term_first[block_term])
    return starts, np.minimum(starts + 128, indptr[1:][block_term])


def write_csc_blocks(folder: Path) -> None:
    """A csc index's block files (`CSC_BLOCK_LAST`, `CSC_BLOCK_MAX`), written by the builder beside term_max.npy."""
    data = np.load(folder / "data.csc.index.npy", mmap_mode="r")
    indices = np.load(folder / "indices.csc.index.npy", mmap_mode="r")
    block_last, block_max = csc_blocks(data, indices, np.load(folder / "indptr.csc.index.npy"))
    np.save(folder / CSC_BLOCK_LAST, block_last)
    np.save(folder / CSC_BLOCK_MAX, block_max)


def read_csc_blocks(folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """A csc index's block files, memory-mapped, or None for an index built before them."""
    paths = (Path(folder) / CSC_BLOCK_LAST, Path(folder) / CSC_BLOCK_MAX)
    if not all(path.exists() for path in paths):
        return None
    return tuple(np.load(path, mmap_mode="r") for path in paths)


class CscWindows(WindowedScorer):
    """The windowed kernel over a csc index's columns (their stored weights and rows, blocks of 128 postings laid
    over them): no decoding and no norm reads, the same float32 weights and order of additions as the packed
    scorer and `bm25_topk.PrunedTopK`, so the same top k bit for bit. `blocks`: (block_last, block_max) as
    `csc_blocks` computes them (the builder's `CSC_BLOCK_*` files), or None to compute them here. `term_max` (each
    column's largest weight, the builder's term_max.npy), when given, is checked against the blocks' maxima: block
    files left from other weights would prune real hits."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, window: int = WINDOW,
                 blocks: tuple[np.ndarray, np.ndarray] | None = None, term_max: np.ndarray | None = None):
        super().__init__(window)
        term_first, self.df = csc_block_layout(indptr)
        block_last, block_max = blocks if blocks is not None else csc_blocks(data, indices, indptr)
        stale = not len(block_last) == len(block_max) == int(((self.df + 127) // 128).sum())
        if not stale and term_max is not None and len(block_max):
            present = self.df > 0  # each present column's blocks are one segment of block_max
            stale = not np.array_equal(np.maximum.reduceat(np.asarray(block_max), term_first[present]),
                                       np.asarray(term_max)[present].astype(np.float32))
        if stale:
            raise ConfigError("the csc index's block files do not match its columns; rebuild the index")
        self._postings = (_NONE[np.uint32], _read_only(np.asarray(block_last, dtype=np.int32)), _NONE[np.int64],
                          _read_only(np.zeros((0, 2), dtype=np.uint8)),
                          *map(_read_only, (np.asarray(block_max, dtype=np.float32), term_first, self.df)),
                          _NONE[np.float32], _NONE[np.float32], _NONE[np.float32], True,
                          *map(_read_only, (np.asarray(data, dtype=np.float32), np.asarray(indices, dtype=np.int32),
                                            np.asarray(indptr, dtype=np.int64))))


def _to_csc_columns(words, block_last, block_offset, block_widths, term_first, term_df, idf, norm, indptr,
                    data, indices):
    """Every term's postings decoded into CSC columns (rows ascending), weights as the CSC builder's."""
    docs = np.empty(128, dtype=np.int64)
    tfs = np.empty(128, dtype=np.int64)
    for t in range(len(term_df)):
        df = term_df[t]
        out = indptr[t]
        for j in range((df + 127) // 128):
            b = term_first[t] + j
            count = min(128, df - j * 128)
            wt, at = _decode_block(words, block_offset, block_widths, block_last, b, j, count, docs)
            _unpack(words, at, count, wt, tfs)
            for i in range(count):
                tf = np.float32(tfs[i] + 1)
                data[out] = idf[t] * (tf / (norm[docs[i]] + tf))
                indices[out] = docs[i]
                out += 1


def to_csc(packed_dir: Path, out_dir: Path) -> Path:
    """Export a packed index as bm25s's CSC files in `out_dir` (a new or empty folder): the same weights, so
    `bm25s.BM25.load(out_dir, mmap=True)` scores the same index (benchmarks compare against bm25s on it)."""
    packed_dir, out_dir = Path(packed_dir), Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"{out_dir} is not empty; to_csc writes into a new or empty folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    index = PackedIndex(packed_dir)
    indptr = np.zeros(len(index.df) + 1, dtype=np.int64)
    np.cumsum(index.df, out=indptr[1:])
    total = int(indptr[-1])
    data = np.lib.format.open_memmap(out_dir / "data.csc.index.npy", mode="w+", dtype=np.float32, shape=(total,))
    indices = np.lib.format.open_memmap(out_dir / "indices.csc.index.npy", mode="w+", dtype=np.int32,
                                        shape=(total,))
    np.save(out_dir / "indptr.csc.index.npy", indptr)
    _compiled()["to_csc"](index.words, index.block_last, index.block_offset, index.block_widths, index.term_first,
                          index.df, index.idf, index.norm, indptr, data, indices)
    data.flush()
    indices.flush()
    del data, indices
    for name in ("vocab.index.json", "params.index.json", TERM_MAX):
        (out_dir / name).write_bytes((packed_dir / name).read_bytes())
    return out_dir


def index_bytes(folder: Path) -> dict:
    """Sizes on disk: the postings files vs the passage store (which dominates at wiki scale)."""
    sizes = {path.name: path.stat().st_size for path in Path(folder).iterdir() if path.is_file()}
    store = sum(size for name, size in sizes.items() if name.startswith("passage"))
    return {"postings bytes": sum(sizes.values()) - store, "passages bytes": store, "total bytes": sum(sizes.values())}


VOCAB_BLOB = "packed_vocab_blob.npy"  # uint8: the terms, UTF-8, sorted by their bytes, concatenated
VOCAB_OFFSETS = "packed_vocab_offsets.npy"  # int64 (terms + 1): where each term starts in the blob
VOCAB_IDS = "packed_vocab_ids.npy"  # int32: each sorted term's id


def write_sorted_vocab(folder: Path, vocab: dict) -> None:
    """The vocabulary as three arrays (`SortedVocab`): memory-mapped at load in milliseconds, where parsing
    vocab.index.json (kept for bm25s and `to_csc`) took 2.8-6 s at 1M passages (1.85M terms) and grows with it."""
    # an object array of the encoded terms and an argsort: no (term, id) tuple per term (at 21M passages the
    # vocabulary has millions of terms, and this runs beside the tokenizer's own dictionary)
    terms = np.empty(len(vocab), dtype=object)
    terms[:] = [term.encode("utf-8") for term in vocab]
    ids = np.fromiter(vocab.values(), dtype=np.int32, count=len(vocab))
    order = np.argsort(terms, kind="stable")
    terms, ids = terms[order], ids[order]
    del order
    offsets = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(term) for term in terms), dtype=np.int64, count=len(terms)), out=offsets[1:])
    np.save(folder / VOCAB_BLOB, np.frombuffer(b"".join(terms), dtype=np.uint8))
    np.save(folder / VOCAB_OFFSETS, offsets)
    np.save(folder / VOCAB_IDS, ids)


class SortedVocab(Mapping):
    """term -> id by binary search over the sorted, memory-mapped vocabulary (a read-only Mapping: `get`, `in`,
    `[]`, `len`, iteration), ~20 steps a lookup; the query tokenizer caches words above it."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        self._blob = np.load(folder / VOCAB_BLOB, mmap_mode="r")
        self._bytes = memoryview(self._blob) if len(self._blob) else memoryview(b"")
        self._offsets = np.load(folder / VOCAB_OFFSETS, mmap_mode="r")
        self._ids = np.load(folder / VOCAB_IDS, mmap_mode="r")

    def _term(self, i: int) -> bytes:
        return bytes(self._bytes[int(self._offsets[i]):int(self._offsets[i + 1])])

    def __getitem__(self, term: str) -> int:
        key = term.encode("utf-8") if isinstance(term, str) else None
        if key is None:
            raise KeyError(term)
        low, high = 0, len(self._ids)
        while low < high:
            middle = (low + high) // 2
            if self._term(middle) < key:
                low = middle + 1
            else:
                high = middle
        if low < len(self._ids) and self._term(low) == key:
            return int(self._ids[low])
        raise KeyError(term)

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self):
        return (self._term(i).decode("utf-8") for i in range(len(self._ids)))
