"""The usage meter: every LM call counted once, priced by one rule, and stopped by one budget.

How it works:
- `UsageCallback` is the one DSPy callback ragzoo installs (`USAGE_CALLBACK`, a singleton). At the start of
  a call it notes the time and the calling predictor (`caller_name`, named as `ragzoo.engines` names it);
  at the end it finds the call's own history entry (the entry whose `outputs` is the object the call
  returned, so concurrent calls never mix) and turns the call into one `ragzoo.tracing.LMCallRecord`. That
  record goes to the current example's trace (`ragzoo.tracing.record_lm_call`), to the calling LM's running
  totals (`lm.usage` on LMs built by `ragzoo.lm.make_lm`), and to every open meter (`metering()`).
  An LM that keeps no history (a custom `BaseLM`) is measured on the text: tokens counted with
  `ragzoo.engines.approx_tokens`, the same counter the dry-run LM uses.
- The callback may be reachable twice for one call (on the LM and in `dspy.settings.callbacks`); it
  records a call id once.
- One pricing rule (`call_cost`): an LM with a `priced_model` (the dry-run LM) is priced at that model's
  list price; otherwise the cost the provider reported (LiteLLM's `response_cost`); otherwise the LM's own
  model at LiteLLM's list price (0 when the model has no price). List prices come from LiteLLM's bundled price
  table read as a file (`price_table`), never by importing LiteLLM (~3.4 s of CPU a process); a user's `price` (`--price`) comes before
  the provider's report. A cost budget on a model with no price at all is refused (`ConfigError`). Cache hits cost nothing and spend no
  tokens (`cached=True`, `prompt_tokens == 0`); what they would have used is kept apart
  (`cached_prompt_tokens`, `cached_completion_tokens`, `cached_cost`, counted on the text), so a report
  shows spend and tokens-as-if-uncached separately.
- Concurrency: a `TrackedLM` call holds one request slot of its endpoint (`ragzoo.endpoints`), a limit
  shared by every thread and run of the process.
- One budget (`Budget`): DSPy swallows exceptions raised in callbacks, so a budget is enforced by the LM
  itself: `BudgetedCalls.__call__` reserves a call, and what it could cost (`estimate_call_cost`), on every
  open meter's budget before anything is sent and raises `ragzoo.errors.BudgetExceeded` once a budget cannot
  take it, so `--max-cost` is never passed; a call answered from the cache is given back. `TrackedLM` (what `make_lm` builds)
  has it; `metering()` swaps any other active LM for a budgeted copy of it. Calls are reserved under a
  lock, so `max_calls=N` allows exactly N calls across threads. Optimizers and evaluators may catch the
  error per example: look at `meter.budget.exceeded` after they return.
- Open meters live in DSPy's settings context, which DSPy's `ParallelExecutor` copies into its worker
  threads, so a meter opened around a compile or an evaluation sees the calls of every thread.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
from copy import deepcopy
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import dspy
from dspy.utils.callback import BaseCallback

from ragzoo.errors import BudgetExceeded, ConfigError
from ragzoo.tracing import LMCallRecord, mark_cache_hit, open_cache_mark, record_lm_call, texts_kept

_METERS_KEY = "ragzoo_meters"


# ---------------------------------------------------------------------------------------------------------
# Totals


class Usage:
    """Thread-safe running totals of LM calls: counts, tokens, cost, latency, and per predictor."""

    _COUNTS = ("lm_calls", "cached_calls", "failed_calls", "prompt_tokens", "completion_tokens",
               "cached_prompt_tokens", "cached_completion_tokens")

    def __init__(self, lm_calls: int = 0, prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0,
                 *, cached_calls: int = 0, failed_calls: int = 0, latency: float = 0.0,
                 by_signature: dict[str, dict[str, Any]] | None = None) -> None:
        self._lock = threading.Lock()
        self.lm_calls = lm_calls
        self.cached_calls = cached_calls
        self.failed_calls = failed_calls
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cost = cost
        self.latency = latency
        self.by_signature: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (by_signature or {}).items()}
        # what cache hits would have used and cost (they spent nothing): tokens/cost as if uncached are these
        # plus the spent ones
        self.cached_prompt_tokens = 0
        self.cached_completion_tokens = 0
        self.cached_cost = 0.0
        # a server rented by the hour (`--price-per-hour`): wall time x rate, kept apart from the token cost
        self.server_seconds = 0.0
        self.server_cost = 0.0
        self._refresh = None  # a meter's usage brings its server time up to now before it is read

    def _fresh(self) -> None:
        if self._refresh is not None:
            self._refresh()

    def add(self, record: LMCallRecord) -> None:
        with self._lock:
            self.lm_calls += 1
            self.cached_calls += int(record.cached)
            self.cached_prompt_tokens += record.cached_prompt_tokens
            self.cached_completion_tokens += record.cached_completion_tokens
            self.cached_cost += record.cached_cost
            self.prompt_tokens += record.prompt_tokens
            self.completion_tokens += record.completion_tokens
            self.cost += record.cost
            self.latency += record.latency
            per = self.by_signature.setdefault(record.signature, {"calls": 0, "prompt_tokens": 0,
                                                                  "completion_tokens": 0, "cost": 0.0})
            per["calls"] += 1
            per["prompt_tokens"] += record.prompt_tokens
            per["completion_tokens"] += record.completion_tokens
            per["cost"] += record.cost

    def add_failure(self) -> None:
        with self._lock:
            self.failed_calls += 1

    def merge(self, other: "Usage") -> None:
        """Add `other`'s totals to these."""
        snapshot = other.snapshot()
        with self._lock:
            for name in self._COUNTS:
                setattr(self, name, getattr(self, name) + getattr(snapshot, name))
            self.cost += snapshot.cost
            self.cached_cost += snapshot.cached_cost
            self.server_seconds += snapshot.server_seconds
            self.server_cost += snapshot.server_cost
            self.latency += snapshot.latency
            for name, theirs in snapshot.by_signature.items():
                mine = self.by_signature.setdefault(name, {"calls": 0, "prompt_tokens": 0,
                                                           "completion_tokens": 0, "cost": 0.0})
                for key, value in theirs.items():
                    mine[key] = mine.get(key, 0) + value

    def snapshot(self) -> "Usage":
        self._fresh()
        with self._lock:
            copy = Usage(self.lm_calls, self.prompt_tokens, self.completion_tokens, self.cost,
                         cached_calls=self.cached_calls, failed_calls=self.failed_calls, latency=self.latency,
                         by_signature=self.by_signature)
            copy.cached_prompt_tokens = self.cached_prompt_tokens
            copy.cached_completion_tokens = self.cached_completion_tokens
            copy.cached_cost = self.cached_cost
            copy.server_seconds = self.server_seconds
            copy.server_cost = self.server_cost
            return copy

    def minus(self, earlier: "Usage") -> "Usage":
        """What was added since the snapshot `earlier`."""
        now = self.snapshot()
        by_signature = {}
        for name, per in now.by_signature.items():
            before = earlier.by_signature.get(name, {})
            delta = {key: value - before.get(key, 0) for key, value in per.items()}
            if delta.get("calls"):
                by_signature[name] = delta
        delta = Usage(now.lm_calls - earlier.lm_calls, now.prompt_tokens - earlier.prompt_tokens,
                      now.completion_tokens - earlier.completion_tokens, now.cost - earlier.cost,
                      cached_calls=now.cached_calls - earlier.cached_calls,
                      failed_calls=now.failed_calls - earlier.failed_calls, latency=now.latency - earlier.latency,
                      by_signature=by_signature)
        delta.cached_prompt_tokens = now.cached_prompt_tokens - earlier.cached_prompt_tokens
        delta.cached_completion_tokens = now.cached_completion_tokens - earlier.cached_completion_tokens
        delta.cached_cost = now.cached_cost - earlier.cached_cost
        delta.server_seconds = now.server_seconds - earlier.server_seconds
        delta.server_cost = now.server_cost - earlier.server_cost
        return delta

    @classmethod
    def from_dict(cls, data: dict) -> "Usage":
        """The `Usage` whose `to_dict` is `data` (a checkpoint's spend): unknown or missing entries are 0."""
        usage = cls(by_signature={name: dict(per) for name, per in (data.get("by_signature") or {}).items()})
        for name in (*cls._COUNTS, "cost", "cached_cost", "latency", "server_seconds", "server_cost"):
            value = data.get(name) or 0
            setattr(usage, name, float(value) if isinstance(getattr(usage, name), float) else int(value))
        return usage

    def to_dict(self) -> dict[str, Any]:
        self._fresh()
        with self._lock:
            out = {"lm_calls": self.lm_calls, "cached_calls": self.cached_calls, "failed_calls": self.failed_calls,
                   "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                   "cost": self.cost, "cached_prompt_tokens": self.cached_prompt_tokens,
                   "cached_completion_tokens": self.cached_completion_tokens, "cached_cost": self.cached_cost,
                   "latency": round(self.latency, 4),
                   "by_signature": {name: dict(per) for name, per in self.by_signature.items()}}
            if self.server_seconds or self.server_cost:  # only under --price-per-hour: `cost` stays the tokens'
                out.update(server_seconds=round(self.server_seconds, 3), server_cost=self.server_cost,
                           total_cost=self.cost + self.server_cost)
            return out

    @property
    def total_cost(self) -> float:
        """Token cost plus the cost of a server rented by the hour (`--price-per-hour`)."""
        self._fresh()
        return self.cost + self.server_cost

    def __deepcopy__(self, memo) -> "Usage":
        return self.snapshot()

    def __repr__(self) -> str:
        return (f"Usage(lm_calls={self.lm_calls}, prompt_tokens={self.prompt_tokens}, "
                f"completion_tokens={self.completion_tokens}, cost={self.cost:.6f})")


@dataclass
class StageUsage:
    """Usage of one stage (compile, validation, ...) with its wall time."""

    stage: str
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        totals = self.usage.to_dict()
        totals.pop("by_signature")
        return {"stage": self.stage, **totals, "seconds": round(self.seconds, 3)}


# ---------------------------------------------------------------------------------------------------------
# Pricing


def use_local_price_map() -> None:
    """Make LiteLLM read its bundled price table instead of fetching one at import (offline, the fetch waits
    for a network timeout). Set before LiteLLM is first imported; a user's own setting wins."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


_PRICE_LOCK = threading.Lock()
_PRICE_TABLE: dict | None = None
_PRICE_KEYS_FOLDED: dict[str, str] = {}  # lower-cased key -> key: LiteLLM looks a name up case-insensitively too
PRICE_TABLE_FILE = "model_prices_and_context_window_backup.json"
_NOT_MODELS = {"sample_spec", "fallback_generalizations"}  # the table's field guide and its routing rules

# LiteLLM's own rule (litellm.utils._check_provider_match) for a name whose prefix is not the entry's provider
_PROVIDER_ALIASES = {"vertex_ai": lambda listed: listed.startswith("vertex_ai"),
                     "fireworks_ai": lambda listed: listed.startswith("fireworks_ai"),
                     "azure_ai": lambda listed: listed in ("azure", "openai"),
                     "litellm_proxy": lambda listed: True, "github": lambda listed: True,
                     "nadir": lambda listed: True}


def price_table() -> dict:
    """LiteLLM's bundled price table (the file LiteLLM itself reads under `LITELLM_LOCAL_MODEL_COST_MAP`), read
    once per process. Found and parsed without importing LiteLLM: the import alone costs ~3.4 s of CPU, paid by
    every ragzoo process that prices a model; reading the file costs ~0.04 s. {} if LiteLLM is not installed."""
    global _PRICE_TABLE
    if _PRICE_TABLE is None:
        with _PRICE_LOCK:
            if _PRICE_TABLE is None:
                import importlib.util
                import json

                spec = importlib.util.find_spec("litellm")
                table: dict = {}
                for location in (spec.submodule_search_locations or []) if spec else []:
                    path = os.path.join(location, PRICE_TABLE_FILE)
                    if os.path.isfile(path):
                        with open(path, encoding="utf-8") as handle:
                            table = json.load(handle)
                        break
                table = {key: entry for key, entry in table.items()
                         if key not in _NOT_MODELS and isinstance(entry, dict)}
                _PRICE_KEYS_FOLDED.update((key.lower(), key) for key in reversed(list(table)))
                _PRICE_TABLE = table
    return _PRICE_TABLE


def _listed_provider_fits(prefix: str, listed: str | None) -> bool:
    if not listed or listed == prefix:
        return True
    if prefix.startswith("bedrock") and listed.startswith("bedrock"):
        return True
    alias = _PROVIDER_ALIASES.get(prefix)
    return bool(alias and alias(listed))


def _table_get(table: dict, key: str) -> dict | None:
    entry = table.get(key)
    return entry if entry is not None else table.get(_PRICE_KEYS_FOLDED.get(key.lower(), ""))


def _table_entry(model: str) -> dict | None:
    table = price_table()
    entry = _table_get(table, model)
    if entry is not None:
        return entry
    prefix, slash, name = model.partition("/")
    if not slash:
        return None
    if name.startswith("ft:"):  # a fine-tuned model is priced as LiteLLM prices it: by its base's ft: entry
        name = "ft:" + name[3:].split(":", 1)[0]
    for key in (name, f"{prefix}/{name}"):
        entry = _table_get(table, key)
        if entry is not None and _listed_provider_fits(prefix, entry.get("litellm_provider")):
            return entry
    return None


@functools.lru_cache(maxsize=1024)
def _price_lookup(model: str) -> tuple[float, float] | None:
    """(input, output) USD per token of `model` from LiteLLM's bundled price table, None if it lists no per-token
    price for it. Named as LiteLLM names it: the table's key, or a provider prefix and the key (`openai/gpt-4o-mini`,
    `vertex_ai/<a vertex_ai-* entry>`, `azure_ai/<an openai entry>`, `openai/ft:<base>:<org>::<id>`), and for
    every such name the price `litellm.cost_per_token` gives (tests/lm/test_price_table.py checks every entry),
    with two documented differences: the list price where LiteLLM gives a time-of-day off-peak price
    (`off_peak_pricing`, a run's cost would depend on the hour), and the table's price for a name LiteLLM's
    router refuses to route (a table key such as `bedrock_converse/...`, where LiteLLM raises). A name the table
    does not list is not priced (LiteLLM is not imported to guess at aliases): `--price IN,OUT` prices it."""
    entry = _table_entry(model)
    if entry is None:
        return None
    prompt, completion = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if prompt is None and completion is None:  # priced per character, image, second...: not per token
        return None
    return float(prompt or 0.0), float(completion or 0.0)


def price_per_token(model: str) -> tuple[float, float]:
    """(input, output) USD per token from LiteLLM's bundled price table; ConfigError if not priced."""
    from ragzoo.engines import DEFAULT_PRICED_MODEL

    prices = _price_lookup(model)
    if prices is None:
        raise ConfigError(f"no price for model {model!r}: not in LiteLLM's bundled price table; choose a priced "
                          f"model, e.g. dry-run:{DEFAULT_PRICED_MODEL}")
    return prices


def is_priced(lm) -> bool:
    """Whether calls of `lm` get a cost: a dry-run priced model, a user's price, or a listed model."""
    if getattr(lm, "priced_model", None) or getattr(lm, "price", None) or getattr(lm, "price_per_hour", None):
        return True
    model = getattr(lm, "model", None)
    return bool(model) and _price_lookup(str(model)) is not None


def estimate_cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float:
    """USD for the tokens at LiteLLM's list price for `model` (0.0 if the model is not priced)."""
    if not model:
        return 0.0
    prices = _price_lookup(model)
    if prices is None:
        return 0.0
    return prompt_tokens * prices[0] + completion_tokens * prices[1]


def call_cost(lm, prompt_tokens: int, completion_tokens: int, reported: float | None = None) -> float:
    """The one pricing rule (see the module docstring)."""
    priced = getattr(lm, "priced_model", None)
    if priced:
        return estimate_cost(priced, prompt_tokens, completion_tokens)
    price = getattr(lm, "price", None)
    if price:  # a price the user gave (--price) for a model LiteLLM does not know
        return prompt_tokens * price[0] + completion_tokens * price[1]
    if reported is not None:
        return float(reported)
    return estimate_cost(getattr(lm, "model", None), prompt_tokens, completion_tokens)


# ---------------------------------------------------------------------------------------------------------
# Budget


def monotonic() -> float:
    """The clock of hourly prices (a test replaces `ragzoo.usage.monotonic` with a fake one)."""
    return time.monotonic()


def check_price_per_hour(value) -> float | None:
    """`--price-per-hour`: None, or a non-negative finite number of USD per hour of a rented server."""
    if value is None or value == "":
        return None
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--price-per-hour must be a number of USD per hour, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"--price-per-hour must be a non-negative number of USD per hour, got {value!r}")
    return rate


class MustWait(Exception):
    """A call could pass the budget only because of what the calls in flight hold: try again once they settle."""


class Budget:
    """At most `max_calls` LM calls sent and `max_cost` USD spent; `reserve()` before each call.

    A call reserves what it could cost (`estimate`: its prompt plus its longest possible reply, see
    `estimate_call_cost`) until its real cost is known (`settle()`), so calls in flight together never pass the
    cap; one that could pass it waits for those in flight to settle, and is refused if it still could. A call
    answered from DSPy's cache costs nothing and is given back (`release()`): a question cut short by a budget
    replays its paid calls from the cache on resume without spending the budget again. With `price_per_hour`
    (a server rented by the hour), the spend checked before each call is the tokens' cost plus the wall time
    since the budget opened x the rate (`clock`: seconds, default `monotonic`). `earlier`: (calls, USD) that earlier
    runs of the same work (a resumed run, compile or search) already spent of `max_calls`/`max_cost` (the flags'
    values): this budget is what is left of them, and a stop says the flags' own numbers."""

    def __init__(self, max_calls: int | None = None, max_cost: float | None = None, *,
                 price_per_hour: float | None = None, clock=None, earlier: tuple[int, float] = (0, 0.0)):
        if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
            raise ConfigError(f"--max-calls must be a non-negative integer, got {max_calls!r}")
        if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float))
                                     or not math.isfinite(max_cost) or max_cost < 0):
            raise ConfigError(f"--max-cost must be a non-negative number of USD, got {max_cost!r}")
        self.earlier_calls, self.earlier_cost = int(earlier[0]), float(earlier[1])
        self.flag_calls, self.flag_cost = max_calls, None if max_cost is None else float(max_cost)
        self.max_calls = None if max_calls is None else max(0, max_calls - self.earlier_calls)
        self.max_cost = None if max_cost is None else max(0.0, float(max_cost) - self.earlier_cost)
        self.price_per_hour = check_price_per_hour(price_per_hour)
        self._clock = clock or monotonic
        self.opened_at = self._clock()
        self.started = 0
        self.spent = 0.0
        self.held = 0.0  # USD reserved by the calls in flight
        self.in_flight = 0  # those calls, counted: what a cost stop waits for (held can keep a rounding remainder)
        self.exceeded: str | None = None
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)

    def reserve(self, estimate: float = 0.0, *, wait: bool = True) -> None:
        """Count one call about to be sent that could cost up to `estimate` USD, or raise `BudgetExceeded` (and
        stay exceeded) if the budget cannot take it. `wait=False` (an async caller, which must not block its
        loop): raise `MustWait` instead of waiting for the calls in flight to settle."""
        with self._lock:
            while self.exceeded is None:
                if self.max_calls is not None and self.started >= self.max_calls:
                    earlier = f", {self.earlier_calls} of them by earlier runs" if self.earlier_calls else ""
                    self.exceeded = (f"LM call budget reached ({self.started + self.earlier_calls} of --max-calls "
                                     f"{self.flag_calls}{earlier}); raise --max-calls to continue")
                elif self.max_cost is not None:
                    server = self.server_cost()
                    spent = self.spent + server + self.earlier_cost
                    what = (f"${spent:.4f}: tokens ${self.spent:.4f} + server ${server:.4f} for "
                            f"{self.elapsed():.0f} s at ${self.price_per_hour:g}/h" if self.price_per_hour
                            else f"${spent:.4f}")
                    if self.earlier_cost:
                        what += f", ${self.earlier_cost:.4f} of it by earlier runs"
                    limit = self.flag_cost
                    if self.spent + server >= self.max_cost:
                        self.exceeded = (f"LM cost budget reached ({what} of --max-cost {limit:g}); "
                                         "raise --max-cost to continue")
                    elif self.spent + server + self.held + estimate > self.max_cost:
                        if self.in_flight > 0:  # the calls in flight may cost less than they hold: wait for them
                            if not wait:
                                raise MustWait()
                            self._settled.wait(1.0)
                            continue
                        self.exceeded = (f"LM cost budget reached ({what} spent; the next call could cost up to "
                                         f"${estimate:.6f}, past --max-cost {limit:g}); raise --max-cost "
                                         f"to continue")
                break
            if self.exceeded is not None:
                raise BudgetExceeded(self.exceeded)
            self.started += 1
            self.held += estimate
            self.in_flight += 1

    def settle(self, estimate: float) -> None:
        """A reserved call ended: its real cost was `spend()`-ed; give back what it held. With none left in flight
        nothing is held: settled in another order than reserved, the sums left ~1e-16 USD, and a cost stop waited
        for calls that were not running, to its question's deadline (the evaluate review)."""
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)
            self.held = max(0.0, self.held - estimate) if self.in_flight else 0.0
            self._settled.notify_all()

    def stop(self, reason: str) -> None:
        """Refuse every later call (a grid stopped by Ctrl-C): the calls in flight end, no new one is sent."""
        with self._lock:
            if self.exceeded is None:
                self.exceeded = reason
            self._settled.notify_all()

    def elapsed(self) -> float:
        """Seconds since the budget opened."""
        return max(0.0, self._clock() - self.opened_at)

    def server_cost(self) -> float:
        """USD of the server rented by the hour so far (0 without `price_per_hour`)."""
        return self.elapsed() / 3600.0 * self.price_per_hour if self.price_per_hour else 0.0

    def release(self) -> None:
        """Give back a reservation whose call was never sent."""
        with self._lock:
            self.started = max(0, self.started - 1)

    def spend(self, cost: float) -> None:
        with self._lock:
            self.spent += cost

    def check(self) -> None:
        """Raise `BudgetExceeded` if the budget was hit (e.g. after an optimizer swallowed the error)."""
        if self.exceeded is not None:
            raise BudgetExceeded(self.exceeded)


# ---------------------------------------------------------------------------------------------------------
# Meters and the callback


class Meter:
    """An open meter: the totals of the calls made while it is open, and an optional budget."""

    def __init__(self, budget: Budget | None = None, *, price_per_hour: float | None = None, clock=None):
        self.usage = Usage()
        self.budget = budget
        self.price_per_hour = check_price_per_hour(price_per_hour)
        self._clock = clock or monotonic
        self.opened_at = self._clock()
        if self.price_per_hour:
            self.usage._refresh = self.update_server_cost

    def update_server_cost(self) -> None:
        """Bring `usage.server_seconds` / `usage.server_cost` up to now (only with `price_per_hour`)."""
        if self.price_per_hour:
            seconds = max(0.0, self._clock() - self.opened_at)
            with self.usage._lock:
                self.usage.server_seconds = seconds
                self.usage.server_cost = seconds / 3600.0 * self.price_per_hour

    @property
    def exceeded(self) -> str | None:
        return self.budget.exceeded if self.budget is not None else None

    @contextlib.contextmanager
    def apart(self) -> Iterator["Meter"]:
        """LM calls made inside count on this meter alone: not on the caller's open meters (nor their budgets),
        nor in the current example's trace. For calls that are not the program's: an LM judge's
        (`ragzoo.metrics.judge`)."""
        from ragzoo.tracing import _current

        token = _current.set(None)
        try:
            with dspy.context(**{_METERS_KEY: [self]}):
                yield self
        finally:
            _current.reset(token)

    def record(self, record: LMCallRecord) -> None:
        self.usage.add(record)
        self.update_server_cost()
        if self.budget is not None:
            self.budget.spend(record.cost)
            if record.cached:  # sent to no one, cost nothing: it counts for no budget
                self.budget.release()


def open_meters() -> list[Meter]:
    return list(dspy.settings.get(_METERS_KEY, None) or [])


def exceeded_budget() -> str | None:
    """Why a budget of an open meter (this one or one it is nested in) was reached, or None."""
    return next((meter.exceeded for meter in open_meters() if meter.exceeded), None)


def caller_name() -> str:
    """Name of the predictor making the current LM call (see `ragzoo.engines.predictor_name`)."""
    from dspy.dsp.utils import settings

    from ragzoo.engines import predictor_name

    stack = list(settings.caller_modules or [])
    caller = next((module for module in reversed(stack) if hasattr(module, "signature")), None)
    return predictor_name(caller, stack)


def find_history_entry(lm, outputs) -> dict | None:
    """The history entry DSPy wrote for the call that returned `outputs` (identity, so thread-safe)."""
    from dspy.clients.base_lm import GLOBAL_HISTORY

    for history in (getattr(lm, "history", None) or [], GLOBAL_HISTORY):
        for entry in reversed(list(history[-256:])):
            if entry.get("outputs") is outputs or entry.get("response") is outputs:
                return entry
    return None


def _text_of(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "".join(_text_of(v) for k, v in value.items() if k in ("text", "content", "reasoning_content"))
    if isinstance(value, (list, tuple)):
        return "\n".join(_text_of(v) for v in value)
    return str(getattr(value, "text", "") or "")


def _cache_on(lm, entry: dict) -> bool:
    """Whether DSPy's response cache could have answered the call of history `entry`."""
    kwargs = entry.get("kwargs") if isinstance(entry.get("kwargs"), dict) else {}
    return bool(kwargs.get("cache", getattr(lm, "cache", True)))


def measure_call(lm, inputs: dict, outputs, name: str, latency: float, *,
                 cache_hit: bool | None = None) -> LMCallRecord:
    """One LM call as a record: tokens from DSPy's history entry (or counted on the text), priced once.
    `cache_hit`: whether DSPy's response cache answered it (`install_cache_hit_marks`), None when not known."""
    entry = find_history_entry(lm, outputs)
    reported = None
    usage = (entry.get("usage") or {}) if entry is not None else {}
    # DSPy's history gives a cache hit no usage; so does a server that reports none (some local OpenAI-compatible
    # ones), a paid call then counted on its text. Which one it was: the cache's own mark; without one, a call
    # with the cache off can only have been the server
    if cache_hit is None:
        cache_hit = not usage and _cache_on(lm, entry) if entry is not None else False
    cached = entry is not None and not usage and cache_hit
    if entry is not None and (usage or cached):
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        reported = entry.get("cost")
    else:
        from ragzoo.engines import approx_tokens

        cached = False
        prompt = inputs.get("prompt")
        text = prompt if isinstance(prompt, str) else "\n\n".join(
            _text_of(m.get("content") if isinstance(m, dict) else m) for m in inputs.get("messages") or [])
        completion = _text_of(outputs)
        prompt_tokens = approx_tokens(text) if text else 0
        completion_tokens = approx_tokens(completion) if completion else 0
    cost = 0.0 if cached else call_cost(lm, prompt_tokens, completion_tokens, reported)
    record = LMCallRecord(signature=name, model=getattr(lm, "model", ""), prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, cost=cost, latency=latency, cached=cached)
    if cached:  # spent nothing; keep what the call would have cost, counted on the text
        from ragzoo.engines import approx_tokens

        messages = (entry or {}).get("messages") or inputs.get("messages") or []
        prompt = inputs.get("prompt")
        text = prompt if isinstance(prompt, str) else "\n\n".join(
            _text_of(m.get("content") if isinstance(m, dict) else m) for m in messages)
        completion = _text_of(outputs)
        record.cached_prompt_tokens = approx_tokens(text) if text else 0
        record.cached_completion_tokens = approx_tokens(completion) if completion else 0
        record.cached_cost = call_cost(lm, record.cached_prompt_tokens, record.cached_completion_tokens)
    return record


def call_texts(inputs: dict, outputs) -> tuple[list[dict], str]:
    """(prompt messages as [{"role", "content"}], reply) of one LM call, secrets redacted, for a run record."""
    from ragzoo.secrets import redact

    prompt = inputs.get("prompt")
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else inputs.get("messages") or []
    kept = [{"role": str(m.get("role") or "?") if isinstance(m, dict) else "?",
             "content": redact(_text_of(m.get("content") if isinstance(m, dict) else m))} for m in messages]
    return kept, redact(_text_of(outputs))


_CACHE_MARKS_INSTALLED = False


def install_cache_hit_marks() -> None:
    """Have DSPy's response cache mark the LM call it answers (idempotent; on the class, so a cache built later by
    `dspy.configure_cache` marks too). DSPy's history gives a cache hit and a reply without `usage` alike no usage;
    the mark tells them apart (a hit is free, a reply without usage was paid)."""
    global _CACHE_MARKS_INSTALLED
    if _CACHE_MARKS_INSTALLED:
        return
    from dspy.clients.cache import Cache

    original = Cache.get

    def get(self, *args, **kwargs):
        found = original(self, *args, **kwargs)
        if found is not None:
            mark_cache_hit()
        return found

    get.__wrapped__ = original
    Cache.get = get
    _CACHE_MARKS_INSTALLED = True


class UsageCallback(BaseCallback):
    """The DSPy callback behind every meter (see the module docstring). Use the singleton `USAGE_CALLBACK`."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[Any, dict, float, str, list | None]] = {}
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        try:
            name = caller_name()
        except Exception:  # naming is a nicety; counting must never depend on it (DSPy swallows errors here)
            name = "?"
        with self._lock:
            if call_id in self._pending:  # started already: the callback is both global and the LM's, DSPy calls
                return  # it twice; a second mark would be the one the cache sets, not the one the end reads
            mark = open_cache_mark()  # set by DSPy's cache lookup if it answers this call (`install_cache_hit_marks`)
            self._pending[call_id] = (instance, inputs, time.perf_counter(), name, mark)

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None:
            return  # not started here, or already recorded through the other place the callback is installed
        lm, inputs, started, name, mark = pending
        totals = getattr(lm, "usage", None)
        totals = totals if isinstance(totals, Usage) else None
        meters = open_meters()
        if exception is not None:
            for sink in ([totals] if totals else []) + [meter.usage for meter in meters]:
                sink.add_failure()
            return
        record = measure_call(lm, inputs, outputs, name, time.perf_counter() - started,
                              cache_hit=True if mark[0] else (False if _CACHE_MARKS_INSTALLED else None))
        if texts_kept():
            record.prompt, record.reply = call_texts(inputs, outputs)
        if record.completion_tokens > _LONGEST_REPLY.get(record.model, 0):  # the next calls' cost estimates
            _LONGEST_REPLY[record.model] = record.completion_tokens
        record_lm_call(record)
        if totals is not None:
            totals.add(record)
        for meter in meters:
            meter.record(record)

    def __deepcopy__(self, memo) -> "UsageCallback":
        return self

    def __copy__(self) -> "UsageCallback":
        return self


USAGE_CALLBACK = UsageCallback()


def attach(lm) -> None:
    """Install the usage callback on `lm` (idempotent); give it running totals `lm.usage` if it has none."""
    callbacks = getattr(lm, "callbacks", None)
    if callbacks is None:
        lm.callbacks = callbacks = []
    if not any(callback is USAGE_CALLBACK for callback in callbacks):
        callbacks.append(USAGE_CALLBACK)
    if not isinstance(getattr(lm, "usage", None), Usage):
        lm.usage = Usage()


DEFAULT_REPLY_TOKENS = 256  # the reply assumed before a model without max_tokens has answered once (a QA reply)
_LONGEST_REPLY: dict[str, int] = {}


def estimate_call_cost(lm, args: tuple = (), kwargs: dict | None = None) -> float:
    """What a call of `lm` with these arguments (DSPy's `prompt`, `messages`) could cost: its prompt (counted
    as the dry-run counts it, plus a few tokens a message) and its longest possible reply (`max_tokens`, else the
    longest this model gave in this process, else `DEFAULT_REPLY_TOKENS`), priced by `call_cost`."""
    from ragzoo.engines import approx_tokens

    kwargs = kwargs or {}
    prompt = kwargs.get("prompt", args[0] if args else None)
    messages = kwargs.get("messages", args[1] if len(args) > 1 else None) or []
    text = prompt if isinstance(prompt, str) else "\n\n".join(
        _text_of(m.get("content") if isinstance(m, dict) else m) for m in messages)
    prompt_tokens = (approx_tokens(text) if text else 0) + 8 * max(1, len(messages))
    options = getattr(lm, "kwargs", None) or {}
    reply = kwargs.get("max_tokens") or options.get("max_tokens") or options.get("max_completion_tokens") \
        or _LONGEST_REPLY.get(str(getattr(lm, "model", "")), DEFAULT_REPLY_TOKENS)
    return call_cost(lm, prompt_tokens, int(reply))


def _reserve_open_budgets(lm=None, args: tuple = (), kwargs: dict | None = None, *,
                          wait: bool = True) -> list[tuple[Budget, float]]:
    budgets = [meter.budget for meter in open_meters() if meter.budget is not None]
    estimate = 0.0
    if lm is not None and any(budget.max_cost is not None for budget in budgets):
        estimate = estimate_call_cost(lm, args, kwargs)
    reserved: list[tuple[Budget, float]] = []
    try:
        for budget in budgets:
            budget.reserve(estimate, wait=wait)
            reserved.append((budget, estimate))
    except (BudgetExceeded, MustWait):
        for budget, held in reserved:
            budget.release()
            budget.settle(held)
        raise
    return reserved


def _settle(reserved: list[tuple[Budget, float]]) -> None:
    for budget, held in reserved:
        budget.settle(held)


_CALL_IDS = itertools.count()


def _metered(lm, call, args: tuple, kwargs: dict):
    """`call(*args, **kwargs)`: DSPy's `BaseLM.__call__`, behind its callback wrapper. Where the usage callback is
    the only callback active (nearly always), it is called here around DSPy's own function instead: the same
    `on_lm_start`/`on_lm_end`, without the wrapper's `inspect.getcallargs` and `uuid4` on every LM call (0.06-0.19
    ms of CPU a call). With any other callback (a user's, MLflow's), DSPy's wrapper runs them all, as before."""
    active = [*(dspy.settings.get("callbacks", None) or []), *(getattr(lm, "callbacks", None) or [])]
    function = getattr(getattr(call, "__func__", None), "__wrapped__", None)
    if function is None or not active or any(callback is not USAGE_CALLBACK for callback in active):
        return call(*args, **kwargs)
    inputs = _signature_of(function).bind(lm, *args, **kwargs)
    inputs.apply_defaults()
    inputs = dict(inputs.arguments)
    inputs.pop("self", None)
    call_id = f"ragzoo-{next(_CALL_IDS)}"
    USAGE_CALLBACK.on_lm_start(call_id=call_id, instance=lm, inputs=inputs)
    try:
        outputs = function(lm, *args, **kwargs)
    except BaseException as error:
        USAGE_CALLBACK.on_lm_end(call_id=call_id, outputs=None, exception=error)
        raise
    USAGE_CALLBACK.on_lm_end(call_id=call_id, outputs=outputs, exception=None)
    return outputs


@functools.lru_cache(maxsize=8)
def _signature_of(function) -> inspect.Signature:
    return inspect.signature(function)


def _refuse_when_stopping() -> None:
    from ragzoo.errors import STOPPING, Stopping

    if STOPPING.is_set():
        raise Stopping("the command is stopping: no new LM call is sent")


class BudgetedCalls:
    """Mixin for `dspy.LM` classes: every call reserves itself (and what it could cost) on the open budgets
    before it is sent, and gives the reservation back once its real cost is counted. What it returns is
    `secrets.scrub_reply`'d: a key the upstream echoed never reaches the program (its records, an optimizer's
    state files, a served answer), whatever new place later keeps what the program makes."""

    def __call__(self, *args, **kwargs):
        from ragzoo.secrets import scrub_reply

        _refuse_when_stopping()
        reserved = _reserve_open_budgets(self, args, kwargs)
        try:
            return scrub_reply(_metered(self, super().__call__, args, kwargs))
        finally:
            _settle(reserved)

    async def acall(self, *args, **kwargs):
        import asyncio

        while True:  # an async caller must not block its loop (the calls it waits for may run on it)
            _refuse_when_stopping()
            try:
                reserved = _reserve_open_budgets(self, args, kwargs, wait=False)
                break
            except MustWait:
                await asyncio.sleep(0.02)
        try:
            from ragzoo.secrets import scrub_reply

            return scrub_reply(await super().acall(*args, **kwargs))
        finally:
            _settle(reserved)


class TrackedLM(BudgetedCalls, dspy.LM):
    """`dspy.LM` with the usage callback, running totals (`usage`) and budget checks. Otherwise identical:
    same engines, adapters, cache, history and callbacks. Saved state names plain `dspy.LM` for a string
    engine so a program saved with it loads without `allow_unsafe_lm_state`."""

    priced_model: str | None = None

    endpoint: str | None = None  # the endpoint whose concurrency limit this LM's calls share (see ragzoo.endpoints)
    cache_namespace: str | None = None  # added to DSPy's cache key (the endpoint, set by ragzoo.lm.make_lm)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        attach(self)

    def __call__(self, *args, **kwargs):
        from ragzoo.endpoints import endpoint_calls
        from ragzoo.engines import dry_run_call

        # each request holds a slot of the endpoint, shared by every thread and run; a dry-run estimate sees the
        # call's cache options
        with endpoint_calls(self), dry_run_call(self, kwargs):
            return super().__call__(*args, **kwargs)

    async def acall(self, *args, **kwargs):
        from ragzoo.endpoints import aendpoint_calls
        from ragzoo.engines import dry_run_call

        async with aendpoint_calls(self):
            with dry_run_call(self, kwargs):
                return await super().acall(*args, **kwargs)

    def dump_state(self) -> dict[str, Any]:
        from dspy.clients.base_lm import _BUILTIN_LM_CLASS_PATH, LM_CLASS_STATE_KEY

        state = super().dump_state()
        if isinstance(self.engine, str):
            state[LM_CLASS_STATE_KEY] = _BUILTIN_LM_CLASS_PATH
        return state


_MIXED_CLASSES: dict[tuple[type, type], type] = {}


def mixed_class(mixin: type, base: type, prefix: str) -> type:
    """`base` with `mixin`'s call behaviour in front, made once per (mixin, base) so that every wrapped LM of a
    class shares one class (isinstance checks and copies keep working). `prefix=""` names it as `base`."""
    cls = _MIXED_CLASSES.get((mixin, base))
    if cls is None:
        cls = _MIXED_CLASSES[(mixin, base)] = type(f"{prefix}{base.__name__}", (mixin, base),
                                                   {"__module__": base.__module__,
                                                    "__qualname__": f"{prefix}{base.__qualname__}"})
    return cls


def budgeted(lm):
    """`lm` itself if its calls check budgets, else a copy of it whose class adds the check (copies made
    later, e.g. by optimizers, keep the class and so the check)."""
    if isinstance(lm, BudgetedCalls):
        return lm
    copy = lm.copy() if hasattr(lm, "copy") else lm
    copy.__class__ = mixed_class(BudgetedCalls, type(lm), "Budgeted")
    return copy


def _carries_usage_callback(lm) -> bool:
    return lm is not None and any(callback is USAGE_CALLBACK for callback in getattr(lm, "callbacks", None) or [])



def check_cost_binds(lm, max_cost: float | None, price_per_hour: float | None = None) -> None:
    """A cost budget on a model with no known price (and no hourly rate) could never stop anything: refused, in
    one line, by every command that takes --max-cost (before the first question, where it can)."""
    if max_cost is not None and lm is not None and not price_per_hour and not is_priced(lm):
        raise ConfigError(f"--max-cost cannot bind: model {getattr(lm, 'model', lm)!r} has no known price "
                          f"(not in LiteLLM's bundled price table); pass --price IN,OUT (USD per million prompt, "
                          f"completion tokens) or --price-per-hour USD (a server rented by the hour)")


@contextlib.contextmanager
def metering(max_calls: int | None = None, max_cost: float | None = None, *,
             price_per_hour: float | None = None, budget: Budget | None = None,
             earlier: tuple[int, float] = (0, 0.0)) -> Iterator[Meter]:
    """Open a meter over every LM call made inside the block, in every thread DSPy starts for it.

    With `max_calls`/`max_cost`, a call past the budget raises `BudgetExceeded` before it is sent (the
    active LM is swapped for a budgeted copy if it is not a `TrackedLM`). Meters nest: each sees the calls
    made while it is open. A server rented by the hour (`price_per_hour`, default the active LM's
    `--price-per-hour`) costs the block's wall time x the rate: `meter.usage.server_cost`, apart from the
    tokens' `cost`, and `max_cost` binds on the sum. `budget`: a `Budget` shared by several meters (a grid's,
    over every cell running at once) instead of `max_calls`/`max_cost`; `earlier`: as `Budget`'s."""
    active = dspy.settings.lm
    if price_per_hour is None and active is not None:
        price_per_hour = getattr(active, "price_per_hour", None)
    price_per_hour = check_price_per_hour(price_per_hour)
    if budget is None:
        budget = (None if max_calls is None and max_cost is None
                  else Budget(max_calls, max_cost, price_per_hour=price_per_hour, earlier=earlier))
    check_cost_binds(active, max_cost, price_per_hour)
    meter = Meter(budget, price_per_hour=price_per_hour)
    callbacks = list(dspy.settings.get("callbacks", None) or [])
    # An LM that carries the callback itself (every `TrackedLM`) needs no global one: a global callback makes DSPy
    # inspect the arguments of every module, predictor and adapter call too (~10% of the CPU of an LM call)
    if not any(callback is USAGE_CALLBACK for callback in callbacks) and not _carries_usage_callback(active):
        callbacks.append(USAGE_CALLBACK)
    overrides: dict[str, Any] = {_METERS_KEY: [*open_meters(), meter], "callbacks": callbacks}
    if budget is not None and dspy.settings.lm is not None:
        overrides["lm"] = budgeted(dspy.settings.lm)
    try:
        with dspy.context(**overrides):
            yield meter
    finally:
        meter.update_server_cost()


_PRICE_MEMO_LOCK = threading.Lock()
_PRICE_MEMO = False


def memoize_price_metadata() -> bool:
    """Memoise DSPy's model-metadata lookup (`dspy.clients.costs.model_info`) for this process (idempotent).

    The table is loaded once per process and never changes after, so the lookup is a function of its
    arguments; a copy of the memoised entry is returned, as DSPy returns a copy. For a model the table does
    not know, each lookup is a scan of every entry (~0.3 ms, and it evicts the CPU caches). True if installed."""
    global _PRICE_MEMO
    with _PRICE_MEMO_LOCK:
        if _PRICE_MEMO:
            return True
        try:
            from dspy.clients import costs
        except ImportError:
            return False
        lookup = getattr(costs, "model_info", None)
        if lookup is None:
            return False

        @functools.lru_cache(maxsize=1024)
        def cached(provider, model, namespaces):
            return lookup(provider, model, namespaces=None if namespaces is None else list(namespaces))

        def model_info(provider, model, *, namespaces=None):
            try:
                key = None if namespaces is None else tuple(namespaces)
                return deepcopy(cached(provider, model, key))
            except TypeError:  # an unhashable argument: look it up as DSPy would
                return lookup(provider, model, namespaces=namespaces)

        model_info.__wrapped__ = lookup
        costs.model_info = model_info
        _PRICE_MEMO = True
        return True
