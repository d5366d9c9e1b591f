"""LM construction from a spec string: real LMs through LiteLLM model strings, and the dry-run LM.

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
  cache on (`cache=False` turns it off), `num_retries=3` (at most 10), `timeout=120` s per request.
  DSPy retries server errors and backs off exponentially (1 s, 2 s, 4 s, ... capped at 60 s) unless the
  server sends `Retry-After`, which it honours. A 429 is not one of DSPy's `num_retries`: `ragzoo.endpoints`
  retries it, with the same back-off, until the question's deadline and lowers the endpoint's limit.
- Endpoints (`ragzoo.endpoints`): `max_concurrency` (default 8) requests in flight per endpoint, shared by
  every LM, thread and run of the process; the endpoint is part of the response-cache key unless
  `cache_namespace=False`; `price="IN,OUT"` (USD per million tokens) prices a model LiteLLM does not know,
  so `--max-cost` can bind (a cost budget on an unpriced model is refused); `price_per_hour=USD` prices a
  server rented by the hour: a metered run costs its wall time x the rate, reported apart from the token
  cost (`server_cost`), and `--max-cost` binds on the sum.
- Dry-run: `dspy.LM("dry-run/<priced-model>", engine=DryRunEngine(...))`. Every predictor gets type-valid
  placeholders for its output fields through DSPy's real adapters; prompts are formatted and counted with
  tiktoken's cl100k encoding; cost is estimated from LiteLLM's price table for the priced model (default
  `openai/gpt-4o-mini`). The response cache is off by default so every call is counted.
  The engine, its placeholders and their hints live in `ragzoo.engines`; usage and pricing in
  `ragzoo.usage`.
- Nothing happens at import. `make_lm` tells LiteLLM to use its bundled price table (offline, fetching one
  waits for a network timeout) unless the user set `LITELLM_LOCAL_MODEL_COST_MAP` themselves.
- CPU per call (an evaluation against a fast server is bound by it): `make_lm` also installs, once, shortcuts
  in DSPy with the same results: its model-price lookup memoised (`ragzoo.usage.memoize_price_metadata`), the
  proxy variables read again only when the environment changed (`_memoize_env_proxies`), plain strings (and
  lists of them) formatted into prompts without a pydantic TypeAdapter each (`_plain_text_serialization`), a
  signature's system message built once per adapter class (`_memoize_system_messages`), a model string's route
  resolved once (`_memoize_backend_resolution`), a plain-text request's pre-flight plan kept per shape
  (`_memoize_request_plans`). tests/lm/test_lm_dspy_shortcuts.py: the requests sent are the same without them.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlsplit

import dspy

from ragzoo.engines import DEFAULT_PRICED_MODEL, DRY_RUN, DryRunEngine, is_dry_run, is_dry_run_spec
from ragzoo.errors import ConfigError, LMError
from ragzoo.secrets import carries_credentials, is_secret_name, looks_like_secret, masked
from ragzoo.usage import TrackedLM, check_price_per_hour, price_per_token, use_local_price_map

__all__ = ["DEFAULT_PRICED_MODEL", "DRY_RUN", "configure", "describe_lm", "is_dry_run", "make_dry_run_lm",
           "make_lm"]

MAX_RETRIES = 10
PLACEHOLDER_KEY = "ragzoo-no-key"


def make_dry_run_lm(priced_model: str = DEFAULT_PRICED_MODEL, *, cache: bool = False,
                    callbacks: list | None = None) -> TrackedLM:
    """A dry-run LM whose cost estimates use `priced_model`'s list prices."""
    _check_model_string(priced_model, what="dry-run priced model")
    price_per_token(priced_model)  # fail now, with a clear line, if the model is not priced
    lm = TrackedLM(f"{DRY_RUN}/{priced_model}", engine=DryRunEngine(priced_model), cache=cache, num_retries=0,
                   temperature=None if _is_reasoning_model(priced_model) else 0.0, callbacks=callbacks)
    lm.priced_model = priced_model
    return lm


# ---------------------------------------------------------------------------------------------------------
# make_lm / describe_lm
# ---------------------------------------------------------------------------------------------------------

_ALLOWED_KWARGS = {"cache", "num_retries", "temperature", "max_tokens", "timeout", "engine", "model_type",
                   "top_p", "stop", "seed", "callbacks", "n", "rollout_id", "max_concurrency", "cache_namespace",
                   "price", "price_per_hour"}
DEFAULT_TIMEOUT = 120.0  # seconds per LM request (each retry gets its own); a hung server cannot hang a run


def parse_price(price) -> tuple[float, float] | None:
    """A price for an unpriced model: "IN,OUT" USD per million prompt / completion tokens (or a pair), as USD per
    token; read by `ragzoo.config.parse_price`, the one reader of --price."""
    from ragzoo.config import parse_price as read_price

    return read_price(price)


def _refuse_secrets(spec: str, api_base: str | None, kwargs: dict) -> None:
    for name, value in kwargs.items():
        if is_secret_name(name):
            raise ConfigError(f"LM option {name!r} looks like a credential; set it in the environment "
                              f"(e.g. OPENAI_API_KEY) instead of passing it to ragzoo")
        if looks_like_secret(value, strict=True):
            raise ConfigError(f"LM option {name!r} looks like a secret key; keys are read from the environment "
                              f"only (e.g. OPENAI_API_KEY)")
    if looks_like_secret(spec, strict=True):
        raise ConfigError("the LM spec looks like it contains a secret key; pass only the model name "
                          "(e.g. openai/gpt-4o-mini) and set the key in the environment (e.g. OPENAI_API_KEY)")
    if api_base and carries_credentials(api_base):
        raise ConfigError("the LM's api_base URL carries credentials; give the bare server URL and set the key "
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
    use_local_price_map()
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

    if is_dry_run_spec(spec):
        priced = spec[len(DRY_RUN) + 1:] or DEFAULT_PRICED_MODEL
        if api_base:
            raise ConfigError("dry-run calls no server; drop --api-base or choose a real LM spec")
        extra = sorted(set(kw) - {"cache", "callbacks", "temperature", "max_tokens"})
        if extra:
            raise ConfigError(f"option(s) {extra} do not apply to the dry-run LM")
        return make_dry_run_lm(priced, cache=kw.get("cache", False), callbacks=kw.get("callbacks"))

    from ragzoo.endpoints import DEFAULT_MAX_CONCURRENCY, check_max_concurrency, endpoint_of, \
        install_cache_namespace, install_cache_redaction, limiter, set_max_concurrency

    asked_concurrency = "max_concurrency" in kw  # or the default, which never lowers nor raises a limit in force
    max_concurrency = check_max_concurrency(kw.pop("max_concurrency", DEFAULT_MAX_CONCURRENCY))
    namespaced = kw.pop("cache_namespace", True)
    price = parse_price(kw.pop("price", None))
    price_per_hour = check_price_per_hour(kw.pop("price_per_hour", None))
    _check_model_string(spec)
    kw.setdefault("timeout", DEFAULT_TIMEOUT)
    timeout = kw["timeout"]
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"--timeout must be a positive number of seconds, got {timeout!r}")
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
    from ragzoo.usage import _price_lookup

    _price_lookup(spec)  # reads LiteLLM's price table file now, not inside the first example's deadline
    lm.endpoint = endpoint_of(lm)
    in_force = limiter(lm.endpoint)
    if asked_concurrency or not in_force.configured:  # a second LM of the endpoint (a judge) keeps its limit
        set_max_concurrency(lm.endpoint, max_concurrency)
    lm.max_concurrency = in_force.limit
    if price is not None:
        lm.price = price
    if price_per_hour is not None:
        lm.price_per_hour = price_per_hour  # metering() adds wall time x rate; --max-cost binds on it
    install_cache_redaction()  # an upstream's answers are kept on disk by DSPy's cache: never a key in them
    from ragzoo.usage import install_cache_hit_marks

    install_cache_hit_marks()  # a reply without `usage` is then told from a cache hit with the cache on too
    if namespaced:
        install_cache_namespace()
        lm.cache_namespace = lm.endpoint
    from ragzoo.usage import memoize_price_metadata

    memoize_price_metadata()  # DSPy prices each call from its model table: a full scan for unknown models
    _memoize_env_proxies()
    _plain_text_serialization()
    _memoize_system_messages()
    _memoize_backend_resolution()
    _memoize_request_plans()
    return lm


_INSTALL_LOCK = threading.Lock()


def _plain_text_serialization() -> bool:
    """DSPy's adapters put every input value of a prompt through `dspy.adapters.utils.serialize_for_json`, which
    builds a pydantic TypeAdapter for the value's type each time (~6% of ragzoo's CPU per LM call for plain
    strings, whose JSON-ready form is themselves, and ~5% more for a list of passages): a `str` is returned as it
    is, a list or tuple of `str` as a list of them (pydantic's JSON form of both), any other value (a str
    subclass, a list holding one, included) goes to DSPy's function. Idempotent; True if installed."""
    try:
        from dspy.adapters import utils
    except ImportError:
        return False
    with _INSTALL_LOCK:
        current = getattr(utils, "serialize_for_json", None)
        if current is None or getattr(current, "_ragzoo_plain_text", False):
            return current is not None

        def serialize_for_json(value):
            kind = type(value)
            if kind is str:
                return value
            if (kind is list or kind is tuple) and all(type(item) is str for item in value):
                return list(value)
            return current(value)

        serialize_for_json._ragzoo_plain_text = True
        serialize_for_json.__wrapped__ = current
        serialize_for_json.__doc__ = current.__doc__
        utils.serialize_for_json = serialize_for_json
        return True


_SYSTEM_MESSAGE_PARTS = ("format_field_description", "format_field_structure", "format_task_description",
                         "format_field_with_value")


def _memoize_system_messages() -> bool:
    """DSPy's adapters build the system message of a signature (its fields' descriptions and structure, its
    instructions) again for every call (~5% of ragzoo's CPU per LM call): keep it per signature class, adapter
    class and instructions (a signature's instructions may be set in place; its fields are fixed when the class is
    made). Only for an adapter whose parts of that message are all DSPy's own (`dspy.adapters`: they read nothing
    but the signature); an adapter that formats any part its own way builds it every time, as before. Idempotent;
    True if installed."""
    import weakref

    try:
        from dspy.adapters.base import Adapter
    except ImportError:
        return False
    with _INSTALL_LOCK:
        current = Adapter.__dict__.get("format_system_message")
        if current is None or getattr(current, "_ragzoo_memo", False):
            return current is not None
        memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # signature class -> {(adapter class, doc)}
        lock = threading.Lock()

        def dspy_parts(adapter) -> bool:
            cls = type(adapter)
            return all(getattr(getattr(cls, name, None), "__module__", "").startswith("dspy.adapters")
                       and name not in getattr(adapter, "__dict__", ()) for name in _SYSTEM_MESSAGE_PARTS)

        def format_system_message(self, signature):
            if not dspy_parts(self):
                return current(self, signature)
            key = (type(self), signature.__doc__)
            try:
                with lock:
                    text = memo.get(signature, {}).get(key)
            except TypeError:  # a signature that is not a class (cannot be weakly referenced): as DSPy does
                return current(self, signature)
            if text is None:
                text = current(self, signature)
                with lock:
                    memo.setdefault(signature, {})[key] = text
            return text

        format_system_message._ragzoo_memo = True
        format_system_message.__wrapped__ = current
        format_system_message.__doc__ = current.__doc__
        Adapter.format_system_message = format_system_message
        return True


def _memoize_backend_resolution() -> bool:
    """DSPy resolves the model string of every call twice by building an lm15 engine and its router for it: to
    pick the call's engine (`dspy.clients.backend_selection.select_backend`) and to price its reply
    (`dspy.clients.capabilities.resolve`), ~4% of ragzoo's CPU per LM call. That resolution is offline routing, a
    function of the model string, model type and the providers the LM bound at construction (the router gets an
    empty environment): it is kept per those, and the rest of the selection (client options, environment
    variables) is still done for every call. Idempotent; True if installed."""
    import dataclasses

    try:
        from dspy.clients import backend_selection, capabilities
        from dspy.lm15 import RouterConfig, _definitions
    except ImportError:
        return False
    with _INSTALL_LOCK:
        engine = getattr(backend_selection, "LM15Engine", None)
        if engine is None or getattr(engine, "_ragzoo_memo", False):
            return engine is not None
        resolved: dict = {}  # (model, model type, providers) -> its frozen lm15 Resolution
        # the config both build: no environment, the LM's providers, every other field its default
        template = RouterConfig(env={})
        fields = [field.name for field in dataclasses.fields(RouterConfig) if field.name != "providers"]

        def memoised(model, model_type, providers, config_of):
            try:
                key = (model, model_type, providers) if type(model) is str else None
                found = resolved.get(key) if key is not None else None
            except TypeError:  # unhashable providers: as DSPy does
                key, found = None, None
            if found is None:
                found = engine(config_of(), model_type=model_type).resolve(model)
                if key is not None and len(resolved) < 1024:
                    resolved[key] = found
            return found

        class ResolvingEngine(engine):
            """What `select_backend` builds to resolve a model: the resolution memoised, no router built."""

            _ragzoo_memo = True
            __wrapped__ = engine

            def __init__(self, config=None, *, model_type="chat"):  # noqa: D107 - no router: see resolve
                self._resolve_config, self.model_type = config, model_type

            def resolve(self, model: str):
                config = self._resolve_config
                if config is None or not all(getattr(config, name) == getattr(template, name) for name in fields):
                    return engine(config, model_type=self.model_type).resolve(model)  # another config: as DSPy
                return memoised(model, self.model_type, config.providers, lambda: config)

        original_resolve = capabilities.resolve

        def resolve(lm):
            providers = _definitions(getattr(lm, "_providers", ()))
            return memoised(lm.model, lm.model_type, providers, lambda: RouterConfig(env={}, providers=providers))

        resolve.__wrapped__ = original_resolve
        resolve._ragzoo_memo = True
        backend_selection.LM15Engine = ResolvingEngine
        capabilities.resolve = resolve
        return True


def _plan_shape(request):
    """What DSPy's pre-flight `plan` of an lm15 request can depend on, or None when the request is not plain text
    (another part than text, a continuation, tools, an unhashable config option, text with no UTF-8 form)."""
    from dspy._vendor.lm15.types import TextPart

    system = request.system
    if request.tools or not (system is None or type(system) is str):
        return None
    texts = [system or ""]
    messages = []
    for message in request.messages:
        if message.continuation:
            return None
        parts = []
        for part in message.parts:
            if type(part) is not TextPart or part.continuation:
                return None
            texts.append(part.text)
            parts.append(bool(part.text))
        messages.append((message.role, tuple(parts)))
    try:
        for text in texts:
            if not text.isascii():
                text.encode("utf-8")  # a lone surrogate: planned (and refused) as DSPy does
    except UnicodeEncodeError:
        return None
    key = (request.model, system is None, bool(system), request.config, tuple(messages))
    hash(key)  # TypeError for an unhashable config option
    return key


def _memoize_request_plans() -> bool:
    """DSPy's default engine ("auto") plans every request before sending it (`LM15Engine.plan`: the whole wire
    request built, JSON included, and thrown away, ~10% of ragzoo's CPU per LM call) to fall back to LiteLLM
    before any I/O if lm15 would refuse it. The verdict depends on the request's model, options and the kinds of
    its parts, not on its words: a plan that passed is kept per engine for requests of plain text with the same
    model, options, roles and empty/non-empty parts (`_plan_shape`); a refusal is never kept (planned again each
    time), any other request is planned as before. Idempotent; True if installed."""
    try:
        from dspy.clients.engines import lm15_engine
    except ImportError:
        return False
    with _INSTALL_LOCK:
        routing = getattr(lm15_engine, "_Routing", None)
        current = getattr(routing, "plan", None)
        if current is None or getattr(current, "_ragzoo_memo", False):
            return current is not None

        def plan(self, request):
            try:
                key = _plan_shape(request)
            except (TypeError, AttributeError):
                key = None
            planned = self.__dict__.setdefault("_ragzoo_plans", {}) if key is not None else None
            if key is not None and key in planned and not self._closed:
                return planned[key]
            adaptations = current(self, request)
            if key is not None and len(planned) < 256:
                planned[key] = adaptations
            return adaptations

        plan._ragzoo_memo = True
        plan.__wrapped__ = current
        plan.__doc__ = current.__doc__
        routing.plan = plan
        return True


def _memoize_env_proxies() -> bool:
    """DSPy's HTTP client (lm15) reads the proxy variables (HTTP_PROXY, NO_PROXY, ...) before every request, as
    every HTTP client should, by decoding the whole environment twice (~6% of ragzoo's CPU per LM call): read
    them again only once the environment changed (`ragzoo.secrets.environ_memo`). Only where the proxies come
    from the environment alone (not macOS or Windows system settings). Idempotent; True if installed."""
    import urllib.request

    try:
        from dspy._vendor.lm15.transports import _proxy
    except ImportError:
        return False
    with _INSTALL_LOCK:
        current = getattr(_proxy, "getproxies", None)
        if getattr(current, "_ragzoo_memo", False):
            return True
        if current is not urllib.request.getproxies_environment:
            return False
        from ragzoo.secrets import environ_memo

        read = environ_memo(current)

        def getproxies() -> dict:
            return dict(read())  # a copy, as each call made one

        getproxies._ragzoo_memo = True
        getproxies.__wrapped__ = current
        _proxy.getproxies = getproxies
        return True


def configure(lm=None, *, adapter: str | None = None, max_reasks: int | None = None, **settings: Any) -> None:
    """`dspy.configure` as the CLI runs programs: `lm` (a `dspy.LM`, or a spec for `make_lm`) under ragzoo's
    lenient adapter (`adapter`: "chat" default, "json", "xml", "two-step"; `max_reasks` default 2), so a reply
    that slips its format is read or re-asked instead of failing the question. Without `adapter`, a program
    from `ragzoo.load` runs under the adapter it was compiled with. Other `settings` go to `dspy.configure`."""
    from ragzoo.adapters import DEFAULT_MAX_REASKS, default_adapter, make_adapter

    if isinstance(lm, str):
        lm = make_lm(lm)
    elif lm is not None and not isinstance(lm, dspy.BaseLM):
        raise ConfigError(f"lm must be a dspy LM or a spec such as 'openai/gpt-4o-mini', got {type(lm).__name__}")
    reasks = DEFAULT_MAX_REASKS if max_reasks is None else max_reasks
    chosen = default_adapter(max_reasks=reasks) if adapter is None else make_adapter(adapter, max_reasks=reasks)
    if lm is not None:
        settings["lm"] = lm
    dspy.configure(adapter=chosen, **settings)


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
    safe = {name: masked(name, value) for name, value in kwargs.items() if value is not None}
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
    if getattr(lm, "max_concurrency", None):
        description["max_concurrency"] = lm.max_concurrency
    if getattr(lm, "price", None):
        description["price_per_million"] = [round(p * 1e6, 6) for p in lm.price]
    if getattr(lm, "price_per_hour", None):
        description["price_per_hour"] = lm.price_per_hour
    description["cache_namespace"] = bool(getattr(lm, "cache_namespace", None))
    return description
