"""Exact BM25 top-k over bm25s's score matrix, with MaxScore pruning (Turtle & Flood, 1995).

bm25s answers a query by adding every posting of every query term into a dense array of one score per
passage and then partitioning that whole array. At 5.2M passages that is ~21 MB written and partitioned
per query, plus the full posting lists of frequent terms ("american", "film"): a profile of the scale
benchmark put 49% of the time in `argpartition` and 36% in `np.add.at`, for 0.6 queries/s.

Here the query's terms are taken rarest first. Their postings are added into a per-thread scratch array
(reset afterwards, so nothing of corpus size is allocated per query) and, after each term, the k-th best
partial score so far (theta, a lower bound on the final k-th score) is compared with the most that all
remaining terms together could still add (the sum of their largest weights). Once that bound falls below
theta, no passage outside the current candidates can reach the top k: the remaining, frequent terms are
then only looked up for the candidates still able to make it (binary search in their sorted posting
lists) instead of being scanned. Top-k selection runs over the candidates, never over the whole corpus.

The result is the exhaustive top k: same passages and scores as bm25s, up to the order of float32
additions (terms are summed rarest first, not in query order); exact ties, which bm25s orders arbitrarily,
go to the lower passage row.
Query terms repeated in a query count as often as they occur, as in bm25s.

Two paths. numpy (`kernels="numpy"`): the loop above in Python, a numpy call or two per term. numba with the
builder's `term_max.npy` (`backend=numba`, which `auto` picks from 1M passages on when numba is installed): the
whole query in one compiled call, `_top_k_csc`, which also keeps theta up to date during the scan instead of a
pass over the reached passages, and answers bit for bit as the numpy path. That kernel is defined in bm25_packed.py,
beside the compiled heap it shares with the packed kernel: numba's disk cache checks only the defining file's
stamp, so a cached kernel must live in the file of every compiled function it calls, or an edit of a helper would
leave stale code running.
The per-term Python cost more than the scoring did: at 1M passages (CPU per question, token ids in, top 10 out)
2.3-2.5 ms for the per-term loop with numba column loops, 1.1-1.2 ms in one call, bm25s's numba `retrieve`
1.4-1.5; on the 17,703-passage sample 0.22, 0.038 and 0.047 ms.

From `WINDOWED_FROM` passages on, the numba path runs the packed format's windowed kernel over these same columns
instead (`bm25_packed.CscWindows`: blocks of 128 postings laid over each column, whose last rows and largest
weights the builder writes beside term_max.npy), with the same answers bit for bit. The whole-index kernel above
adds every posting of the rare terms into a corpus-sized array, a cache miss a posting once the array outgrows the
caches; the windowed one keeps a window's accumulator in L2 and skips blocks by their bounds. Measured (CPU a
question, token ids in, top 10 out, the scale benchmark's 500 questions, load 3-6): 1M passages 1.00-1.06 ms whole
index, 1.24-1.30 windowed (any window of 2^12..2^15; larger ones are slower); 2.6M 3.6-3.9 (best rounds 3.0) whole
index, 3.0-3.1 windowed; 5.2M 10.2-10.7 whole index, 5.0-5.1 windowed (bm25s's numba `retrieve` ~11.9). Hence
WINDOWED_FROM between the 1M and 2.6M measurements (the first 1M / 2.6M / 5.2M lines of the 21M scale corpus).
"""

from __future__ import annotations

import itertools
import threading
from typing import Sequence

import numpy as np


# from this many passages on, the numba path scores window by window (`bm25_packed.CscWindows`): see the module
# docstring for the measurements that set it
WINDOWED_FROM = 1_500_000


class PrunedTopK:
    """Top-k passages for token-id queries over a bm25s CSC score matrix (columns = terms).

    Needs every column's rows in ascending order, which ragzoo's index builder writes; a column found
    unsorted is scanned in full instead of searched (checked once per term, with its largest weight).
    """

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 kernels: str = "numpy", term_max: np.ndarray | None = None, windowed: bool | None = None,
                 window: int | None = None, blocks: tuple[np.ndarray, np.ndarray] | None = None):
        self.kernels = NumbaKernels() if kernels == "numba" else NumpyKernels()
        # numba with the builder's term_max.npy (whose columns are sorted): the whole query in one compiled call
        self._one_call = _compiled_top_k() if kernels == "numba" and term_max is not None else None
        # plain views of the memory maps: slicing a np.memmap costs a Python-level __array_finalize__ each time
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = int(num_docs)
        # the same sorted columns scored window by window (`bm25_packed.CscWindows`) from WINDOWED_FROM passages on
        # (None: by size; True/False forces it), over `blocks` (the builder's block files) if given
        self._windows = None
        if self._one_call is not None and (self.num_docs >= WINDOWED_FROM if windowed is None else windowed):
            from ragzoo.retrieval import bm25_packed

            self._windows = bm25_packed.CscWindows(self.data, self.indices, self.indptr, blocks=blocks,
                                                   window=window or bm25_packed.WINDOW, term_max=term_max)
        self._term_stats: dict[int, tuple[float, bool]] = {}
        # every term's largest weight, as ragzoo's builder writes it (`term_max.npy`, whose columns are sorted);
        # without it each term's column is read once, on first use, for its largest weight and its order
        self.term_max = None if term_max is None else np.asarray(term_max, dtype=np.float64)
        self._local = threading.local()
        # running totals, for benchmarks and tests: postings added in full vs terms only looked up, and the
        # queries answered by the one-call kernel
        self._totals = np.zeros(3, dtype=np.int64)
        self._stats_lock = threading.Lock()

    # (the windowed scorer keeps its own totals; the setters serve the numpy path, which never runs beside it)
    @property
    def postings_scanned(self) -> int:
        return int(self._totals[0]) + (self._windows.postings_scanned if self._windows is not None else 0)

    @postings_scanned.setter
    def postings_scanned(self, value: int) -> None:
        self._totals[0] = value

    @property
    def terms_searched(self) -> int:
        return int(self._totals[1]) + (self._windows.terms_searched if self._windows is not None else 0)

    @terms_searched.setter
    def terms_searched(self, value: int) -> None:
        self._totals[1] = value

    @property
    def one_call_queries(self) -> int:
        return int(self._totals[2])

    def _scratch(self) -> np.ndarray:
        scores = getattr(self._local, "scores", None)
        if scores is None:
            scores = self._local.scores = np.zeros(self.num_docs, dtype=np.float32)
        return scores

    def _found(self) -> np.ndarray:
        found = getattr(self._local, "found", None)
        if found is None:
            # one more than the passages: the kernel stores each posting's row at found[n_found] before it knows
            # whether it is a first reach, so with every passage reached the next store lands one past them
            found = self._local.found = np.empty(self.num_docs + 1, dtype=np.int32)
        return found

    def _stats(self, term: int) -> tuple[float, bool]:
        """(largest weight, rows sorted) of a term's column, computed on first use and kept."""
        if self.term_max is not None:
            return float(self.term_max[term]), True
        stats = self._term_stats.get(term)
        if stats is None:
            start, end = int(self.indptr[term]), int(self.indptr[term + 1])
            rows, weights = self.indices[start:end], self.data[start:end]
            stats = (float(weights.max()) if end > start else 0.0, bool(np.all(rows[1:] > rows[:-1])))
            self._term_stats[term] = stats
        return stats

    def compile(self) -> None:
        """Have numba compile what this scorer runs (`backend=numba`): a query and a batch of term 0, leaving the
        running totals as they were and keeping no scratch for the calling thread (the thread that builds a
        retriever may never query: `serve`'s batchers and `evaluate`'s threads do); nothing for numpy or an index
        without terms."""
        if not isinstance(self.kernels, NumbaKernels) or len(self.indptr) < 2:
            return
        if self._windows is not None:
            self._windows.compile()
            return
        with self._stats_lock:
            saved = self._totals.copy()
        self.top_k(np.zeros(1, dtype=np.int64), 1)
        self.top_k_many([[0], [0]], 1)  # the compiled batch loop too
        with self._stats_lock:
            self._totals[:] = saved
        self._local.__dict__.clear()

    def top_k(self, token_ids, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best passages, best first; fewer when fewer passages match."""
        if self._windows is not None:
            with self._stats_lock:
                self._totals[2] += 1
            return self._windows.top_k(token_ids, k)
        if self._one_call is not None:
            stats = np.zeros(3, dtype=np.int64)
            rows, scores = self._one_call(np.asarray(token_ids, dtype=np.int64), int(k), self.data, self.indices,
                                          self.indptr, self.term_max, self._scratch(), self._found(), stats)
            with self._stats_lock:
                self._totals += stats
            return rows, scores
        terms, repeats = np.unique(np.asarray(token_ids, dtype=np.int64), return_counts=True)
        starts, ends = self.indptr[terms], self.indptr[terms + 1]
        present = ends > starts
        if not present.any() or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        order = np.argsort((ends - starts)[present], kind="stable")  # rarest first
        terms, repeats = terms[present][order], repeats[present][order].astype(np.float32)
        starts, ends = starts[present][order], ends[present][order]
        stats = [self._stats(int(term)) for term in terms]
        bounds = repeats * np.array([largest for largest, _ in stats], dtype=np.float64)
        # the most terms n.. can still add (with a margin for float32 rounding), and whether all are searchable
        still_possible = np.append(np.cumsum(bounds[::-1])[::-1], 0.0) * (1 + 1e-5)
        searchable = np.append(np.cumprod([is_sorted for _, is_sorted in stats][::-1])[::-1], 1).astype(bool)
        scratch = self._scratch()
        found: list[np.ndarray] = []
        theta, n = -np.inf, 0
        try:
            # rare terms: every posting is added; passages first reached join the candidates
            while n < len(terms) and not (n and searchable[n] and still_possible[n] < theta):
                found.append(self.kernels.scan(self.indices, self.data, starts[n], ends[n], repeats[n], scratch))
                n += 1
                # theta is tracked on the passages of the rarest terms (the likely winners): any subset's k-th
                # best is a lower bound too, and a small one is cheap to partition
                if sum(map(len, found[:-1])) < 8 * k:
                    leaders = np.concatenate(found)
                # theta can stop the scan only once the terms read could outweigh the rest (theta <= their sum)
                if n < len(terms) and searchable[n] and still_possible[n] < still_possible[0] - still_possible[n]:
                    theta = self._kth_best(scratch, leaders, k)
            candidates = np.concatenate(found)
            self.postings_scanned += int((ends[:n] - starts[:n]).sum())
            self.terms_searched += len(terms) - n
            # frequent terms: only the candidates that can still reach the top k are updated
            for m in range(n, len(terms)):
                candidates = self.kernels.still_in_reach(candidates, scratch, theta - still_possible[m])
                if m == n and len(candidates) > 8 * k:  # from here on, theta follows the 8k best candidates
                    partial = scratch[candidates]
                    leaders = candidates[np.argpartition(partial, len(partial) - 8 * k)[-8 * k:]]
                self._add_for(scratch, candidates, starts[m], ends[m], repeats[m])
                theta = max(theta, self._kth_best(scratch, leaders, k))
            scores = scratch[candidates]
        finally:
            if sum(map(len, found)) > self.num_docs // 16:
                scratch.fill(0)  # one sequential pass beats a scatter over a sixteenth of the corpus
            else:
                for rows in found:
                    scratch[rows] = 0
        if len(candidates) > k:
            # every candidate tied with the k-th, so that ties straddling the cut go to the lower rows too
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            best = scores >= kth
            candidates, scores = candidates[best], scores[best]
        ranking = np.lexsort((candidates, -scores))[:k]  # best first; exact ties by passage row, deterministically
        return candidates[ranking].astype(np.int64), scores[ranking]

    def top_k_many(self, token_ids: Sequence[Sequence[int]], k: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Every query's (rows, scores) as `top_k` gives them, one query after another in two arrays, and each
        query's count, on the calling thread. The one-call kernel is called directly (one scratch lookup and one
        counter update for the whole batch), for a batch from one compiled loop (`_compiled_loop`: no Python call,
        no two result arrays per query)."""
        if self._windows is not None:
            with self._stats_lock:
                self._totals[2] += len(token_ids)
            return self._windows.top_k_many(token_ids, k)
        if self._one_call is None or not token_ids:
            ranked = [self.top_k(ids, k) for ids in token_ids]
            return (np.concatenate([rows for rows, _ in ranked] or [np.zeros(0, dtype=np.int64)]),
                    np.concatenate([scores for _, scores in ranked] or [np.zeros(0, dtype=np.float32)]),
                    [len(rows) for rows, _ in ranked])
        kernel = self._one_call
        ends = list(itertools.accumulate(map(len, token_ids)))
        flat = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=ends[-1])
        stats = np.zeros(3, dtype=np.int64)
        k = int(k)
        arrays = (self.data, self.indices, self.indptr, self.term_max, self._scratch(), self._found(), stats)
        loop = _compiled_loop(kernel, flat, arrays) if len(token_ids) > 1 else None
        if loop is not None:
            rows = np.empty(len(token_ids) * k, dtype=np.int64)
            scores = np.empty(len(token_ids) * k, dtype=np.float32)
            counts = np.empty(len(token_ids), dtype=np.int64)
            done = loop(kernel, flat, np.asarray(ends, dtype=np.int64), k, *arrays, rows, scores, counts)
            rows, scores, counts = rows[:done], scores[:done], counts.tolist()
        else:
            documents, found_scores = [], []
            start = 0
            for end in ends:
                query_rows, query_scores = kernel(flat[start:end], k, *arrays)
                documents.append(query_rows)
                found_scores.append(query_scores)
                start = end
            rows, scores = np.concatenate(documents), np.concatenate(found_scores)
            counts = list(map(len, documents))
        with self._stats_lock:
            self._totals += stats
        return rows, scores, counts

    def _add_for(self, scratch: np.ndarray, candidates: np.ndarray, start: int, end: int, repeat: float) -> None:
        """Add one term's weights to `candidates` only: binary search of each candidate in the sorted column
        when that is cheaper than reading the column, else one pass over the column."""
        rows, weights = self.indices[start:end], self.data[start:end]
        if len(candidates) * max(1, int(end - start).bit_length()) < end - start:
            slots = np.minimum(np.searchsorted(rows, candidates), len(rows) - 1)
            hit = rows[slots] == candidates
            scratch[candidates[hit]] += weights[slots[hit]] * repeat
        else:
            self.kernels.add_to_reached(self.indices, self.data, start, end, repeat, scratch)

    @staticmethod
    def _kth_best(scratch: np.ndarray, candidates: np.ndarray, k: int) -> float:
        """The k-th best partial score among `candidates` (-inf when fewer): a lower bound on the final one."""
        if len(candidates) < k:
            return -np.inf
        partial = scratch[candidates]
        return float(np.partition(partial, len(partial) - k)[len(partial) - k])


class NumpyKernels:
    """The two loops over a whole column, in numpy."""

    @staticmethod
    def scan(indices, data, start, end, repeat, scratch) -> np.ndarray:
        """Add a column's weights to `scratch`; return the rows it reached first (weights are positive, so
        zero means not reached yet)."""
        rows, weights = indices[start:end], data[start:end]
        partial = scratch[rows]
        fresh = rows[partial == 0]
        # a column lists each passage once, so writing the sums back is exact (no np.add.at needed)
        scratch[rows] = partial + (weights * repeat if repeat != 1 else weights)
        return fresh

    @staticmethod
    def still_in_reach(candidates, scratch, needed) -> np.ndarray:
        """The candidates whose partial score is at least `needed`."""
        return candidates[scratch[candidates] >= needed]

    @staticmethod
    def add_to_reached(indices, data, start, end, repeat, scratch) -> None:
        """Add a column's weights to the rows already reached (nonzero). A reached row that was since dropped
        from the candidates only gains weight nobody reads."""
        rows = indices[start:end]
        partial = scratch[rows]
        scratch[rows] = np.where(partial > 0, partial + data[start:end] * repeat, partial)


class NumbaKernels:
    """The same two loops compiled with numba (one pass, no temporaries, GIL released): `backend=numba`."""

    def __init__(self):
        self.scan_into, self.add_to_reached_jit, self.still_in_reach_into = _compiled()

    def still_in_reach(self, candidates, scratch, needed) -> np.ndarray:
        kept = np.empty_like(candidates)
        return kept[:self.still_in_reach_into(candidates, scratch, np.float64(needed), kept)]

    def scan(self, indices, data, start, end, repeat, scratch) -> np.ndarray:
        fresh = np.empty(int(end - start), dtype=indices.dtype)
        return fresh[:self.scan_into(indices, data, int(start), int(end), np.float32(repeat), scratch, fresh)]

    def add_to_reached(self, indices, data, start, end, repeat, scratch) -> None:
        self.add_to_reached_jit(indices, data, int(start), int(end), np.float32(repeat), scratch)


_COMPILED = None


def _compiled_top_k():
    """The one-call kernel, `bm25_packed._top_k_csc`, compiled (on first call; numba caches it on disk). It lives
    in bm25_packed.py with the heap it calls: numba's cache stamp covers one file (see there)."""
    from ragzoo.retrieval import bm25_packed

    return bm25_packed._compiled()["top_k_csc"]


def _top_k_loop(kernel, token_ids, ends, k, data, indices, indptr, term_max, scratch, found, stats, rows, scores,
                counts):
    """`kernel` (the csc one-call kernel, passed as a compiled function) on each query of a batch (query q's ids
    are token_ids[ends[q-1]:ends[q]]), its rows and scores written one query after another into `rows`,
    `scores` (room for k a query) and its count into counts[q]. Returns how many were written."""
    done = 0
    start = 0
    for q in range(len(ends)):
        query_rows, query_scores = kernel(token_ids[start:ends[q]], k, data, indices, indptr, term_max, scratch,
                                          found, stats)
        n = len(query_rows)
        if n > k:
            raise ValueError("the bm25 kernel returned more than k hits")
        rows[done:done + n] = query_rows
        scores[done:done + n] = query_scores
        counts[q] = n
        done += n
        start = ends[q]
    return done


_LOOPS: dict = {}  # argument types -> `_top_k_loop` compiled for them, or None where it would not compile


def _compiled_loop(kernel, token_ids: np.ndarray, arrays: tuple):
    """`_top_k_loop` compiled for the kernel's argument types (numba; cached on disk), or None (the Python loop
    answers) if it cannot be. The kernel is an argument of first-class function type, called through its
    address: the loop's disk cache holds none of the kernel's code, so an edit of the kernel is never answered
    by a stale copy of it (checked with an edited kernel file: the loop is a cache hit and runs the new kernel,
    tests/retrieval/test_retrieval_bm25_kernel_cache.py), and compiling the loop does not compile the kernel again
    (at 17.7k passages the loop saves ~4 us of the ~31 a question spends in the kernel's Python calls)."""
    import numba

    key = (kernel, numba.typeof(token_ids), *(numba.typeof(array) for array in arrays))
    if key in _LOOPS:
        return _LOOPS[key]
    loop = None
    try:
        from numba import types

        kernel_types = (key[1], types.int64, *key[2:])
        kernel.compile(kernel_types)
        signature = types.FunctionType(kernel.overloads[kernel_types].signature)
        out = (types.Array(types.int64, 1, "C"), types.Array(types.float32, 1, "C"), types.Array(types.int64, 1, "C"))
        loop = numba.njit(types.int64(signature, key[1], types.Array(types.int64, 1, "C"), types.int64, *key[2:],
                                      *out), nogil=True, cache=True)(_top_k_loop)
    except Exception as error:  # noqa: BLE001 -- a kernel of another shape: the per-query calls still answer
        import logging

        logging.getLogger("ragzoo.bm25").warning("bm25: batch loop not compiled (%s); scoring query by query",
                                                 type(error).__name__)
    _LOOPS[key] = loop
    return loop


def _compiled():
    """The numba versions of the loops below (compiled on first use; numba caches them on disk)."""
    global _COMPILED
    if _COMPILED is None:
        from ragzoo.retrieval.bm25_packed import require_numba

        require_numba("the numba bm25 backend")  # one line that says why (missing, or does not import here)
        import numba

        jit = numba.njit(nogil=True, cache=True)
        _COMPILED = (jit(_scan_into), jit(_add_to_reached), jit(_still_in_reach_into))
    return _COMPILED


def _scan_into(indices, data, start, end, repeat, scratch, fresh):
    found = 0
    for j in range(start, end):
        row = indices[j]
        if scratch[row] == 0:
            fresh[found] = row
            found += 1
        scratch[row] += data[j] * repeat
    return found


def _add_to_reached(indices, data, start, end, repeat, scratch):
    for j in range(start, end):
        row = indices[j]
        if scratch[row] > 0:
            scratch[row] += data[j] * repeat


def _still_in_reach_into(candidates, scratch, needed, kept):
    found = 0
    for row in candidates:
        if scratch[row] >= needed:
            kept[found] = row
            found += 1
    return found


def term_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each column's largest weight (0 for an empty column): one sequential pass over `data`."""
    indptr = np.asarray(indptr)
    maxima = np.zeros(len(indptr) - 1, dtype=np.float32)
    nonempty = np.flatnonzero(indptr[1:] > indptr[:-1])
    if len(nonempty):
        maxima[nonempty] = np.maximum.reduceat(data, indptr[nonempty])
    return maxima
