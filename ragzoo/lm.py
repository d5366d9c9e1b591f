"""LM construction from a spec string, the dry-run LM, and type-valid placeholder values.

`make_lm(spec, api_base=None, **kw)` builds a `dspy.LM` (a `TrackedLM`, see `ragzoo.usage`) from any
LiteLLM model string, or a dry-run LM from `dry-run` / `dry-run:<priced-model>`.

Choices:
- Keys come from the environment only (`OPENAI_API_KEY`, ...). A key-like keyword (`api_key`, `token`,
  ...) or a value that looks like a secret is refused with `ConfigError`, so a key never lands in shell
  history, manifests or run directories. With `api_base` and no `<PROVIDER>_API_KEY` in the environment,
  a placeholder key (`ragzoo-no-key`) is sent: local OpenAI-compatible servers (vLLM, llama.cpp, Ollama's
  /v1) ignore it, but the OpenAI clients refuse to start without one.
- Engine: DSPy 3.4's `engine="auto"` prefers its vendored lm15 client and falls back to LiteLLM for what
  lm15 cannot carry; `engine="litellm"` keeps LiteLLM. Both speak to OpenAI-compatible servers and both
  are tested against `ragzoo.stubserver`. We keep DSPy's default (`auto`): it has no import-time network
  access, honours `Retry-After`, and its error classes are what DSPy's retry loop understands. Pass
  `engine="litellm"` for providers or options only LiteLLM knows (the `hosted_vllm/` prefix is routed
  to LiteLLM by `auto` anyway).
- Defaults: temperature 0 (None for OpenAI reasoning models, which refuse other values), DSPy's response
  cache on (`cache=False` turns it off), `num_retries=3` (at most 10). DSPy owns retries and backs off
  exponentially (1 s, 2 s, 4 s, ... capped at 60 s) unless the server sends `Retry-After`.
- Dry-run: `dspy.LM("dry-run/<priced-model>", engine=DryRunEngine(...))`. Every predictor gets type-valid
  placeholders for its output fields through DSPy's real adapters; prompts are formatted and counted with
  tiktoken's cl100k encoding; cost is estimated from LiteLLM's price table for the priced model (default
  `openai/gpt-4o-mini`). The response cache is off by default so every call is counted.
- A field's placeholder can be chosen with `json_schema_extra={"dry_run": value}`. DSPy 3.4.1's
  `dspy.OutputField` drops a user `json_schema_extra`, so use `ragzoo.lm.OutputField` (a drop-in that
  keeps it) or `with_dry_run(field, value)`.
"""

from __future__ import annotations

import os

# LiteLLM (and DSPy's model metadata) fetch a price map from the network unless told to use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from ragzoo.engines import use_bundled_tiktoken  # noqa: E402

use_bundled_tiktoken()

import enum
import functools
import re
import types
import typing
from typing import Any, Literal, Union
from urllib.parse import urlsplit

import dspy

from ragzoo.engines import CallContext, FunctionEngine
from ragzoo.errors import ConfigError, LMError
from ragzoo.usage import TrackedLM, install_usage_tracking

DEFAULT_PRICED_MODEL = "openai/gpt-4o-mini"
DRY_RUN = "dry-run"
MAX_RETRIES = 10
PLACEHOLDER_KEY = "ragzoo-no-key"

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


class _KeepExtra(dict):
    """json_schema_extra that DSPy's field constructor fills instead of replacing."""


def OutputField(**kwargs) -> Any:  # noqa: N802 - mirrors dspy.OutputField
    """`dspy.OutputField` that keeps `json_schema_extra` (DSPy 3.4.1 drops it): e.g.
    `relevant: bool = OutputField(desc="...", json_schema_extra={"dry_run": True})`."""
    extra = kwargs.pop("json_schema_extra", None) or {}
    field = dspy.OutputField(**kwargs)
    field.json_schema_extra.update(extra)
    return field


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
    provider's; `ragzoo.usage` prices it from LiteLLM's table for `priced_model`.
    """

    model_name = "dry-run"

    def __init__(self, priced_model: str = DEFAULT_PRICED_MODEL):
        self.priced_model = priced_model
        super().__init__(self._respond)

    @staticmethod
    def _respond(context: CallContext) -> dict[str, Any]:
        return placeholder_outputs(context.signature)

    def dump_state(self) -> dict:
        return {"priced_model": self.priced_model}

    @classmethod
    def load_state(cls, state: dict) -> "DryRunEngine":
        return cls(state.get("priced_model", DEFAULT_PRICED_MODEL))


@functools.lru_cache(maxsize=256)
def _price_lookup(model: str) -> tuple[float, float] | None:
    # LiteLLM's lookup of an unpriced model is slow (it walks its provider list and prints): remember both
    # answers, so per-call cost accounting never repeats it.
    import litellm

    try:
        prompt_cost, completion_cost = litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
    except Exception:  # LiteLLM raises several types for an unknown model
        return None
    known = model in litellm.model_cost or model.split("/", 1)[-1] in litellm.model_cost
    if not known and not (prompt_cost or completion_cost):
        return None
    return float(prompt_cost), float(completion_cost)


def price_per_token(model: str) -> tuple[float, float]:
    """(input, output) USD per token from LiteLLM's bundled price table; ConfigError if not priced."""
    prices = _price_lookup(model)
    if prices is None:
        raise ConfigError(f"no price for model {model!r} in LiteLLM's price table; choose a priced model, "
                          f"e.g. dry-run:{DEFAULT_PRICED_MODEL}")
    return prices


def estimate_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    """USD for the tokens at LiteLLM's list price for `model` (0.0 if the model is not priced)."""
    try:
        prompt_price, completion_price = price_per_token(model)
    except ConfigError:
        return 0.0
    return prompt_tokens * prompt_price + completion_tokens * completion_price


def make_dry_run_lm(priced_model: str = DEFAULT_PRICED_MODEL, *, cache: bool = False,
                    callbacks: list | None = None) -> TrackedLM:
    """A dry-run LM whose cost estimates use `priced_model`'s list prices."""
    _check_model_string(priced_model, what="dry-run priced model")
    price_per_token(priced_model)  # fail now, with a clear line, if the model is not priced
    lm = TrackedLM(f"{DRY_RUN}/{priced_model}", engine=DryRunEngine(priced_model), cache=cache, num_retries=0,
                   temperature=None if _is_reasoning_model(priced_model) else 0.0, callbacks=callbacks)
    lm.priced_model = priced_model
    install_usage_tracking(lm)
    return lm


def is_dry_run(lm) -> bool:
    return isinstance(getattr(lm, "engine", None), DryRunEngine)


# ---------------------------------------------------------------------------------------------------------
# make_lm / describe_lm
# ---------------------------------------------------------------------------------------------------------

_SECRET_NAME = re.compile(r"(api[_-]?key|secret|token|password|passwd|credential|auth)", re.IGNORECASE)
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{12,}|hf_[A-Za-z0-9]{12,}|"
    r"xai-[A-Za-z0-9]{12,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+\S+|[A-Za-z0-9_\-]{40,})")
_ALLOWED_KWARGS = {"cache", "num_retries", "temperature", "max_tokens", "timeout", "engine", "model_type",
                   "top_p", "stop", "seed", "callbacks", "n", "rollout_id"}


def looks_like_secret(value: Any) -> bool:
    return isinstance(value, str) and bool(_SECRET_VALUE.search(value))


def _refuse_secrets(spec: str, api_base: str | None, kwargs: dict) -> None:
    for name, value in kwargs.items():
        if _SECRET_NAME.search(name) and name != "max_tokens":
            raise ConfigError(f"LM option {name!r} looks like a credential; set it in the environment "
                              f"(e.g. OPENAI_API_KEY) instead of passing it to ragzoo")
        if looks_like_secret(value):
            raise ConfigError(f"LM option {name!r} looks like a secret key; keys are read from the environment "
                              f"only (e.g. OPENAI_API_KEY)")
    if looks_like_secret(spec):
        raise ConfigError("the LM spec looks like it contains a secret key; pass only the model name "
                          "(e.g. openai/gpt-4o-mini) and set the key in the environment (e.g. OPENAI_API_KEY)")
    if api_base:
        parts = urlsplit(api_base)
        if parts.username or parts.password or looks_like_secret(parts.query) or _SECRET_NAME.search(parts.query):
            raise ConfigError("the --api-base URL carries credentials; give the bare server URL and set the key "
                              "in the environment")


def _check_model_string(model: str, what: str = "LM spec") -> None:
    provider, slash, name = model.partition("/")
    if not slash or not provider or not name.strip() or " " in model:
        raise ConfigError(f"{what} {model!r} needs a LiteLLM provider prefix, e.g. openai/gpt-4o-mini, "
                          f"ollama_chat/llama3.1, hosted_vllm/<model>, or 'dry-run'")


def _is_reasoning_model(model: str) -> bool:
    from dspy.clients.lm import _is_openai_reasoning_model

    return _is_openai_reasoning_model(model)


def make_lm(spec: str, api_base: str | None = None, **kw: Any) -> dspy.LM:
    """Build a `dspy.LM` from a spec: a LiteLLM model string (`openai/gpt-4o-mini`, `ollama_chat/llama3.1`,
    `hosted_vllm/<model>`) or `dry-run` / `dry-run:<priced-model>`.

    `api_base` points at an OpenAI-compatible server. Options: `cache` (default True; False for dry-run),
    `num_retries` (default 3, 0..10), `temperature` (default 0), `max_tokens`, `timeout`, `engine`
    ("auto" default, or "litellm"), `model_type`, and sampling options. Keys only from the environment.
    Usage tracking is attached (see `ragzoo.usage`), so `trace_example()` sees every call.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("empty LM spec; give a LiteLLM model string such as openai/gpt-4o-mini, or 'dry-run'")
    spec = spec.strip()
    _refuse_secrets(spec, api_base, kw)
    unknown = sorted(set(kw) - _ALLOWED_KWARGS)
    if unknown:
        raise ConfigError(f"unknown LM option(s) {unknown}; known: {sorted(_ALLOWED_KWARGS)}")
    num_retries = kw.pop("num_retries", 3)
    if isinstance(num_retries, bool) or not isinstance(num_retries, int) or not 0 <= num_retries <= MAX_RETRIES:
        raise ConfigError(f"num_retries must be an integer from 0 to {MAX_RETRIES}, got {num_retries!r}")

    if spec == DRY_RUN or spec.startswith(DRY_RUN + ":") or spec.startswith(DRY_RUN + "/"):
        priced = spec[len(DRY_RUN) + 1:] or DEFAULT_PRICED_MODEL
        if api_base:
            raise ConfigError("dry-run calls no server; drop --api-base or choose a real LM spec")
        extra = sorted(set(kw) - {"cache", "callbacks", "temperature", "max_tokens"})
        if extra:
            raise ConfigError(f"option(s) {extra} do not apply to the dry-run LM")
        return make_dry_run_lm(priced, cache=kw.get("cache", False), callbacks=kw.get("callbacks"))

    _check_model_string(spec)
    engine = kw.pop("engine", "auto")
    if engine not in ("auto", "litellm", "lm15"):
        raise ConfigError(f"engine must be 'auto', 'litellm' or 'lm15', got {engine!r}")
    options: dict[str, Any] = {"temperature": None if _is_reasoning_model(spec) else 0.0, "cache": True}
    options.update(kw)
    if api_base:
        parts = urlsplit(api_base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--api-base must be an http(s) URL such as http://127.0.0.1:8000/v1, got {api_base!r}")
        options["api_base"] = api_base.rstrip("/")
        provider = spec.split("/", 1)[0].upper()
        if not os.environ.get(f"{provider}_API_KEY"):
            options["api_key"] = PLACEHOLDER_KEY
    try:
        lm = TrackedLM(spec, engine=engine, num_retries=num_retries, **options)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot build LM {spec!r}: {exc}") from exc
    except Exception as exc:  # DSPy's LMConfigurationError and friends
        raise LMError(f"cannot build LM {spec!r}: {exc}") from exc
    install_usage_tracking(lm)
    return lm


_MASK = "***"


def _mask(name: str, value: Any) -> Any:
    if _SECRET_NAME.search(name) and name not in ("max_tokens", "max_completion_tokens"):
        return _MASK if value else value
    if isinstance(value, dict):
        return {key: _mask(str(key), item) for key, item in value.items()}
    if looks_like_secret(value):
        return _MASK
    return value


def _host_only(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def describe_lm(lm) -> dict[str, Any]:
    """What a manifest records about an LM: model, engine, api_base host, options; no secret, ever."""
    kwargs = dict(getattr(lm, "kwargs", {}) or {})
    api_base = kwargs.pop("api_base", None) or kwargs.pop("base_url", None)
    kwargs.pop("base_url", None)
    safe = {name: _mask(name, value) for name, value in kwargs.items() if value is not None}
    engine = getattr(lm, "engine", "auto")
    description = {
        "model": getattr(lm, "model", type(lm).__name__),
        "dry_run": is_dry_run(lm),
        "engine": engine if isinstance(engine, str) else type(engine).__name__,
        "api_base": _host_only(api_base),
        "cache": getattr(lm, "cache", None),
        "num_retries": getattr(lm, "num_retries", None),
        "kwargs": safe,
    }
    priced = getattr(lm, "priced_model", None)
    if priced:
        description["priced_model"] = priced
    return description
