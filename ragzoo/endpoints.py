"""LM endpoints: one concurrency limit per endpoint shared by the whole process, the endpoint in the
response-cache key, and pre-flight checks before anything is spent.

- **Endpoint**: the `--api-base` URL (scheme, host, port, path; no credentials) or, without one, the
  provider prefix of the model string (`openai`, `anthropic`, ...). Two LMs, threads or runs that talk to
  the same endpoint share one limiter.
- **Concurrency** (`set_max_concurrency(endpoint, n)`, `--max-concurrency`): at most n requests in flight
  per endpoint, across every thread and every run of the process; more wait for a slot (in arrival
  order). Calls that hit a 429 still back off as DSPy does (exponential, or the server's Retry-After);
  with the limit at the server's capacity no 429 is provoked at all.
- **Cache key**: DSPy's response cache leaves `api_base` out of its key, so the same model name on two
  servers would share answers. An LM with a `cache_namespace` (set by `ragzoo.lm.make_lm` to the endpoint
  unless `cache_namespace=False`) gets it added to every cache key (`install_cache_namespace`, a small
  wrapper around `dspy.clients.execution.PreparedCall.key`; LMs without the attribute keep DSPy's key).
- **Pre-flight** (`preflight(lm)`): the provider's key is in the environment (for providers whose key
  variable is known), and a server given by `--api-base` answers `GET /models`; failures are one line
  (`ragzoo.errors.LMError`) before any example runs.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from ragzoo.errors import ConfigError, LMError

DEFAULT_MAX_CONCURRENCY = 8
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
                 "groq": "GROQ_API_KEY", "together_ai": "TOGETHERAI_API_KEY", "mistral": "MISTRAL_API_KEY",
                 "deepseek": "DEEPSEEK_API_KEY", "fireworks_ai": "FIREWORKS_API_KEY",
                 "openrouter": "OPENROUTER_API_KEY", "cohere": "COHERE_API_KEY"}


def endpoint_of(lm) -> str:
    """The endpoint an LM talks to (no credentials, ever)."""
    explicit = getattr(lm, "endpoint", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    kwargs = getattr(lm, "kwargs", {}) or {}
    base = kwargs.get("api_base") or kwargs.get("base_url")
    if base:
        parts = urlsplit(str(base))
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    model = str(getattr(lm, "model", "") or "")
    return model.split("/", 1)[0] if "/" in model else model


# ---------------------------------------------------------------------------------------------------------
# Concurrency


class EndpointLimiter:
    """At most `limit` holders at once (None = no limit); the limit may change while held."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.in_flight = 0
        self.max_in_flight = 0
        self.waited = 0
        self._condition = threading.Condition()

    def set_limit(self, limit: int | None) -> None:
        with self._condition:
            self.limit = limit
            self._condition.notify_all()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._condition:
            if self.limit is not None and self.in_flight >= self.limit:
                self.waited += 1
            while self.limit is not None and self.in_flight >= self.limit:
                self._condition.wait()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._condition:
                self.in_flight -= 1
                self._condition.notify()


_LIMITERS: dict[str, EndpointLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def check_max_concurrency(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--max-concurrency must be a positive integer, got {value!r}")
    return value


def limiter(endpoint: str) -> EndpointLimiter:
    with _LIMITERS_LOCK:
        found = _LIMITERS.get(endpoint)
        if found is None:
            found = _LIMITERS[endpoint] = EndpointLimiter(None)
        return found


def set_max_concurrency(endpoint: str, limit: int | None) -> EndpointLimiter:
    """Set the process-wide limit of `endpoint` (None = unlimited); returns its limiter."""
    found = limiter(endpoint)
    found.set_limit(check_max_concurrency(limit))
    return found


@contextmanager
def endpoint_slot(lm) -> Iterator[None]:
    """Hold one request slot of `lm`'s endpoint (no wait when the endpoint has no limit)."""
    with limiter(endpoint_of(lm)).slot():
        yield


# ---------------------------------------------------------------------------------------------------------
# Cache namespace

_installed = False


def install_cache_namespace() -> None:
    """Make `lm.cache_namespace` part of DSPy's response-cache key (idempotent)."""
    global _installed
    if _installed:
        return
    from dspy.clients import execution

    original = execution.PreparedCall.key

    def key(self, lm, asynchronous):
        value = original(self, lm, asynchronous)
        namespace = getattr(lm, "cache_namespace", None)
        if namespace and isinstance(value, dict):
            value = {**value, "ragzoo_endpoint": namespace}
        return value

    key.__wrapped__ = original
    execution.PreparedCall.key = key
    _installed = True


# ---------------------------------------------------------------------------------------------------------
# Pre-flight


def preflight(lm, *, timeout: float = 5.0) -> None:
    """One-line `LMError` if the LM cannot work: no key for a provider that needs one, or a server that does
    not answer `GET <api_base>/models`. Dry-run and custom-engine LMs pass."""
    import json
    import urllib.error
    import urllib.request

    from ragzoo.engines import is_dry_run

    if is_dry_run(lm) or not isinstance(getattr(lm, "engine", "auto"), str):
        return
    kwargs = getattr(lm, "kwargs", {}) or {}
    base = kwargs.get("api_base") or kwargs.get("base_url")
    provider = str(getattr(lm, "model", "")).split("/", 1)[0]
    if not base:
        variable = KEY_VARIABLES.get(provider)
        if variable and not os.environ.get(variable) and not kwargs.get("api_key"):
            raise LMError(f"{variable} is not set; export it (the key is read from the environment only) or "
                          f"point --api-base at a server")
        return
    url = str(base).rstrip("/") + "/models"
    request = urllib.request.Request(url, method="GET")
    key = kwargs.get("api_key") or os.environ.get(KEY_VARIABLES.get(provider, ""), "")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    where = endpoint_of(lm)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's server
            body = response.read(1_000_000)
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise LMError(f"the LM server at {where} refused the key (HTTP {error.code}); check the key in the "
                          f"environment") from None
        if error.code == 404:
            return  # a server without /models (some proxies): nothing more to check here
        raise LMError(f"the LM server at {where} answered HTTP {error.code} to GET /models; is it up?") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise LMError(f"cannot reach the LM server at {where} ({reason}); start it or fix --api-base") from None
    try:
        listed = [item.get("id") for item in json.loads(body).get("data", []) if isinstance(item, dict)]
    except (ValueError, AttributeError):
        return
    model = str(getattr(lm, "model", "")).split("/", 1)[-1]
    if listed and model not in listed:
        import logging

        logging.getLogger(__name__).warning("the LM server at %s lists %s, not %s", where,
                                            ", ".join(map(str, listed[:5])), model)
