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
- **One numba call per query** (`_top_k`, nogil, cache=True; no per-term Python): the query's distinct terms,
  rarest first, MaxScore term at a time (Turtle & Flood 1995) as `bm25_topk.PrunedTopK` does: rare
  ("essential") terms add every posting into a per-thread float32 accumulator; theta, the k-th best partial
  score, is a lower bound on the final k-th score; once the remaining terms' summed bounds fall below theta
  no new passage can reach the top k, and the remaining terms are only looked up for the sorted candidates
  still in reach. Block-max on top: an essential term's block whose largest weight plus the remaining terms'
  bounds is below theta adds nothing for passages it would reach first, and is not even decoded when no
  earlier candidate falls in its doc range; a looked-up term skips blocks by their last doc id, drops a
  candidate whose partial + block max + rest cannot reach theta, and decodes each needed block once. Only
  touched accumulator entries are reset. Results are (rows, scores) best first, exact ties by lower row, the
  contract of `PrunedTopK.top_k`; terms are summed in the same order as there (distinct term ids sorted, then
  stably by df), so the scores are bit-identical to `PrunedTopK`'s too. Bounds carry a 1e-5 relative margin for
  float32 rounding, as in `PrunedTopK`.
- **A streaming build within a memory budget**: tokenisation as for the CSC (bm25.py's loop), but each chunk's
  (doc, term, tf) postings go to B bucket spools by `term % B` (B from the corpus size and `memory_budget`),
  so no whole-corpus posting array ever exists; then per bucket: load, counting-sort by term (passages
  arrive in order, so each term's postings come out sorted), encode blocks, append to `packed_words.npy`.

Needs numba (the `[fast]` extra): there is no numpy fallback; without numba `format=packed` is refused.

Measured (README, "The packed format"; 2 cores shared with other jobs, CPU time): at 1M passages the postings
take 217 MB against the csc's 456 MB; the scorer costs 3.6 ms a question against bm25s numba's 1.5 ms (0.41x;
the csc's PrunedTopK 2.6 ms) and 0.069 ms against 0.051 on the 17,703-passage sample. Where the time goes at
1M (per question): the essential terms' scan ~1.4 ms (a decode and two random reads a posting, norm and
accumulator, where bm25s reads a stored weight and one accumulator entry), theta ~0.3 ms, the candidates'
filtering ~0.4 ms and lookups ~0.9 ms. Precomputed norms were kept over lengths (one load instead of a load, a
multiply, an add and a divide a posting), and 1 / (norm + 1) is precomputed at load for tf = 1 (most postings),
which removed the division there without changing a bit. Since then theta is kept up to date during the
essential terms' scan (the k best partial scores, k <= 64, as `bm25_topk._top_k_csc`; after every block, so a term's
later blocks are skipped by a theta its earlier ones raised) and a looked-up term is read whole when candidates x 32
exceed its df (was x 8): 1M passages, 1,000 HotpotQA questions, 3 interleaved rounds, 2.63 -> 2.29 ms a question
CPU (bm25s numba 1.42, the csc one-call kernel 1.20).

API (the retriever in `bm25.py` builds and loads this format: `bm25.build_bm25_index(corpus, out_dir,
index_format="packed", memory_budget=...)`, `bm25.BM25Retriever(index_dir)`; this module imports nothing of
`bm25.py`, which imports it):
    PackedIndex(folder): the arrays, memory-mapped; `.top_k(token_ids, k)` -> (rows int64, scores float32);
        `.stats` running totals: postings decoded, essential blocks skipped, lookup blocks skipped, terms
        looked up; `.df` document frequency per term id.
    to_csc(packed_dir, out_dir): writes bm25s's CSC files (data/indices/indptr .csc.index.npy, vocab, params)
        with identical weights, so `bm25s.BM25.load(out_dir, mmap=True)` runs on the same index.
    is_packed(folder) -> bool
Spec: `bm25:<corpus>?format=packed` (`ragzoo index build --format packed`); the index cache key includes
the format, so a packed and a csc index of one corpus never collide.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ragzoo.errors import ConfigError

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


def require_numba() -> None:
    try:
        import numba  # noqa: F401
    except ImportError:
        raise ConfigError("bm25 format=packed needs numba: pip install 'ragzoo[fast]'") from None


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


def _read_block(words, block_offset, block_widths, block_last, b, j, count, idf, norm, inv1, repeat, docs,
                weights):
    """Block `b` (the term's `j`-th, `count` postings) in one pass: doc ids into docs, weights * repeat into
    weights (float32, as the csc builder computes them; inv1 = 1 / (norm + 1), the tf-1 factor, saves the
    division where every tf is 1)."""
    wd = np.int64(block_widths[b, 0])
    wt = np.int64(block_widths[b, 1])
    at = block_offset[b]
    at_tf = at + (count * wd + 31) // 32
    mask_d = (np.uint64(1) << np.uint64(wd)) - np.uint64(1)
    mask_t = (np.uint64(1) << np.uint64(wt)) - np.uint64(1)
    doc = np.int64(-1) if j == 0 else np.int64(block_last[b - 1])
    tf = np.float32(1)
    for i in range(count):
        if wd:
            bit = i * wd
            word = at + (bit >> 5)
            pair = np.uint64(words[word]) | (np.uint64(words[word + 1]) << np.uint64(32))
            doc += np.int64((pair >> np.uint64(bit & 31)) & mask_d) + 1
        else:
            doc += 1
        docs[i] = doc
        if wt:
            bit = i * wt
            word = at_tf + (bit >> 5)
            pair = np.uint64(words[word]) | (np.uint64(words[word + 1]) << np.uint64(32))
            tf = np.float32(np.int64((pair >> np.uint64(bit & 31)) & mask_t) + 1)
            weights[i] = (idf * (tf / (norm[doc] + tf))) * repeat
        else:
            weights[i] = (idf * inv1[doc]) * repeat  # the same float32 value as idf * (1 / (norm + 1))


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


def _top_k(token_ids, k, words, block_last, block_offset, block_widths, block_max, term_first, term_df, idf,
           term_max, norm, inv1, scratch, found, touched, stats):
    """Exact top k of one query (see the module docstring). Returns (rows, scores), best first.
    scratch: float32 per passage, zero; found: int32 per passage; touched: uint8 per 128 passages, zero (set
    where a passage was reached: an essential block is skipped only when no earlier candidate may lie in it)."""
    empty_rows = np.zeros(0, dtype=np.int64)
    empty_scores = np.zeros(0, dtype=np.float32)
    if len(token_ids) == 0 or k <= 0:
        return empty_rows, empty_scores
    ordered = np.sort(token_ids)
    # distinct terms with their counts, in term-id order; unknown ids and empty terms drop out
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
    if n_uniq == 0:
        return empty_rows, empty_scores
    dfs = np.empty(n_uniq, dtype=np.int64)
    for i in range(n_uniq):
        dfs[i] = term_df[uniq[i]]
    order = np.argsort(dfs, kind="mergesort")  # rarest first, ties by term id (as PrunedTopK)
    terms = uniq[:n_uniq][order]
    repeats = reps[:n_uniq][order]
    n_terms = n_uniq
    # the most terms i.. can still add, and the same with the float32 margin
    rest = np.zeros(n_terms + 1, dtype=np.float64)
    for i in range(n_terms - 1, -1, -1):
        rest[i] = rest[i + 1] + np.float64(repeats[i]) * np.float64(term_max[terms[i]])
    bound = rest * (1 + 1e-5)
    heap_scores = np.empty(k, dtype=np.float32)
    heap_rows = np.empty(k, dtype=np.int64)
    docs = np.empty(128, dtype=np.int64)
    weights = np.empty(128, dtype=np.float32)
    n_found = 0
    theta = -np.inf
    n = 0
    # the k best partial scores so far (ties: lower row), kept up to date as the essential terms are added, as
    # bm25_topk._top_k_csc does: theta after every block without a pass over the reached passages, so a term's
    # later blocks are skipped by a theta its earlier ones raised; for a large k the offers cost more than a pass
    track = k <= 64
    size = 0
    worst = 0
    worst_score = np.float32(-np.inf)
    worst_row = np.int64(-1)
    # essential terms: every posting added, except in blocks that cannot lift a new passage to theta
    while n < n_terms:
        if n and bound[n] < theta:
            break
        t = terms[n]
        repeat = repeats[n]
        first = term_first[t]
        df = term_df[t]
        nb = (df + 127) // 128
        for j in range(nb):
            b = first + j
            count = min(128, df - j * 128)
            if theta > -np.inf and (np.float64(block_max[b]) * repeat + rest[n + 1]) * (1 + 1e-5) < theta:
                # no passage first reached here can make the top k: only earlier candidates need this block
                low = (-1 if j == 0 else np.int64(block_last[b - 1])) + 1
                high = np.int64(block_last[b])
                if (high >> 7) - (low >> 7) <= 64:
                    earlier = False
                    for r in range(low >> 7, (high >> 7) + 1):
                        if touched[r]:
                            earlier = True
                            break
                    if not earlier:
                        stats[1] += 1
                        continue
                _read_block(words, block_offset, block_widths, block_last, b, j, count, idf[t], norm, inv1, repeat,
                            docs, weights)
                stats[0] += count
                for i in range(count):
                    d = docs[i]
                    old = scratch[d]
                    if old > 0:
                        score = old + weights[i]
                        scratch[d] = score
                        if track and (score > worst_score or (score == worst_score and d < worst_row)):
                            size, worst = _offer(heap_scores, heap_rows, size, k, worst, d, score)
                            worst_score, worst_row = heap_scores[worst], heap_rows[worst]
                if track:
                    theta = max(theta, np.float64(worst_score))
                continue
            _read_block(words, block_offset, block_widths, block_last, b, j, count, idf[t], norm, inv1, repeat,
                        docs, weights)
            stats[0] += count
            for i in range(count):
                d = docs[i]
                old = scratch[d]
                # branch-free: a first reach is unpredictable, a mispredicted branch costs more than the stores
                found[n_found] = d
                n_found += np.int64(old == 0)
                touched[d >> 7] = 1
                score = old + weights[i]
                scratch[d] = score
                if track and (score > worst_score or (score == worst_score and d < worst_row) or size < k):
                    size, worst = _offer(heap_scores, heap_rows, size, k, worst, d, score)
                    if size == k:
                        worst_score, worst_row = heap_scores[worst], heap_rows[worst]
            if track and size == k:
                theta = max(theta, np.float64(worst_score))
        n += 1
        # theta helps only once what was read could outweigh the rest: to stop, or to skip the next term's blocks
        if not track and n < n_terms and rest[n + 1] < rest[0] - rest[n]:
            theta = max(theta, _kth_best(scratch, found, n_found, k, heap_scores, heap_rows))
    # looked-up terms: only for the candidates still in reach
    stats[3] += n_terms - n
    stats[4] += n_found
    if n < n_terms:
        # the candidates still in reach; after each looked-up term the same pass keeps those that can still
        # reach theta with the next terms and gathers their k best (theta's next value, and at the end the answer)
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
            t = terms[m]
            repeat = repeats[m]
            first = term_first[t]
            df = term_df[t]
            nb = (df + 127) // 128
            stats[5] += n_cand
            kept = 0
            size = 0
            if n_cand * 32 > df:
                # many candidates for this term's postings: one pass over its blocks, adding to every passage
                # already reached, is cheaper than finding each candidate (as PrunedTopK's add_to_reached); a
                # reached passage that is no longer a candidate only gains weight nobody reads. 32, as in
                # bm25_topk._top_k_csc: more than ~4 candidates a block of 128 decode nearly every block anyway
                for j in range(nb):
                    count = min(128, df - j * 128)
                    _read_block(words, block_offset, block_widths, block_last, first + j, j, count, idf[t], norm,
                                inv1, repeat, docs, weights)
                    for i in range(count):
                        d = docs[i]
                        old = scratch[d]
                        scratch[d] = old + weights[i] * np.float32(old > 0)  # x + w * 1 == x + w, bit for bit
                stats[0] += df
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
                continue
            if not in_order:
                candidates[:n_cand] = np.sort(candidates[:n_cand])
                in_order = True
            j = 0
            decoded = -1
            pos = 0
            used = 0
            for c in range(n_cand):
                d = candidates[c]
                partial = np.float64(scratch[d])
                if j < nb and block_last[first + j] < d:
                    # galloping from the current block: O(1) for dense candidates, O(log gap) for sparse ones
                    low, high, step = j, j + 1, 1
                    while high < nb and block_last[first + high] < d:
                        low = high
                        step *= 2
                        high = low + step
                    high = min(high, nb)
                    while high - low > 1:  # block_last[low] < d <= block_last[high] (or high == nb)
                        middle = (low + high) >> 1
                        if block_last[first + middle] < d:
                            low = middle
                        else:
                            high = middle
                    j = high
                if j < nb:
                    b = first + j
                    if (partial + (np.float64(block_max[b]) * repeat + rest[m + 1])) * (1 + 1e-5) < theta:
                        continue  # not even this block's best weight lifts it to theta
                    count = min(128, df - j * 128)
                    if decoded != b:
                        _read_block(words, block_offset, block_widths, block_last, b, j, count, idf[t], norm, inv1,
                                    repeat, docs, weights)
                        decoded = b
                        pos = 0
                        used += 1
                        stats[0] += count
                    while pos < count and docs[pos] < d:
                        pos += 1
                    if pos < count and docs[pos] == d:
                        scratch[d] += weights[pos]
                score = scratch[d]
                if np.float64(score) + bound[m + 1] >= theta:
                    candidates[kept] = d
                    kept += 1
                    row = np.int64(d)
                    if size < k or score > heap_scores[0] or (score == heap_scores[0] and row < heap_rows[0]):
                        size = _heap_push(heap_scores, heap_rows, size, k, score, row)
            stats[2] += nb - used
            n_cand = kept
            if size == k:
                theta = max(theta, np.float64(heap_scores[0]))
    elif not track:
        size = _best_k(scratch, found, n_found, k, heap_scores, heap_rows)
    # best first, exact ties by lower row
    by_row = np.argsort(heap_rows[:size])
    rows = heap_rows[:size][by_row]
    scores = heap_scores[:size][by_row]
    ranking = np.argsort(-scores, kind="mergesort")
    rows = rows[ranking]
    scores = scores[ranking]
    # reset only what was touched
    if n_found > len(scratch) // 16:
        scratch[:] = 0
        touched[:] = 0
    else:
        for i in range(n_found):
            scratch[found[i]] = 0
            touched[found[i] >> 7] = 0
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
            for name in ("_pack", "_unpack", "_decode_block", "_read_block", "_heap_push", "_offer", "_best_k",
                         "_kth_best"):
                globals()[name] = jit(globals()[name])
            _COMPILED["encode_bucket"] = jit(_encode_bucket)
            _COMPILED["top_k"] = jit(_top_k)
            _COMPILED["to_csc"] = jit(_to_csc_columns)
    return _COMPILED


class PackedIndex:
    """A packed index folder's arrays (memory-mapped) and its scorer: `top_k(token_ids, k)` answers one query
    in one compiled call; per-thread scratch arrays make it safe to call from several threads."""

    def __init__(self, folder: Path):
        require_numba()
        self.folder = Path(folder)
        self._maps = [np.load(self.folder / name, mmap_mode="r")
                      for name in (WORDS, BLOCK_LAST, BLOCK_OFFSET, BLOCK_WIDTHS, BLOCK_MAX)]
        # plain ndarray views of the maps: numba takes them as arrays, no copy
        self.words, self.block_last, self.block_offset, self.block_widths, self.block_max = \
            (np.asarray(array) for array in self._maps)
        self.term_first = np.load(self.folder / TERM_FIRST)
        self.df = np.load(self.folder / TERM_DF)
        self.idf = np.load(self.folder / IDF)
        self.term_max = np.load(self.folder / TERM_MAX)
        self.norm = np.load(self.folder / NORM)
        # 1 / (norm + 1) per passage, the weight's factor where tf is 1 (most postings): computed once here with
        # the same float32 division the scorer would do, so weights stay bit-identical
        self.inv1 = np.float32(1) / (self.norm + np.float32(1))
        self.num_docs = len(self.norm)
        self._top_k = _compiled()["top_k"]
        self._local = threading.local()
        self._stats_lock = threading.Lock()
        # running totals: postings decoded, essential blocks skipped, looked-up blocks skipped, terms looked up,
        # passages reached by the essential terms, candidate visits by the looked-up terms
        self.stats = np.zeros(6, dtype=np.int64)

    def _scratch(self):
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = (np.zeros(self.num_docs, dtype=np.float32),
                                             np.empty(self.num_docs, dtype=np.int32),
                                             np.zeros(self.num_docs // 128 + 1, dtype=np.uint8))
        return scratch

    def top_k(self, token_ids, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best passages, best first, exact ties by lower row; fewer when fewer match."""
        scores, found, touched = self._scratch()
        stats = np.zeros(6, dtype=np.int64)
        rows, values = self._top_k(np.asarray(token_ids, dtype=np.int64), int(k), self.words, self.block_last,
                                   self.block_offset, self.block_widths, self.block_max, self.term_first, self.df,
                                   self.idf, self.term_max, self.norm, self.inv1, scores, found,
                                   touched, stats)
        with self._stats_lock:
            self.stats += stats
        return rows, values

    @property
    def postings_scanned(self) -> int:
        return int(self.stats[0])

    @property
    def blocks_skipped(self) -> int:
        return int(self.stats[1] + self.stats[2])

    @property
    def terms_searched(self) -> int:
        return int(self.stats[3])

    def maps(self) -> tuple:
        """The memory maps worth reading ahead (`BM25Retriever.warm_up`)."""
        return tuple(self._maps)


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
