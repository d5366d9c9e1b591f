"""Query-side tokenisation for bm25: the token ids bm25s's `Tokenizer.streaming_tokenize(queries,
update_vocab=False)` gives, computed with one dictionary lookup per word.

bm25s's tokenizer is written for indexing: each call builds its stopword set again, runs a generator, and its
word caches (`word_to_stem`, `word_to_id`) grow with every new word a query brings, without bound, in a server
that runs for weeks. Here a word's whole path (lowercased word -> stopword? -> Snowball stem -> vocabulary id, or
nothing) is resolved once and kept in a bounded cache. A query is then split on whitespace and each piece looked up
in a second bounded cache, of pieces (a word with its punctuation, "magazine," or "(1990)") to their ids: bm25s's
pattern never matches a whitespace character, so its split of a text is the concatenation of its splits of the
text's whitespace-separated pieces, and a known piece needs neither the regex (~2/3 of a query's tokenising) nor
the stemmer. Any other splitter sees the whole text.

Identity with bm25s is by construction: the splitter, lowercasing, stopword list and stemmer are taken from the
bm25s `Tokenizer` the index was built with (`bm25.make_tokenizer`), and the order of decisions is bm25s's own:
- with a stemmer: a stopword has no id, any other word has the id of its stem in the vocabulary, if there;
- without one: a word in the vocabulary has its id (checked before the stopwords, as bm25s does), else none.
The tests compare both on every HotPotQA question of the data folder and on adversarial strings.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Callable, Iterable, Mapping, Sequence

# a query stream of distinct words is bounded by this many cached words (~100 bytes each); past it the cache
# starts over, which costs one stem and one lookup per word again, never a wrong id
CACHE_WORDS = 1 << 18
# the whitespace-separated pieces cached are at most this long, so the piece cache is bounded in bytes too (a
# longer piece, rare in questions, goes through the regex and the word cache each time)
_PIECE_CHARS = 64
_NONE = -1  # cached "this word has no id": a stopword, or a stem the index never saw
_BM25S_PATTERN = r"(?u)\b\w\w+\b"  # bm25s Tokenizer's default splitter: never matches a whitespace character


class QueryTerms:
    """`terms(text)` -> the text's token ids, in order, repeats kept (bm25 counts a repeated term twice)."""

    def __init__(self, vocab: Mapping[str, int], splitter: Callable[[str], list], lower: bool = True,
                 stopwords: Iterable[str] | None = None, stemmer: Callable[[str], str] | None = None,
                 cache_words: int = CACHE_WORDS):
        self.vocab = vocab
        self.split = splitter
        self.lower = lower
        self.stopwords = frozenset(stopwords or ())
        self.stemmer = stemmer
        self.cache_words = cache_words
        self._cache: dict[str, int] = {}
        self._pieces: dict[str, tuple[int, ...]] = {}  # whitespace-separated piece -> its ids
        pattern = getattr(splitter, "__self__", None)
        self._by_space = isinstance(pattern, re.Pattern) and pattern.pattern == _BM25S_PATTERN \
            and getattr(splitter, "__name__", "") == "findall"

    @classmethod
    def from_tokenizer(cls, tokenizer, vocab: Mapping[str, int] | None = None, **kwargs) -> "QueryTerms":
        """The same splitter, case, stopwords and stemmer as a bm25s `Tokenizer`; `vocab` is the index's (term ->
        id: stems with a stemmer, words without), by default the tokenizer's own."""
        if vocab is None:
            vocab = tokenizer.stem_to_sid if tokenizer.stemmer is not None else tokenizer.word_to_id
        return cls(vocab, tokenizer.splitter, lower=tokenizer.lower, stopwords=tokenizer.stopwords,
                   stemmer=tokenizer.stemmer, **kwargs)

    def word_id(self, word: str) -> int:
        """The id of one (already lowercased) word, -1 for none; kept in the cache."""
        if self.stemmer is None:
            term = self.vocab.get(word, _NONE)
        elif word in self.stopwords:
            term = _NONE
        else:
            term = self.vocab.get(self.stemmer(word), _NONE)
        cache = self._cache
        if len(cache) >= self.cache_words:
            # starting over keeps the cost O(1) per word; a stream of all-new words never had cache hits anyway
            cache.clear()
        cache[word] = term
        return term

    def __call__(self, text: str) -> list[int]:
        if self.lower:
            text = text.lower()
        if not self._by_space:
            return self._word_ids(self.split(text))
        pieces = self._pieces
        try:
            return list(chain.from_iterable(map(pieces.__getitem__, text.split())))
        except KeyError:  # a piece seen for the first time (or since the cache started over)
            ids: list[int] = []
            for piece in text.split():
                # get, not `in` then [ ]: another thread may clear the cache in between
                known = pieces.get(piece)
                ids.extend(known if known is not None else self._piece_ids(piece))
            return ids

    def _piece_ids(self, piece: str) -> tuple[int, ...]:
        ids = tuple(self._word_ids(self.split(piece)))
        if len(piece) <= _PIECE_CHARS:
            if len(self._pieces) >= self.cache_words:
                self._pieces.clear()
            self._pieces[piece] = ids
        return ids

    def _word_ids(self, words: list[str]) -> list[int]:
        cache = self._cache
        try:
            ids = list(map(cache.__getitem__, words))
        except KeyError:  # a word seen for the first time (or since the cache started over)
            ids = [term if (term := cache.get(word)) is not None else self.word_id(word) for word in words]
        return ids if _NONE not in ids else [term for term in ids if term != _NONE]

    def many(self, texts: Sequence[str]) -> list[list[int]]:
        return [self(text) for text in texts]
