"""Query-side tokenisation for bm25: the token ids bm25s's `Tokenizer.streaming_tokenize(queries,
update_vocab=False)` gives, computed with one dictionary lookup per word.

bm25s's tokenizer is written for indexing: each call builds its stopword set again, runs a generator, and its
word caches (`word_to_stem`, `word_to_id`) grow with every new word a query brings, without bound, in a server
that runs for weeks. Here a word's whole path (lowercased word -> stopword? -> Snowball stem -> vocabulary id, or
nothing) is resolved once and kept in a bounded cache; a query is then a regex split and one cache lookup per word.

Identity with bm25s is by construction: the splitter, lowercasing, stopword list and stemmer are taken from the
bm25s `Tokenizer` the index was built with (`bm25.make_tokenizer`), and the order of decisions is bm25s's own:
- with a stemmer: a stopword has no id, any other word has the id of its stem in the vocabulary, if there;
- without one: a word in the vocabulary has its id (checked before the stopwords, as bm25s does), else none.
The tests compare both on every HotPotQA question of the data folder and on adversarial strings.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

# a query stream of distinct words is bounded by this many cached words (~100 bytes each); past it the cache
# starts over, which costs one stem and one lookup per word again, never a wrong id
CACHE_WORDS = 1 << 18
_NONE = -1  # cached "this word has no id": a stopword, or a stem the index never saw


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
        words = self.split(text.lower() if self.lower else text)
        cache = self._cache
        try:
            ids = list(map(cache.__getitem__, words))
        except KeyError:  # a word seen for the first time (or since the cache started over)
            ids = [cache[word] if word in cache else self.word_id(word) for word in words]
        return ids if _NONE not in ids else [term for term in ids if term != _NONE]

    def many(self, texts: Sequence[str]) -> list[list[int]]:
        return [self(text) for text in texts]
