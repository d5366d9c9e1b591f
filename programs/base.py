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
import logging
import time
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable

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

    __slots__ = ("inner", "said_short")

    def __init__(self, inner):
        self.inner = inner
        self.said_short = False  # shared by every copy of the program, so the warning comes once per run

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
    section of the class docstring (that is what `ragzoo methods NAME` shows).

    Stage diagnostics (issue 23, `ragzoo.diagnostics`): `STAGES` names the method's stages in the order it runs
    them, each with the predictors whose LM calls it makes; `forward` returns what each stage produced as the
    prediction's `stages` ({stage: {"passages": [...], "kept": [...], "answers": [...], "decision": ...}})."""

    STAGES: dict[str, tuple[str, ...]] = {}

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
        if len(passages) < k and not self._retriever.said_short:
            # e.g. `fixed` replays the 5 passages a paper recorded: a top-10 setting must not pass for one
            self._retriever.said_short = True
            logging.getLogger(__name__).warning(
                "retriever %s returned %d passage(s) where k=%d was asked (no more are available for this "
                "query); the program goes on with fewer than k, and later shortfalls are not reported again",
                self._retriever.spec, len(passages), k)
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


# ---------------------------------------------------------------------------------------------------------
# Yes/no answers, read leniently.


def read_yes_no(text) -> str | None:
    """"yes" / "no" for an answer that reads as one ("Yes", "No.", "yes, because ...", a bool), else None.
    The reading is the accuracy metric's (`ragzoo.metrics.answer.yes_no`), so what a program accepts is what
    the metric scores."""
    from ragzoo.metrics.answer import yes_no

    value = yes_no(text)
    return None if value is None else ("yes" if value else "no")


def _abstains(text) -> bool:
    """The reply is the literal abstention "unknown" (an empty reply stays unreadable: it is re-asked)."""
    from ragzoo.metrics.rates import is_unknown

    return isinstance(text, str) and bool(text.strip()) and is_unknown(text)


class _AdapterGaveUp(Exception):
    """Carries an `UnreadableOutput` past `YesNoPredict`'s own re-asks (which catch every AdapterParseError)."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class YesNoPredict(dspy.Predict):
    """A predictor whose signature types a field `Literal["yes", "no"]` (so the prompt, the dry-run LM and
    `ragzoo methods` see the two values), read leniently: the LM's text is parsed as a string and mapped by
    `read_yes_no`, so "Yes", "No." or "yes, because ..." (the casing and punctuation the papers' own prompts
    invite: "either Yes or No") count as yes/no instead of failing to parse. "unknown" is an abstention, kept
    as the answer "unknown" (it scores 0 and counts toward %Unk, as in `ragzoo.metrics.rates`). An answer that
    reads as none of these still raises DSPy's `AdapterParseError`, as a strict Literal would."""

    field_name = "answer"

    def forward(self, **kwargs):
        from ragzoo.adapters import LenientMixin, UnreadableOutput, _Reasks

        declared = kwargs.pop("signature", self.signature)
        field = declared.output_fields[self.field_name]
        loose = declared.with_updated_fields(
            self.field_name, type_=str,
            desc=(field.json_schema_extra or {}).get("desc") or "yes or no",
            prefix=(field.json_schema_extra or {}).get("prefix"))
        adapter = dspy.settings.adapter
        if not isinstance(adapter, LenientMixin):  # DSPy's own adapter: no re-asks, as for any other field
            return self._read(super().forward(signature=loose, **kwargs), declared)
        # ragzoo's adapter: a reply that reads as neither yes nor no is re-asked as an unreadable field is (it was
        # read after the adapter, so it failed the question at once, and --retry-failed replayed it from the cache)
        reasks = _Reasks(adapter, loose)
        for _ in range(adapter.max_reasks + 1):
            try:
                with reasks.attempt():
                    try:
                        prediction = super().forward(signature=loose, **kwargs)
                    except UnreadableOutput as exhausted:  # the adapter's own re-asks are spent: not re-asked again
                        raise _AdapterGaveUp(exhausted) from None
                    return self._read(prediction, declared)
            except _AdapterGaveUp as gave_up:
                raise gave_up.error from None
        raise reasks.unreadable() from reasks.error

    def _read(self, prediction, declared):
        from dspy.utils.exceptions import AdapterParseError

        raw = prediction.get(self.field_name)
        value = read_yes_no(raw)
        if value is None and _abstains(raw):
            from ragzoo.metrics.rates import UNKNOWN

            value = UNKNOWN  # an answer that scores 0 and counts toward %Unk, not a parse failure
        if value is None:
            raise AdapterParseError(adapter_name="YesNoPredict", signature=declared, lm_response=str(raw),
                                    message=f"{self.field_name} {raw!r} reads as neither yes nor no")
        prediction[self.field_name] = value
        return prediction


def answer_predictor(signature, answer_mode: str = "short", chain_of_thought: bool = False) -> dspy.Module:
    """The answering predictor of a method with an `answer_mode` knob: `signature` as given for "short";
    for "yes_no", the answer typed yes/no (`with_answer_mode`) and read leniently (`YesNoPredict`), inside a
    chain of thought when asked."""
    from ragzoo.signatures.common import with_answer_mode

    typed = with_answer_mode(signature, answer_mode)
    if not chain_of_thought:
        return YesNoPredict(typed) if answer_mode == "yes_no" else dspy.Predict(typed)
    module = dspy.ChainOfThought(typed)
    if answer_mode == "yes_no":
        module.predict = YesNoPredict(module.predict.signature)
    return module


# ---------------------------------------------------------------------------------------------------------
# Compile stages a method declares (run by `ragzoo.optimizers.stages`, see `compile_stages()` of FILCO,
# RA-ISF and SKR). Declared here so that programs never import the optimizers.


@dataclass(frozen=True)
class Stage:
    """One compile stage of a method: which predictors, how their labels are built, what scores them."""

    name: str
    predictors: tuple[str, ...]  # attribute names in the program, as `named_predictors()` gives them
    # training questions (+ the `needs`, as keyword arguments) -> labelled examples for those predictors
    build_trainset: Callable[..., list]
    metric: Callable[..., Any]  # (example, prediction, trace=None) -> float | bool
    labels: str = ""  # what the labels are, for the manifest
    needs: tuple[str, ...] = ()  # what building labels needs that a compile may lack (e.g. "logprob_fn")
    # "compile": the preset's optimizer compiles the predictor against `metric`; "memory": the labelled
    # examples ARE the predictor's demos, all of them (a lookup memory, e.g. SKR's nearest neighbours)
    mode: str = "compile"
    uses: tuple[str, ...] = ()  # resources passed to build_trainset when the compile has them (e.g. "dataset")


class StageSkipped(Exception):
    """Raised by a stage's `build_trainset` when its labels cannot be built in this compile (the reason is
    recorded in the manifest, the compile goes on). `record`: what the stage's record should say besides (how
    the labels it gave up on were built)."""

    def __init__(self, message: str, record: dict | None = None):
        super().__init__(message)
        self.record = dict(record or {})


# ---------------------------------------------------------------------------------------------------------
# Degradations: what a method does when a call's reply stays unreadable (issue 14, "Format slips").

def degrade(call: Callable[[], Any], fallback: Any = None, where: str = "", what: str = "", *,
            otherwise: Callable[[], Any] | None = None) -> Any:
    """`call()`, or, when its reply stays unreadable (`ragzoo.adapters.UnreadableOutput`, raised after the
    adapter's bounded re-asks), the method's paper-consistent `fallback` (or `otherwise()`, computed only
    then), recorded in the example's trace as a degradation (`where` = the predictor, `what` = what was
    done instead). Only an unreadable reply degrades: every other error propagates. A method's final answer
    call is never wrapped: there a question fails."""
    from ragzoo.adapters import UnreadableOutput
    from ragzoo.tracing import record_degradation

    try:
        return call()
    except UnreadableOutput:
        record_degradation(where, what)
        return otherwise() if otherwise is not None else fallback
