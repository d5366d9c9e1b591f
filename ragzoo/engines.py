"""Engines that answer without a model, and the hints they read: one room for model-free LMs.

- `FunctionEngine`: a DSPy 3.4 engine (`dspy.LM(model, engine=...)`, `complete(Request) -> Response`) whose
  answers come from a Python function of the call context. Going through `dspy.LM` keeps everything real
  users get: the adapters, history, usage tracking, callbacks. The engine learns which predictor is calling
  from DSPy's `settings.caller_modules` stack, so it can answer with type-valid values for that
  predictor's signature. The scripted LMs of `ragzoo.testing` build on it.
- `DryRunEngine`: answers every predictor with type-valid placeholders for its output fields (the dry-run
  LM that `ragzoo.lm.make_lm("dry-run")` builds); prompts and completions are counted with tiktoken's
  cl100k encoding, so a dry run reports realistic tokens.
- A field's placeholder can be chosen with `json_schema_extra={"dry_run": value}`. DSPy 3.4.1's
  `dspy.OutputField` drops a user `json_schema_extra`, so set it with `with_dry_run(field, value)`.
  Signatures import this hint from here: this module has no import-time side effects (no environment
  change, no DSPy or LiteLLM import).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import re
import threading
import types
import typing
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union

from ragzoo.errors import LMError

_FIELD_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")
# the words every re-ask of `ragzoo.adapters` carries (engines read a re-ask's inputs from the message before)
REASK_PHRASE = "Answer again, complete and short, exactly in the required format"


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
    users = [m["content"] for m in messages if m["role"] == "user"]
    reasks = 0
    while users and REASK_PHRASE in users[-1]:  # re-asks (ragzoo.adapters): the inputs come before them
        users.pop()
        reasks += 1
    inputs = parse_inputs(users[-1] if users else "", set(signature.input_fields))
    demos = sum(1 for m in messages if m["role"] == "assistant") - reasks
    return CallContext(predictor_name(caller, stack), signature, inputs, _system_text(request.system), messages,
                       demos, extra={"reasks": reasks} if reasks else {})


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
        from dspy.lm15 import Usage

        context, text = self._reply(request)
        return self._response(text, Usage(input_tokens=approx_tokens(context.prompt_text),
                                          output_tokens=approx_tokens(text)))

    def _reply(self, request) -> tuple[CallContext, str]:
        context = call_context(request)
        with self._lock:
            self.calls.append(context)
        result = self.responder(context)
        return context, result if isinstance(result, str) else format_outputs(context.signature, result)

    def _response(self, text: str, usage):
        from dspy.lm15 import Message, Response, TextPart

        return Response(id=None, model=self.model_name, message=Message.assistant((TextPart(text),)),
                        finish_reason="stop", usage=usage)

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


DEFAULT_PRICED_MODEL = "openai/gpt-4o-mini"
DRY_RUN = "dry-run"

# ---------------------------------------------------------------------------------------------------------
# Placeholder values
# ---------------------------------------------------------------------------------------------------------

# Placeholder text per output-field name, sized like a real model's answer so that dry-run completion
# token counts are realistic (cl100k tokens in the comments). Names not listed get `DEFAULT_TEXT`.
_REASONING = ("The question asks for one specific fact. The first passage names the entity and the second "
              "passage gives the detail that is needed, so combining the two passages answers the question. "
              "Nothing in the context contradicts this, so the answer follows directly from those two passages.")
_PASSAGE = ("This placeholder passage stands in for a paragraph the model would write. It names an entity, "
            "says when and where it appeared, and adds one or two details a reader would want to know.")
PLACEHOLDER_TEXT: dict[str, str] = {
    "reasoning": _REASONING,  # ~60 tokens: chain-of-thought rationale
    "rationale": _REASONING,  # ~60
    "answer": "placeholder answer",  # ~3 tokens: short answers are scored by exact match
    "short_answer": "placeholder answer",  # ~3
    "final_answer": "placeholder answer",  # ~3
    "passage": _PASSAGE,  # ~40 tokens: generated pseudo-passages / knowledge
    "knowledge": _PASSAGE,  # ~40
    "summary": _PASSAGE,  # ~40
    "search_query": "placeholder search query terms",  # ~5
    "query": "placeholder search query terms",  # ~5
    "follow_up": "what is the placeholder follow-up question?",  # ~8
    "sub_question": "what is the placeholder sub-question?",  # ~8
}
DEFAULT_TEXT = "placeholder text for this output field"  # ~7 tokens


def placeholder_text(field_name: str) -> str:
    return PLACEHOLDER_TEXT.get(field_name, DEFAULT_TEXT)


def placeholder_value(annotation: Any, field_name: str = "") -> Any:
    """A value of type `annotation` (str, bool, int, float, list, tuple, dict, set, Literal, Optional,
    Union, Enum, Pydantic model, and nests of them) that DSPy's adapters accept."""
    if annotation is None or annotation is type(None):
        return None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return placeholder_value(args[0], field_name)
    if origin is Literal:
        return args[0]
    if origin in (Union, types.UnionType):
        arms = [arm for arm in args if arm is not type(None)]
        return placeholder_value(arms[0], field_name) if arms else None
    if origin in (list, set, frozenset, typing.Sequence) or annotation in (list, set):
        item = placeholder_value(args[0], field_name) if args else placeholder_text(field_name)
        return [item]
    if origin is tuple or annotation is tuple:
        if not args:
            return (placeholder_text(field_name),)
        if len(args) == 2 and args[1] is Ellipsis:
            return (placeholder_value(args[0], field_name),)
        return tuple(placeholder_value(arg, field_name) for arg in args)
    if origin is dict or annotation is dict:
        key_type, value_type = args if args else (str, str)
        return {placeholder_value(key_type, "key"): placeholder_value(value_type, field_name)}
    if isinstance(annotation, type):
        if issubclass(annotation, bool):
            return True
        if issubclass(annotation, enum.Enum):
            return next(iter(annotation))
        if issubclass(annotation, int):
            return 1
        if issubclass(annotation, float):
            return 0.5
        if issubclass(annotation, str):
            return placeholder_text(field_name)
        from pydantic import BaseModel

        if issubclass(annotation, BaseModel):
            values = {name: placeholder_value(info.annotation, name)
                      for name, info in annotation.model_fields.items() if info.is_required()}
            return annotation(**values)
    return placeholder_text(field_name)


def field_dry_run_value(field_info) -> tuple[bool, Any]:
    """(True, value) when the field carries `json_schema_extra={"dry_run": value}`."""
    extra = getattr(field_info, "json_schema_extra", None)
    if isinstance(extra, dict) and "dry_run" in extra:
        return True, extra["dry_run"]
    return False, None


def placeholder_outputs(signature) -> dict[str, Any]:
    """Placeholder values for every output field of a DSPy signature (the `dry_run` override first)."""
    values = {}
    for name, info in signature.output_fields.items():
        found, value = field_dry_run_value(info)
        values[name] = value if found else placeholder_value(info.annotation, name)
    return values


def placeholder_from_schema(schema: dict | None, field_name: str = "") -> Any:
    """A value that satisfies a (simple) JSON schema: what DSPy's adapters print for non-str fields."""
    if not isinstance(schema, dict):
        return placeholder_text(field_name)
    definitions = schema.get("$defs", {})

    def build(node: dict, name: str) -> Any:
        if "$ref" in node:
            node = definitions.get(node["$ref"].rsplit("/", 1)[-1], {})
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return node["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                arms = [arm for arm in node[key] if arm.get("type") != "null"] or node[key]
                return build(arms[0], name)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind == "array":
            if "prefixItems" in node:
                return [build(item, name) for item in node["prefixItems"]]
            return [build(node.get("items", {"type": "string"}), name)]
        if kind == "object" or "properties" in node:
            properties = node.get("properties", {})
            if properties:
                required = node.get("required", list(properties))
                return {key: build(properties[key], key) for key in required if key in properties}
            extra = node.get("additionalProperties")
            return {"key": build(extra if isinstance(extra, dict) else {"type": "string"}, name)}
        if kind == "boolean":
            return True
        if kind == "integer":
            return 1
        if kind == "number":
            return 0.5
        if kind == "null":
            return None
        return placeholder_text(name)

    return build(schema, field_name)


def with_dry_run(field, value: Any):
    """Set the dry-run placeholder of an existing DSPy field and return the field."""
    field.json_schema_extra["dry_run"] = value
    return field


# ---------------------------------------------------------------------------------------------------------
# Dry-run LM
# ---------------------------------------------------------------------------------------------------------


class DryRunEngine(FunctionEngine):
    """Answers every predictor with placeholder values for its signature's output fields.

    Usage (prompt/completion tokens, counted with cl100k) is reported on each response like a real
    provider's; `ragzoo.usage` prices it from LiteLLM's price table for `priced_model`.

    With `model_cache` (`start_estimate()`), the engine prices what a real run would send: DSPy's response
    cache answers a request identical to one already sent (same messages and options, rollout id included)
    without calling the server, so a repeat is answered with no usage reported, which `ragzoo.usage` records
    as a cache hit (no tokens, no cost; the tokens it would have used kept as `cached_*`, the `--no-cache`
    figure). The dry-run LM itself keeps DSPy's cache off, so every call still reaches the engine and is
    counted. Limitation: placeholder answers are not a real model's, so a compile whose later requests depend
    on earlier answers (instructions proposed from them, traces that fail the metric) may repeat more or less
    than the estimate says.
    """

    model_name = "dry-run"

    def __init__(self, priced_model: str = DEFAULT_PRICED_MODEL, *, model_cache: bool = False):
        self.priced_model = priced_model
        self.model_cache = model_cache
        self._seen: set[str] = set()
        super().__init__(self._respond)

    def start_estimate(self, model_cache: bool = True) -> None:
        """Begin a new estimate: forget the requests seen so far (an empty response cache) and model the cache
        (`model_cache=False`: price every call, as a `--no-cache` run sends it)."""
        with self._lock:
            self._seen.clear()
            self.model_cache = model_cache

    def complete(self, request):
        if not self.model_cache:
            return super().complete(request)
        from dspy.lm15 import Usage

        call = _CALL.get()
        key = _request_key(request, call)
        with self._lock:
            if call is not None and call.get("repeat") is not None:  # n > 1: the call is one cache entry
                repeat = call["repeat"]
            else:
                repeat = key is not None and key in self._seen
                if key is not None:
                    self._seen.add(key)
                if call is not None:
                    call["repeat"] = repeat
        if not repeat:
            return super().complete(request)
        from ragzoo.tracing import mark_cache_hit

        mark_cache_hit()  # recorded as served from the cache, as DSPy's would serve it
        _, text = self._reply(request)
        return self._response(text, Usage())  # nothing reported, as a cache hit

    @staticmethod
    def _respond(context: CallContext) -> dict[str, Any]:
        return placeholder_outputs(context.signature)

    def dump_state(self) -> dict:
        return {"priced_model": self.priced_model}

    @classmethod
    def load_state(cls, state: dict) -> "DryRunEngine":
        return cls(state.get("priced_model", DEFAULT_PRICED_MODEL))


# The options of the LM call under way that DSPy keeps out of the engine's request but puts in its cache key
# (`rollout_id`, `cache`), set by `dry_run_call` around each call of a `ragzoo.usage.TrackedLM`.
_CALL: "contextvars.ContextVar[dict | None]" = contextvars.ContextVar("ragzoo_dry_run_call", default=None)


def dry_run_call(lm, kwargs: dict):
    """Around one call of `lm`: let a cache-modelling dry-run engine see the call's `rollout_id` and `cache`
    option (SIMBA and bootstrap rounds vary `rollout_id` to get past DSPy's cache). A no-op for other LMs."""
    engine = getattr(lm, "engine", None)
    if not isinstance(engine, DryRunEngine) or not engine.model_cache:
        return contextlib.nullcontext()
    options = {**(getattr(lm, "kwargs", None) or {}), **kwargs}
    return _call_scope({"rollout_id": options.get("rollout_id"), "cache": options.get("cache", True) is not False,
                        "repeat": None})


@contextlib.contextmanager
def _call_scope(call: dict):
    token = _CALL.set(call)
    try:
        yield
    finally:
        _CALL.reset(token)


def _request_key(request, call: dict | None) -> str | None:
    """DSPy's cache key of a request, as a string (None: the call bypasses the cache, never a hit)."""
    import json

    from dspy._vendor.lm15.serde import request_to_dict

    if call is not None and not call["cache"]:
        return None
    body = request_to_dict(request)
    return json.dumps([body, call["rollout_id"] if call is not None else None], sort_keys=True, default=str)


def dry_run_metric(metric):
    """`metric`, except that under the dry-run LM every prediction passes. A real compile with a capable
    model bootstraps demos (a passing trace becomes a demo of every predictor it went through) and every
    later prompt carries them; placeholder answers would fail the metric, no demo would be bootstrapped, and
    the estimate would miss both the demos and the calls spent finding them. Passing every trace models
    the compile of a model that gets the training questions right: the same optimizer steps, the same
    demos, the same prompts (within 1% of a scripted compile for bootstrap, random search and MIPRO)."""
    import functools

    import dspy

    from ragzoo.metrics.scoring import resolve_metric

    name, function = resolve_metric(metric)

    @functools.wraps(function)
    def passes_under_dry_run(example, prediction, trace=None, *args, **kwargs):
        if is_dry_run(dspy.settings.lm):
            return True
        return function(example, prediction, trace, *args, **kwargs)

    passes_under_dry_run.__name__ = name
    return passes_under_dry_run


def is_dry_run(lm) -> bool:
    return isinstance(getattr(lm, "engine", None), DryRunEngine)


def is_dry_run_spec(spec) -> bool:
    """True for an LM spec that asks for the dry-run LM (`dry-run`, `dry-run:<priced-model>`)."""
    return isinstance(spec, str) and (spec.strip() == DRY_RUN or spec.strip().startswith((DRY_RUN + ":", DRY_RUN + "/")))
