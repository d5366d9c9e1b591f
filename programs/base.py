"""What every ragzoo program shares: a retriever held as configuration, retrieval that is recorded in the
per-example trace, and knobs validated once, from the constructor's type hints.

Knob validation: every subclass's `__init__` is wrapped (in `__init_subclass__`) so that, before it runs,
each argument except `retriever` is checked against its annotation by `ragzoo.knobs.check`: the type (bool
is not an int), `Literal` choices, the `Range` of an `Annotated` int or float, finite floats. This holds
however a program is built (`programs.get`, `RAISF(retriever, ...)`, an artifact being loaded), so methods
do not re-check single knobs by hand; they check only rules that tie several knobs together.
"""

from __future__ import annotations

import functools
import inspect
import time
import typing
from typing import Annotated

import dspy

from ragzoo.knobs import Range, check
from ragzoo.retrieval.base import MAX_K, Passage
from ragzoo.tracing import record_retrieval

# Shared knob types. k's upper bound is the ColBERTv2 API's limit, which every backend here shares.
TopK = Annotated[int, Range(1, MAX_K)]
PositiveInt = Annotated[int, Range(1)]


class _SharedRetriever:
    """Wraps a retriever so that copying a program (DSPy optimizers deep-copy students many times)
    shares the index instead of copying it: a retriever is configuration, not learnable state."""

    __slots__ = ("inner",)

    def __init__(self, inner):
        self.inner = inner

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __call__(self, query: str, k: int) -> list[Passage]:
        return self.inner(query, k)

    @property
    def spec(self) -> str:
        return getattr(self.inner, "spec", type(self.inner).__name__)


class RagProgram(dspy.Module):
    """Base of retrieval-augmented programs. Subclasses declare predictors in `__init__` (after calling
    `super().__init__(retriever)`) and write the paper's control flow in `forward`. Each constructor
    argument is a knob: annotate it (the annotation is what validates it) and describe it in a "Knobs:"
    section of the class docstring (that is what `ragzoo methods NAME` shows)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _validating(init)

    def __init__(self, retriever=None):
        super().__init__()
        self._retriever = None if retriever is None else (
            retriever if isinstance(retriever, _SharedRetriever) else _SharedRetriever(retriever))

    @property
    def retriever(self):
        return self._retriever

    def retrieve(self, query: str, k: int) -> list[Passage]:
        """Retrieve top-k passages for `query` and record the retrieval in the current trace."""
        if self._retriever is None:
            raise RuntimeError(f"{type(self).__name__} was built without a retriever")
        # No k check here: k was validated as a knob when the program was built, and retrievers check
        # their own input.
        started = time.perf_counter()
        passages = list(self._retriever(query, k))
        record_retrieval(query, k, [p.pid for p in passages], time.perf_counter() - started)
        return passages


def knob_hints(cls: type) -> dict[str, typing.Any]:
    """The constructor's annotations of `cls`, `Annotated` metadata kept (what `check` validates against)."""
    return _hints(inspect.unwrap(cls.__init__))


@functools.lru_cache(maxsize=None)
def _hints(init) -> dict[str, typing.Any]:
    # Resolved on first use, not at class creation: the module defining the class is then fully imported.
    return typing.get_type_hints(init, include_extras=True)


def _validating(init):
    """`init`, preceded by a check of every knob argument against its annotation."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        # Only the most derived constructor checks: a subclass calling super().__init__(...) passes values
        # that were checked already, so a build validates each knob once.
        if type(self).__init__ is __init__:
            hints = _hints(init)
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()  # a wrong default is a bug worth catching too
            for name, value in bound.arguments.items():
                if name not in ("self", "retriever") and name in hints:
                    check(name, value, hints[name], owner=type(self).__name__)
        init(self, *args, **kwargs)

    return __init__


def passages_as_context(passages: list[Passage]) -> list[str]:
    """The context list a signature sees: "Title | text" per passage, in order."""
    return [p.long_text for p in passages]


def dedup_passages(*groups: list[Passage]) -> list[Passage]:
    """Union of passage lists, first occurrence wins, order kept (by pid, else by long_text)."""
    seen: set[str] = set()
    merged: list[Passage] = []
    for group in groups:
        for passage in group:
            key = passage.pid or passage.long_text
            if key not in seen:
                seen.add(key)
                merged.append(passage)
    return merged
