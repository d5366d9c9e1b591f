"""LM engines that answer without a model: the base of the dry-run LM and of the scripted LMs tests use.

DSPy 3.4 builds custom LMs as `dspy.LM(model, engine=...)` where the engine implements
`complete(Request) -> Response`. Going through `dspy.LM` keeps everything real users get: the adapters,
history, usage tracking, callbacks. The engine learns which predictor is calling from DSPy's
`settings.caller_modules` stack, so it can answer with type-valid values for that predictor's signature.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from ragzoo.errors import LMError

_FIELD_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")


@dataclass
class CallContext:
    """What one LM call is about: the calling predictor, its signature, and the inputs it was given."""

    predictor_name: str
    signature: Any
    inputs: dict[str, str]
    system: str
    messages: list[dict[str, str]]
    demos: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        return "\n\n".join([self.system, *(m["content"] for m in self.messages)])


def _message_text(message) -> str:
    text = getattr(message, "text", None)
    if text is not None:
        return text
    return "".join(getattr(part, "text", "") for part in getattr(message, "parts", ()))


def _system_text(system) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    return "".join(getattr(part, "text", "") for part in system)


# root module -> {id(predictor): (name, weakref to the predictor)}. Walking `named_predictors()` on every LM
# call cost as much as the rest of a program's own work, so the names are computed once per root and
# recomputed only when a caller is missing (a predictor replaced, e.g. by an optimizer).
_PREDICTOR_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PREDICTOR_NAMES_LOCK = threading.Lock()


def _names_of(root) -> dict:
    return {id(predictor): (name[: -len(".predict")] if name.endswith(".predict") else name, weakref.ref(predictor))
            for name, predictor in root.named_predictors()}


def predictor_name(caller, stack) -> str:
    """The calling predictor's name in the outermost module (as `named_predictors()` gives it, without a
    trailing `.predict`), or its signature's class name for a bare predictor."""
    if caller is None:
        return "?"
    root = stack[0] if stack else caller
    if root is not caller and hasattr(root, "named_predictors"):
        with _PREDICTOR_NAMES_LOCK:
            try:
                names = _PREDICTOR_NAMES.get(root)
            except TypeError:  # a root that cannot be weakly referenced: no cache
                names = None
        hit = names.get(id(caller)) if names is not None else None
        if hit is None or hit[1]() is not caller:
            names = _names_of(root)
            with _PREDICTOR_NAMES_LOCK:
                try:
                    _PREDICTOR_NAMES[root] = names
                except TypeError:
                    pass
            hit = names.get(id(caller))
        if hit is not None and hit[1]() is caller:
            return hit[0]
    return getattr(caller.signature, "__name__", type(caller).__name__)


def parse_inputs(text: str, input_names) -> dict[str, str]:
    """Split a user message formatted with `[[ ## field ## ]]` headers into {field: text}."""
    sections: dict[str, str] = {}
    matches = list(_FIELD_HEADER.finditer(text))
    for index, match in enumerate(matches):
        name = match.group(1)
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end():end]
        if name in input_names:
            # The adapter appends its "Respond with ..." instruction after the last input field.
            body = body.split("\n\nRespond with the corresponding output fields")[0]
            sections[name] = body.strip()
    return sections


def call_context(request) -> CallContext:
    from dspy.dsp.utils import settings

    stack = list(settings.caller_modules or [])
    caller = next((module for module in reversed(stack) if hasattr(module, "signature")), None)
    if caller is None:
        raise LMError("a ragzoo engine was called outside a DSPy predictor; it needs the calling signature")
    signature = caller.signature
    messages = [{"role": m.role, "content": _message_text(m)} for m in request.messages]
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    inputs = parse_inputs(last_user, set(signature.input_fields))
    demos = sum(1 for m in messages if m["role"] == "assistant")
    return CallContext(predictor_name(caller, stack), signature, inputs, _system_text(request.system), messages,
                       demos)


def format_outputs(signature, values: dict[str, Any]) -> str:
    """Write output values the way the active adapter parses them (ChatAdapter unless JSONAdapter is set)."""
    import dspy
    from dspy.adapters.chat_adapter import FieldInfoWithName
    from dspy.dsp.utils import settings

    adapter = settings.adapter
    if isinstance(adapter, dspy.JSONAdapter):
        import json

        from dspy.adapters.utils import serialize_for_json

        return json.dumps({name: serialize_for_json(value) for name, value in values.items()})
    fields = {}
    for name, value in values.items():
        info = signature.output_fields.get(name)
        if info is None:
            continue
        fields[FieldInfoWithName(name=name, info=info)] = value
    return dspy.ChatAdapter().format_field_with_value(fields) + "\n\n[[ ## completed ## ]]"


def use_bundled_tiktoken() -> None:
    """Point tiktoken at the cl100k file LiteLLM ships, so token counting never downloads (offline, each
    attempt would otherwise wait for a network timeout). A user's TIKTOKEN_CACHE_DIR wins."""
    import importlib.util
    import os

    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    spec = importlib.util.find_spec("litellm")
    for location in (spec.submodule_search_locations or []) if spec else []:
        bundled = os.path.join(location, "litellm_core_utils", "tokenizers")
        if os.path.isdir(bundled):
            os.environ["TIKTOKEN_CACHE_DIR"] = bundled
            return


_ENCODING: Any = None  # None: not tried yet; False: unavailable, use the length estimate
_ENCODING_LOCK = threading.Lock()


def _encoding():
    global _ENCODING
    with _ENCODING_LOCK:
        if _ENCODING is None:
            use_bundled_tiktoken()
            try:
                import tiktoken

                _ENCODING = tiktoken.get_encoding("cl100k_base")
            except Exception:  # tiktoken missing or its data unreachable: never retry per call
                _ENCODING = False
    return _ENCODING


def approx_tokens(text: str) -> int:
    """Token count with tiktoken's cl100k encoding when available, else ~4 characters a token."""
    encoding = _encoding()
    if encoding is False:
        return max(1, len(text) // 4)
    return len(encoding.encode(text, disallowed_special=()))


Responder = Callable[[CallContext], "dict[str, Any] | str"]


class FunctionEngine:
    """A DSPy engine whose answers come from a Python function of the call context.

    The responder returns either a dict of output values (formatted for the active adapter) or a raw
    completion string (to test parse failures). Usage is reported with counted prompt/completion tokens.
    """

    model_name = "ragzoo-function"

    def __init__(self, responder: Responder):
        self.responder = responder
        self.calls: list[CallContext] = []
        self._lock = threading.Lock()

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart, Usage

        context = call_context(request)
        with self._lock:
            self.calls.append(context)
        result = self.responder(context)
        text = result if isinstance(result, str) else format_outputs(context.signature, result)
        usage = Usage(input_tokens=approx_tokens(context.prompt_text), output_tokens=approx_tokens(text))
        return Response(id=None, model=self.model_name, message=Message.assistant((TextPart(text),)),
                        finish_reason="stop", usage=usage)

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass
