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
builder's `term_max.npy` (`backend=numba`, the default when numba is installed): the whole query in one compiled
call, `_top_k_csc`, which also keeps theta up to date during the scan instead of a pass over the reached passages,
and answers bit for bit as the numpy path. The per-term Python cost more than the scoring did: at 1M passages
(CPU per question, token ids in, top 10 out) 2.3-2.5 ms for the per-term loop with numba column loops, 1.1-1.2 ms
in one call, bm25s's numba `retrieve` 1.4-1.5; on the 17,703-passage sample 0.22, 0.038 and 0.047 ms.
"""

from __future__ import annotations

import threading

import numpy as np

# the heap the one-call kernel keeps its k best in: the packed format's, one copy of those loops
from ragzoo.retrieval.bm25_packed import _best_k, _heap_push, _kth_best, _offer


class PrunedTopK:
    """Top-k passages for token-id queries over a bm25s CSC score matrix (columns = terms).

    Needs every column's rows in ascending order, which ragzoo's index builder writes; a column found
    unsorted is scanned in full instead of searched (checked once per term, with its largest weight).
    """

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 kernels: str = "numpy", term_max: np.ndarray | None = None):
        self.kernels = NumbaKernels() if kernels == "numba" else NumpyKernels()
        # numba with the builder's term_max.npy (whose columns are sorted): the whole query in one compiled call
        self._one_call = _compiled_top_k() if kernels == "numba" and term_max is not None else None
        # plain views of the memory maps: slicing a np.memmap costs a Python-level __array_finalize__ each time
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = int(num_docs)
        self._term_stats: dict[int, tuple[float, bool]] = {}
        # every term's largest weight, as ragzoo's builder writes it (`term_max.npy`, whose columns are sorted);
        # without it each term's column is read once, on first use, for its largest weight and its order
        self.term_max = None if term_max is None else np.asarray(term_max, dtype=np.float64)
        self._local = threading.local()
        # running totals, for benchmarks and tests: postings added in full vs terms only looked up, and the
        # queries answered by the one-call kernel
        self._totals = np.zeros(3, dtype=np.int64)
        self._stats_lock = threading.Lock()

    @property
    def postings_scanned(self) -> int:
        return int(self._totals[0])

    @postings_scanned.setter
    def postings_scanned(self, value: int) -> None:
        self._totals[0] = value

    @property
    def terms_searched(self) -> int:
        return int(self._totals[1])

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
            found = self._local.found = np.empty(self.num_docs, dtype=np.int32)
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

    def top_k(self, token_ids, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best passages, best first; fewer when fewer passages match."""
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
_TOP_K = None
_COMPILE_LOCK = threading.Lock()


def _compiled_top_k():
    """`_top_k_csc` compiled (on first call; numba caches it on disk), with the packed format's compiled heap."""
    global _TOP_K, _best_k, _heap_push, _kth_best, _offer
    with _COMPILE_LOCK:
        if _TOP_K is None:
            import numba

            from ragzoo.retrieval import bm25_packed

            bm25_packed._compiled()  # swaps its heap helpers for their compiled versions; numba takes them from here
            _best_k, _heap_push, _kth_best = bm25_packed._best_k, bm25_packed._heap_push, bm25_packed._kth_best
            _offer = bm25_packed._offer
            _TOP_K = numba.njit(nogil=True, cache=True)(_top_k_csc)
    return _TOP_K


def _compiled():
    """The numba versions of the loops below (compiled on first use; numba caches them on disk)."""
    global _COMPILED
    if _COMPILED is None:
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


def _top_k_csc(token_ids, k, data, indices, indptr, term_max, scratch, found, stats):
    """`PrunedTopK.top_k` in one compiled call (the numba path): MaxScore as `bm25_packed._top_k` runs it, over
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
