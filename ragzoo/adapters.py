"""Adapters that survive real models: DSPy's Chat, JSON and XML adapters with lenient reading of replies, a
bounded re-ask after an unreadable one, and a typed error when a call stays unreadable.

    adapter = make_adapter("chat")            # or "json", "xml", "two-step"; `max_reasks=2` by default
    with dspy.context(lm=lm, adapter=adapter): ...

What happens to one predictor call (in this order):
1. DSPy's own parser reads the reply. If it succeeds, nothing else happens.
2. Lenient reading, only where the meaning is unambiguous: markdown fences and chatty preambles are
   dropped; a JSON object (fenced or not) is read in any adapter; field headers in other styles are found
   anywhere, also glued to the previous value (`[[ ## x ## ]]`, `<x>...</x>`, `**x:**`, `x:`, `### x`);
   typed values written in words are read: bool "Yes." -> True, "No, it is not" -> False; int "two" -> 2;
   Literal "I would say it is true." -> "true" when exactly one option is named; list[int] "0 and 2" ->
   [0, 2], "None of them." -> []. A reply that names both yes and no, or two options, stays unreadable. A
   reply cut off by the token limit (finish_reason "length") is never read leniently. Every lenient read
   is recorded in the example's trace (`lenient`).
3. Re-ask, at most `max_reasks` times: the same prompt, followed by every unreadable reply so far, each
   with one user line saying what was wrong and which format is expected. Each re-ask's conversation
   differs from every earlier request of the call, so it is never served from DSPy's cache (and a server
   that caches on the prompt sees a new one). Each re-ask is one more LM call (counted as such) and one `reasks` entry in the trace.
4. Still unreadable: `UnreadableOutput` (a subclass of DSPy's `AdapterParseError`, so an evaluation
   that does not catch it records a `parse` failure) naming the predictor, the attempts and the reason.
   Programs catch it where the paper allows a degradation and call `ragzoo.tracing.record_degradation`.

DSPy's ChatAdapter would retry an unreadable reply once through JSONAdapter (an uncounted second prompt
in another format); here that fallback is off: the re-ask replaces it, counted, in the same format.
`make_adapter("two-step")` is DSPy's TwoStepAdapter: a free-text answer, then an extraction call (by the same
LM unless another is given) read by the lenient chat adapter above (see `TwoStepLenientAdapter`).
The adapter name ("chat", "json", "xml", "two-step") is what manifests and run configs record (`adapter_name`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import dspy
from dspy.adapters.base import Adapter
from dspy.adapters.chat_adapter import ChatAdapter
from dspy.adapters.json_adapter import JSONAdapter
from dspy.adapters.two_step_adapter import TwoStepAdapter
from dspy.adapters.xml_adapter import XMLAdapter
from dspy.utils.exceptions import AdapterParseError

from ragzoo.engines import REASK_PHRASE
from ragzoo.errors import ConfigError
from ragzoo.tracing import record_lenient, record_reask

ADAPTERS = ("chat", "json", "xml")
# also accepted by make_adapter / --adapter, not in the every-method matrix of ADAPTERS (see TwoStepLenientAdapter)
EXTRA_ADAPTERS = ("two-step",)
DEFAULT_ADAPTER = "chat"
DEFAULT_MAX_REASKS = 2
MAX_REASKS = 5

# the (unreadable reply, re-ask note) pairs of the call being re-asked, oldest first
_REASK: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("ragzoo_reask", default=())


class UnreadableOutput(AdapterParseError):
    """A predictor call whose reply could not be read, even after `attempts - 1` re-asks."""

    def __init__(self, predictor: str, attempts: int, reason: str, error: AdapterParseError):
        self.predictor = predictor
        self.attempts = attempts
        self.reason = reason
        super().__init__(adapter_name=getattr(error, "adapter_name", "ragzoo"), signature=error.signature,
                         lm_response=getattr(error, "lm_response", ""),
                         message=f"{predictor}: reply unreadable after {attempts} attempt(s): {reason}")


# ---------------------------------------------------------------------------------------------------------
# Lenient values

_YES = {"yes", "true", "y", "correct", "relevant", "supported", "helpful", "yep", "affirmative"}
_NO = {"no", "false", "n", "incorrect", "irrelevant", "not", "unsupported", "unhelpful", "none", "nope"}
_NUMBERS = {word: i for i, word in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven",
                                               "eight", "nine", "ten", "eleven", "twelve"))}


def _clean(text: str) -> str:
    text = str(text).strip()
    text = re.sub(r"\[\[\s*#+\s*completed\s*#+\s*\]\]\s*$", "", text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


_NEGATORS = {"not", "no", "never", "nor", "neither", "hardly"}
_DEGREES = {"very", "really", "quite", "particularly", "directly", "entirely", "fully", "at", "all", "so", "too",
            "especially", "that", "much", "be", "been", "being", "is", "are", "was", "were", "seem", "seems"}

# a reply that keeps nothing: "None.", "No.", "Nothing", "There is no relevant one.", "None of the three passages",
# "not any of them", "no passage is helpful"
_KEPT_NONE = re.compile(
    r"^\W*(?:no|none|nothing|empty|n/a)\W*$|^\W*not\s+(?:\w+\s+)?(?:relevant|helpful|useful)\W*$"
    r"|\b(?:none|nothing)\b"
    r"|\bnot\s+any\b"
    r"|\bno\s+(?:\w+\s+){0,2}?(?:passages?|sentences?|ids?|index|indices|documents?|docs?|ones?|knowledge"
    r"|evidence|contexts?|results?)\b")


# "none" that leaves the ids named out of it: the ids are what is kept
# what a list of ids may say besides the ids ("Passages [2] and [3] are relevant."): anything else is read as unsure
_ID_WORDS = re.compile(r"\b(?:the|sentences?|passages?|documents?|docs?|ids?|numbers?|indices|indexes|and|also|"
                       r"are|is|relevant|useful|helpful|selected|kept|keep|supporting|ones|only|both)\b|[\[\](){},;:.&\"'`*#]")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


_NONE_BUT = re.compile(r"\bnone of the others?\b|\bnothing else\b|\bexcept\b|\bbesides\b|\bonly\b")


def _governed(words: list[str], position: int) -> bool:
    """Whether a negator governs `words[position]`: it stands right before it, or before words of degree and
    being only ("not relevant", "is not very helpful", "not at all relevant"); "isn't" is the words "isn", "t"."""
    index = position - 1
    while index >= 0 and words[index] in _DEGREES and position - index <= 3:
        index -= 1
    if index < 0:
        return False
    return words[index] in _NEGATORS or (words[index] == "t" and index > 0 and words[index - 1].endswith("n"))


def lenient_value(text: Any, annotation: Any) -> Any:
    """`text` read as `annotation` where the meaning is unambiguous, else ValueError."""
    from dspy.adapters.utils import parse_value

    if not isinstance(text, str):
        return parse_value(text, annotation)
    text = _clean(text)
    if annotation is str:
        return text
    origin = get_origin(annotation)
    ids = (origin in (list, tuple, set) or annotation in (list, tuple, set)) and int in get_args(annotation)
    if not ids or _is_json(text):  # DSPy repairs broken JSON: "[1] and [3]" became [3] (a list of str reads as before)
        try:
            return parse_value(text, annotation)
        except Exception:  # noqa: BLE001 - pydantic and json errors alike: read it leniently below
            pass
    if origin in (Union, types.UnionType):
        arms = [arm for arm in get_args(annotation) if arm is not type(None)]
        for arm in arms:
            try:
                return lenient_value(text, arm)
            except ValueError:
                continue
        raise ValueError(f"cannot read {text[:80]!r} as {annotation}")
    lowered = text.lower()
    words = re.findall(r"[a-z]+", lowered)
    if annotation is bool:
        if not words:
            raise ValueError("no yes/no word")
        # a yes-word a negator governs is a no ("Not relevant.", "is not helpful", "isn't relevant"); no-words and
        # the negators themselves count as before ("No, not at all.": no; "Yes, it can't hurt.": yes)
        negated = {i for i, word in enumerate(words) if word in _YES and _governed(words, i)}
        yes = any(w in _YES and i not in negated for i, w in enumerate(words))
        no = bool(negated) or any(w in _NO for w in words)
        if yes != no:  # only one side is named ("Yes.", "No, it does not.", "It is relevant", "Not relevant.")
            return yes
        raise ValueError(f"cannot read {text[:80]!r} as yes or no")
    if annotation in (int, float):
        numbers = re.findall(r"-?\d+(?:\.\d+)?", text) or [str(_NUMBERS[w]) for w in words if w in _NUMBERS]
        if len(set(numbers)) != 1:
            raise ValueError(f"cannot read one number from {text[:80]!r}")
        return annotation(float(numbers[0])) if annotation is int else float(numbers[0])
    if origin is Literal:
        options = get_args(annotation)
        exact = [o for o in options if str(o).lower() == lowered.strip(" .!")]
        if len(exact) == 1:
            return exact[0]
        # an option named only where a negator governs it ("It is not true.") is not the one chosen
        named = [o for o in options if re.search(r"(?<![\w-])" + re.escape(str(o).lower()) + r"(?![\w-])", lowered)
                 and not (str(o).lower() in words and all(_governed(words, i) for i, word in enumerate(words)
                                                          if word == str(o).lower()))]
        if len(named) == 1:
            return named[0]
        raise ValueError(f"cannot read one of {list(options)} from {text[:80]!r}")
    if origin in (list, tuple, set) or annotation in (list, tuple, set):
        text = re.sub(r"</?item>", "\n", text).strip()
        args = get_args(annotation)
        item = args[0] if args else str
        if item is int:
            if re.search(r"\d[ \t]*(?:-|–|to|through|thru)[ \t]*\d", lowered):  # "0-4": all five, or 0 and -4?
                raise ValueError(f"a range of ids in {text[:80]!r}")
            kept_none = text in ("[]", "") or _KEPT_NONE.search(lowered) is not None
            digits = [int(token) for token in re.findall(r"-?\d+", lowered)]
            if kept_none and digits:
                if _NONE_BUT.search(lowered):  # "Only passage 2; none of the others are." / "None except 2"
                    return list(dict.fromkeys(digits))
                raise ValueError(f"both ids and none in {text[:80]!r}")  # "None of 1 and 2 is relevant"
            if kept_none:
                return []
            if re.search(r"\d\.\d", lowered):
                raise ValueError(f"a number that is not an integer in {text[:80]!r}")
            # ids and nothing else said of them: a numbered list's own numbers, "not", "out of 4" or "(0-based)"
            # would have been read as ids ("1. 2\n2. 3" as [1, 2, 3])
            unmarked = re.sub(r"(?m)^\s*(?:[-*•]|\d+[.)])\s+(?=\S)", "", text.lower())  # <item> tags gone
            residue = _ID_WORDS.sub(" ", unmarked).split()
            if any(not re.fullmatch(r"-?\d+", token) and token not in _NUMBERS for token in residue):
                raise ValueError(f"more than ids in {text[:80]!r}")
            digits = [int(token) for token in residue if re.fullmatch(r"-?\d+", token)]
            # number words are ids only where no digit is ("passages one and three")
            numbers = digits or [_NUMBERS[w] for w in residue if w in _NUMBERS]
            if not numbers:
                raise ValueError(f"no integers in {text[:80]!r}")
            return list(dict.fromkeys(numbers))
        if item is str:
            lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip() for line in text.splitlines()]
            lines = [line for line in lines if line]
            if lines:
                return lines
        raise ValueError(f"cannot read {text[:80]!r} as {annotation}")
    raise ValueError(f"no lenient reading of {annotation}")


# ---------------------------------------------------------------------------------------------------------
# Lenient replies

_GLUED = re.compile(r"\s*\[\[\s*#+\s*\w+\s*#+\s*\]\]\s*$")  # a field's marker left at the end of a text
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```", re.DOTALL)


def _json_object(text: str) -> dict | None:
    start = text.find("{")
    while start >= 0:
        depth, in_string, escape = 0, False, False
        for position in range(start, len(text)):
            char = text[position]
            if in_string:
                escape = (char == "\\") and not escape
                if char == '"' and not escape:
                    in_string = False
                continue
            if char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    try:
                        value = json.loads(text[start:position + 1])
                    except json.JSONDecodeError:
                        break
                    if isinstance(value, dict):
                        return value
                    break
        start = text.find("{", start + 1)
    return None


def _header_pattern(names: list[str]) -> re.Pattern:
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(
        r"\[\[\s*#*\s*(?P<a>" + alternatives + r")\s*#*\s*\]\]"            # [[ ## name ## ]] anywhere
        r"|<(?P<b>" + alternatives + r")>"                                  # <name>
        r"|(?m:^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?P<c>" + alternatives + r")(?:\*\*|__)?[ \t]*:?[ \t]*(?:\*\*|__)?"
        r"(?=[ \t]*(?::|\n|$)|(?<=:)|(?<=\*\*)))",                          # name: / **name:** / ### name
        re.IGNORECASE)


def _sections(text: str, names: list[str], *, last: bool = True) -> dict[str, str]:
    """Each field's text by its header; `last`: a field given twice is read from its last non-empty occurrence (the
    lenient reader), else its first (DSPy's strict reader)."""
    pattern = _header_pattern(names)
    by_lower = {name.lower(): name for name in names}
    matches = list(pattern.finditer(text))
    sections: dict[str, str] = {}
    for index, match in enumerate(matches):
        name = by_lower[(match.group("a") or match.group("b") or match.group("c")).lower()]
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        value = text[match.end():end]
        value = re.sub(r"</" + re.escape(name) + r">\s*$", "", value.strip(), flags=re.IGNORECASE)
        value = re.sub(r"^\s*:", "", value)
        given = _clean(value) if last else ""
        if (last and given) or name not in sections:  # a field given again is the model's last word ("Answer: London
            sections[name] = value.strip()            # ... But the passage says Paris. **Answer:** Paris")
    return sections


def lenient_parse(signature, completion: str) -> tuple[dict[str, Any], str]:
    """(values, how) read leniently from `completion` for `signature`'s output fields, else ValueError."""
    fields = signature.output_fields
    names = list(fields)
    text = (completion or "").strip()
    if not text:
        raise ValueError("the reply is empty")
    fenced = _FENCE.findall(text)
    candidates = [("fenced", block) for block in fenced] + [("text", _FENCE.sub(lambda m: m.group(1), text)),
                                                            ("text", text)]
    last_error: Exception = ValueError("no field of the signature found in the reply")
    for how, candidate in candidates:
        found: dict[str, Any] | None = None
        method = ""
        obj = _json_object(candidate)
        if obj is not None:
            lowered = {str(key).lower(): value for key, value in obj.items()}
            if all(name.lower() in lowered for name in names):
                found, method = {name: lowered[name.lower()] for name in names}, "json"
        if found is None:
            sections = _sections(candidate, names)
            if all(name in sections for name in names):
                found, method = sections, "headers"
            elif len(names) == 1 and not sections and how == "fenced":
                found, method = {names[0]: candidate}, "bare"
        if found is None:
            continue
        try:
            values = {name: lenient_value(found[name], fields[name].annotation) for name in names}
        except (ValueError, TypeError) as error:
            last_error = error
            continue
        return values, f"{method}{'+fences' if how == 'fenced' else ''}"
    raise ValueError(str(last_error))


# ---------------------------------------------------------------------------------------------------------
# The adapters


def _predictor_name() -> str:
    try:
        from ragzoo.usage import caller_name

        return caller_name()
    except Exception:  # noqa: BLE001 - naming is a nicety
        return "?"


def _truncated(lm, outputs) -> bool:
    """Whether the call that returned `outputs` stopped at the token limit (finish_reason "length")."""
    from ragzoo.usage import find_history_entry

    entry = find_history_entry(lm, outputs)
    if not entry:
        return False
    response = entry.get("response")
    for item in response if isinstance(response, (list, tuple)) else [response]:
        if getattr(item, "finish_reason", None) == "length":
            return True
        choices = item.get("choices") if isinstance(item, dict) else getattr(item, "choices", None)
        for choice in choices or []:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else getattr(choice, "finish_reason", None)
            if reason == "length":
                return True
    return False


class _Truncated(AdapterParseError):
    pass


def _with_reask_turns(messages: list) -> list:
    """`messages`, then every earlier attempt of this call and the note that asks again (`_REASK`): each re-ask
    differs from the last, so none is served from the cache."""
    for previous, note in _REASK.get():
        messages = [*messages, {"role": "assistant", "content": previous or "(empty reply)"},
                    {"role": "user", "content": note}]
    return messages


@contextlib.contextmanager
def _own_conversation():
    """A call inside another's re-asks (the two-step extraction) with no re-ask turns of the outer one."""
    token = _REASK.set(())
    try:
        yield
    finally:
        _REASK.reset(token)


def _raise_if_cut(adapter, signature, lm, outputs) -> None:
    if _truncated(lm, outputs):
        raise _Truncated(adapter_name=type(adapter).__name__, signature=signature,
                         lm_response=_reply_text(outputs[0]) if outputs else "",
                         message="the reply was cut off at the token limit (finish_reason 'length')")


def _reply_text(output) -> str:
    """An LM output's text: a reasoning model's comes as a dict whose reasoning must not go back into a re-ask."""
    return str(output.get("text") or "") if isinstance(output, dict) else str(output)


class LenientMixin:
    """Lenient reading + bounded re-ask on top of a DSPy adapter (see the module docstring)."""

    adapter_name = "chat"
    max_reasks = DEFAULT_MAX_REASKS

    def parse(self, signature, completion: str) -> dict[str, Any]:
        try:
            values = super().parse(signature, completion)
        except AdapterParseError as strict:
            try:
                values, how = lenient_parse(signature, completion)
            except ValueError:
                raise strict from None
            record_lenient(_predictor_name(), how)
            return values
        return self._checked(signature, completion, values)

    def _checked(self, signature, completion: str, values: dict[str, Any]) -> dict[str, Any]:
        """A strict read, checked where DSPy's is too kind: a field marker glued to the end of a text ("Paris
        [[ ## completed ## ]]") is no part of it, and a list of ids DSPy's JSON repair read from text that is not
        JSON ("[1] and [3]" as [3]) is read again as ids alone, or re-asked."""
        for name, value in list(values.items()):
            if isinstance(value, str) and _GLUED.search(value):
                values[name] = _GLUED.sub("", value).rstrip()
            annotation = signature.output_fields[name].annotation
            if get_origin(annotation) in (list, tuple, set) and int in get_args(annotation):
                text = self._field_text(signature, completion or "", name)
                if text is not None and not _is_json(text):
                    try:
                        values[name] = lenient_value(text, annotation)
                    except ValueError as error:
                        raise AdapterParseError(adapter_name=type(self).__name__, signature=signature,
                                                lm_response=completion, message=str(error)) from None
                    record_lenient(_predictor_name(), "ids")
        return values

    def _field_text(self, signature, completion: str, name: str) -> str | None:
        """The text DSPy's strict read took field `name` from, out of its fence; None where the reply gave it a
        structured value (a JSON list), not text."""
        if self.adapter_name == "json":
            found = (_json_object(completion) or {}).get(name)
            return _clean(found) if isinstance(found, str) else None
        raw = _sections(completion, [*signature.output_fields, "completed"], last=False).get(name)  # the first, as DSPy
        if raw is None:
            return None
        raw = re.split(r"</" + re.escape(name) + r">", raw, maxsplit=1, flags=re.IGNORECASE)[0]  # XML: its element
        return _clean(_FENCE.sub(lambda fenced: fenced.group(1), raw))

    def _call_postprocess(self, processed_signature, original_signature, outputs, lm, lm_kwargs):
        _raise_if_cut(self, original_signature, lm, outputs)
        return super()._call_postprocess(processed_signature, original_signature, outputs, lm, lm_kwargs)

    def format(self, signature, demos, inputs):
        return _with_reask_turns(super().format(signature, demos, inputs))

    def _reask_note(self, signature, error: AdapterParseError) -> str:
        if isinstance(error, _Truncated):
            what = "Your reply was cut off before it ended."
        elif not (getattr(error, "lm_response", "") or "").strip():
            what = "Your reply was empty."
        else:
            what = "Your reply could not be read."
        return f"{what} {REASK_PHRASE}: {self.user_message_output_requirements(signature)}"

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
        reasks = _Reasks(self, signature)
        for _ in range(self.max_reasks + 1):
            with reasks.attempt():
                return super().__call__(lm, dict(lm_kwargs), signature, demos, inputs)
        raise reasks.unreadable() from reasks.error

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        reasks = _Reasks(self, signature)
        for _ in range(self.max_reasks + 1):
            with reasks.attempt():
                return await super().acall(lm, dict(lm_kwargs), signature, demos, inputs)
        raise reasks.unreadable() from reasks.error


class _Reasks:
    """The bookkeeping of one predictor call's bounded re-asks, shared by the sync and async paths: each
    attempt sees every unreadable reply so far (so it is never served from the cache); an unreadable reply
    is counted as a re-ask unless it was the last attempt."""

    def __init__(self, adapter, signature):
        self.adapter, self.signature = adapter, signature
        self.error: AdapterParseError | None = None
        self.name: str | None = None
        self.history: tuple[tuple[str, str], ...] = ()
        self.failures = 0

    @contextlib.contextmanager
    def attempt(self):
        """One attempt: an unreadable reply is recorded and swallowed, so the caller's loop asks again."""
        if self.error is not None:
            self.history = (*self.history,
                            (self.error.lm_response or "", self.adapter._reask_note(self.signature, self.error)))
        token = _REASK.set(self.history) if self.history else None
        try:
            yield
        except AdapterParseError as exc:
            self.error = exc
            self.name = self.name or _predictor_name()
            self.failures += 1
            if self.failures <= self.adapter.max_reasks:
                record_reask(self.name, _reason(exc))
        finally:
            if token is not None:
                _REASK.reset(token)

    def unreadable(self) -> "UnreadableOutput":
        return UnreadableOutput(self.name or "?", self.adapter.max_reasks + 1, _reason(self.error), self.error)


def _reason(error: AdapterParseError | None) -> str:
    if error is None:
        return "?"
    if isinstance(error, _Truncated):
        return "cut off at the token limit"
    if not (getattr(error, "lm_response", "") or "").strip():
        return "empty reply"
    message = str(error).strip().splitlines()
    return next((line for line in message if line.strip()), "unreadable reply")[:160]


class LenientChatAdapter(LenientMixin, ChatAdapter):
    adapter_name = "chat"

    def __init__(self, max_reasks: int = DEFAULT_MAX_REASKS, **kwargs):
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)
        self.max_reasks = max_reasks


class LenientJSONAdapter(LenientMixin, JSONAdapter):
    adapter_name = "json"

    def __init__(self, max_reasks: int = DEFAULT_MAX_REASKS, **kwargs):
        super().__init__(**kwargs)
        self.max_reasks = max_reasks


class LenientXMLAdapter(LenientMixin, XMLAdapter):
    adapter_name = "xml"

    def __init__(self, max_reasks: int = DEFAULT_MAX_REASKS, **kwargs):
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)
        self.max_reasks = max_reasks


# the LM of the call a two-step adapter is reading (its extraction LM unless one was given)
_MAIN_LM: contextvars.ContextVar[Any] = contextvars.ContextVar("ragzoo_two_step_lm", default=None)


class _ExtractionFailed(Exception):
    """An extraction that stayed unreadable, carried past the main call's re-ask loop (it is no AdapterParseError,
    which that loop would take for a main reply to ask again)."""

    def __init__(self, unreadable: "UnreadableOutput"):
        super().__init__(str(unreadable))
        self.unreadable = unreadable


class TwoStepLenientAdapter(TwoStepAdapter):
    """DSPy's `TwoStepAdapter` (`--adapter two-step`): the main LM answers a plain prompt in free text, then an
    extraction call reads the output fields out of that text. For models that answer well but slip on
    formats (reasoning models).

    - Extraction LM: `extraction_lm` if given, else the LM of the call itself (the same model reads its own
      answer). Each extraction is one more LM call, counted and budgeted like any other (so a program makes
      twice the calls it makes under chat).
    - The extraction runs through `LenientChatAdapter`: read leniently, re-asked at most `max_reasks` times,
      and `UnreadableOutput` when it stays unreadable (programs degrade on it as under the other adapters).
    - Where it applies: predictors with plain input and output fields (all ragzoo methods). The main prompt
      writes inputs as `name: value` lines, not `[[ ## name ## ]]` headers, so a scripted test LM that
      answers from its parsed inputs sees none in the main call. DSPy's own caveat holds: the extraction's
      prompt is built on the fly, so optimizers tune the main prompt only.
    """

    adapter_name = "two-step"

    def __init__(self, extraction_lm=None, max_reasks: int = DEFAULT_MAX_REASKS, **kwargs):
        if extraction_lm is None:
            Adapter.__init__(self, **kwargs)  # TwoStepAdapter insists on an LM now; ours comes per call
            self.extraction_model = None
        else:
            super().__init__(extraction_lm, **kwargs)
        self.max_reasks = max_reasks

    def _extractor(self):
        lm = self.extraction_model or _MAIN_LM.get() or dspy.settings.lm
        if lm is None:
            raise ConfigError("the two-step adapter needs an LM to read replies with; configure one")
        return lm, LenientChatAdapter(max_reasks=self.max_reasks)

    def parse(self, signature, completion: str) -> dict[str, Any]:
        lm, extractor = self._extractor()
        with _own_conversation():  # the main call's re-ask turns are no part of the extraction's conversation
            return extractor(lm=lm, lm_kwargs={}, signature=self._create_extractor_signature(signature), demos=[],
                             inputs={"text": completion})[0]

    # the main call's reply is checked as the other adapters check theirs: one cut off at the token limit, or
    # empty, is asked again (at most `max_reasks` times), never handed to the extraction to make something of
    def format(self, signature, demos, inputs):
        return _with_reask_turns(super().format(signature, demos, inputs))

    def _reask_note(self, signature, error: AdapterParseError) -> str:
        what = "Your reply was cut off before it ended." if isinstance(error, _Truncated) else "Your reply was empty."
        return f"{what} Answer again, complete and short."

    def _checked_main(self, signature, lm, outputs) -> None:
        _raise_if_cut(self, signature, lm, outputs)
        if not any(_reply_text(output).strip() for output in outputs or [""]):
            raise AdapterParseError(adapter_name=type(self).__name__, signature=signature, lm_response="",
                                    message="the reply is empty")

    def _call_postprocess(self, processed_signature, original_signature, outputs, lm, lm_kwargs):
        self._checked_main(original_signature, lm, outputs)
        try:
            return super()._call_postprocess(processed_signature, original_signature, outputs, lm, lm_kwargs)
        except UnreadableOutput as unreadable:  # the extraction's own re-asks are spent: not the main call's to redo
            raise _ExtractionFailed(unreadable) from None

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
        token = _MAIN_LM.set(lm)
        try:
            reasks = _Reasks(self, signature)
            for _ in range(self.max_reasks + 1):
                with reasks.attempt():
                    return super().__call__(lm, dict(lm_kwargs), signature, demos, inputs)
            raise reasks.unreadable() from reasks.error
        except _ExtractionFailed as failed:
            raise failed.unreadable from None
        finally:
            _MAIN_LM.reset(token)

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        reasks = _Reasks(self, signature)
        try:
            for _ in range(self.max_reasks + 1):
                with reasks.attempt():
                    return await self._acall_once(lm, dict(lm_kwargs), signature, demos, inputs)
            raise reasks.unreadable() from reasks.error
        except _ExtractionFailed as failed:
            raise failed.unreadable from None

    async def _acall_once(self, lm, lm_kwargs, signature, demos, inputs):
        token = _MAIN_LM.set(lm)
        try:
            outputs = await lm.acall(messages=self.format(signature, demos, inputs), **lm_kwargs)
            self._checked_main(signature, lm, outputs)
            extraction_lm, extractor = self._extractor()
            values = []
            for output in outputs:
                try:
                    with _own_conversation():
                        value = (await extractor.acall(lm=extraction_lm, lm_kwargs={},
                                                       signature=self._create_extractor_signature(signature),
                                                       demos=[], inputs={"text": _reply_text(output)}))[0]
                except UnreadableOutput as unreadable:
                    raise _ExtractionFailed(unreadable) from None
                if isinstance(output, dict) and output.get("logprobs") is not None:
                    value["logprobs"] = output["logprobs"]
                values.append(value)
            return values
        finally:
            _MAIN_LM.reset(token)


_CLASSES = {"chat": LenientChatAdapter, "json": LenientJSONAdapter, "xml": LenientXMLAdapter,
            "two-step": TwoStepLenientAdapter}


def make_adapter(name: str | None = None, *, max_reasks: int = DEFAULT_MAX_REASKS, extraction_lm=None):
    """The lenient adapter named `name` ("chat" default, "json", "xml", "two-step"). `extraction_lm` is the
    LM that reads a two-step adapter's replies (default: the LM of each call); other adapters refuse it."""
    name = (name or DEFAULT_ADAPTER).strip().lower().replace("_", "-")
    if name in ("twostep", "two step"):
        name = "two-step"
    if name not in _CLASSES:
        raise ConfigError(f"unknown adapter {name!r}; choose one of {', '.join((*ADAPTERS, *EXTRA_ADAPTERS))}")
    if isinstance(max_reasks, bool) or not isinstance(max_reasks, int) or not 0 <= max_reasks <= MAX_REASKS:
        raise ConfigError(f"--max-reasks must be an integer from 0 to {MAX_REASKS}, got {max_reasks!r}")
    if name == "two-step":
        from dspy.clients.base_lm import BaseLM

        if extraction_lm is not None and not isinstance(extraction_lm, BaseLM):
            raise ConfigError(f"the two-step adapter's extraction LM must be a dspy LM, got {type(extraction_lm).__name__}")
        return TwoStepLenientAdapter(extraction_lm, max_reasks=max_reasks)
    if extraction_lm is not None:
        raise ConfigError(f"an extraction LM applies to the two-step adapter only, not {name!r}")
    return _CLASSES[name](max_reasks=max_reasks)


def adapter_name(adapter) -> str:
    """What a manifest or run config records for `adapter` (None = DSPy's default, ChatAdapter)."""
    if adapter is None:
        return "chat"
    name = getattr(adapter, "adapter_name", None)
    if isinstance(name, str):
        return name
    if isinstance(adapter, TwoStepAdapter):
        return "two-step"
    if isinstance(adapter, XMLAdapter):
        return "xml"
    if isinstance(adapter, JSONAdapter):
        return "json"
    if isinstance(adapter, ChatAdapter):
        return "chat"
    return type(adapter).__name__


_warned: set[tuple[str, str]] = set()


def warn_adapter_mismatch(compiled_under: str | None, running_under: str, where: str = "") -> bool:
    """Warn once per (compiled, running) pair that a program compiled under one adapter runs under another
    (its demos and instructions were chosen for the other format). Returns whether it warned."""
    import warnings

    if not compiled_under or compiled_under == running_under or (compiled_under, running_under) in _warned:
        return False
    _warned.add((compiled_under, running_under))
    warnings.warn(f"{where or 'this program'} was compiled under the {compiled_under} adapter and runs under the "
                  f"{running_under} adapter; pass --adapter {compiled_under} to run it as compiled",
                  UserWarning, stacklevel=2)
    return True


def active_adapter():
    return dspy.settings.adapter


def default_adapter(name: str | None = None, *, max_reasks: int = DEFAULT_MAX_REASKS):
    """`make_adapter`, marked as a default rather than a choice (what `ragzoo.configure` sets when no adapter is
    named): a program loaded from an artifact runs under the adapter it was compiled with instead."""
    adapter = make_adapter(name, max_reasks=max_reasks)
    adapter.ragzoo_default = True
    return adapter


def _recordable(adapter) -> tuple[str | None, int | None]:
    """(name, max_reasks) of `adapter` as a manifest can record it: a name `make_adapter` builds again, else
    (None, None) (a user's own adapter class: `load` could not build it, so nothing is recorded)."""
    name = adapter_name(adapter)
    return (name, getattr(adapter, "max_reasks", None)) if name in (*ADAPTERS, *EXTRA_ADAPTERS) else (None, None)


def stamp_compiled_adapter(program) -> None:
    """Note on a compiled `program` the adapter it was compiled under (and its `max_reasks`), as `ragzoo.save`
    records it in the manifest when its caller names none (a Python compile-then-save)."""
    program.ragzoo_compiled_under = _recordable(adapter_in_force(program, dspy.settings.adapter))


def compiled_adapter(program) -> tuple[str | None, int | None]:
    """(adapter, max_reasks) `program` was compiled under, as a manifest records it: its stamp, else a loaded
    program's own (re-saved, it keeps it whatever is active), else what is active."""
    stamped = getattr(program, "ragzoo_compiled_under", None)
    if stamped is not None:
        return stamped
    own = getattr(program, "ragzoo_adapter", None)
    return _recordable(own if own is not None else adapter_in_force(program, dspy.settings.adapter))


def adapter_in_force(program, active):
    """The adapter `program` runs under when `active` is the caller's: a loaded program's own (`ragzoo_adapter`)
    unless the caller chose one (`active` is neither None nor `ragzoo.configure`'s default), else `active`."""
    recorded = getattr(program, "ragzoo_adapter", None)
    if recorded is not None and (active is None or getattr(active, "ragzoo_default", False)):
        return recorded
    return active


class _RecordedAdapter:
    """Mixin of a loaded program's class: each call runs under `ragzoo_adapter` (the adapter it was compiled
    with) unless the caller chose one (`dspy.context(adapter=...)`, `dspy.configure`), which wins with a
    warning if it differs. `ragzoo.configure`'s default adapter is no choice."""

    ragzoo_adapter = None

    def _adapter_context(self):
        recorded = self.ragzoo_adapter
        active = dspy.settings.adapter
        if recorded is None:
            return contextlib.nullcontext()
        if adapter_in_force(self, active) is recorded:
            return dspy.context(adapter=recorded)
        warn_adapter_mismatch(adapter_name(recorded), adapter_name(active), where=type(self).__name__)
        return contextlib.nullcontext()

    def __call__(self, *args, **kwargs):
        with self._adapter_context():
            return super().__call__(*args, **kwargs)

    async def acall(self, *args, **kwargs):
        with self._adapter_context():
            return await super().acall(*args, **kwargs)


def run_under(program, name: str | None, *, max_reasks: int = DEFAULT_MAX_REASKS):
    """Make `program` (in place; returned) run under the lenient adapter `name` unless its caller chose one.
    Its class gains the `_RecordedAdapter` mixin (one subclass per class, named as the class, so `isinstance`,
    saving and copies behave as before); copies made later (optimizers) keep it."""
    from ragzoo.usage import mixed_class

    if not isinstance(program, _RecordedAdapter):
        program.__class__ = mixed_class(_RecordedAdapter, type(program), "")
    program.ragzoo_adapter = make_adapter(name, max_reasks=max_reasks)
    return program


__all__ = ["ADAPTERS", "DEFAULT_ADAPTER", "EXTRA_ADAPTERS", "TwoStepLenientAdapter", "LenientChatAdapter", "LenientJSONAdapter", "LenientXMLAdapter",
           "UnreadableOutput", "adapter_in_force", "adapter_name", "compiled_adapter", "default_adapter", "lenient_parse", "lenient_value", "make_adapter",
           "run_under", "stamp_compiled_adapter", "warn_adapter_mismatch"]

_ = typing  # typing is imported for readers of lenient_value's annotations
