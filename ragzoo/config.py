"""Resolved configuration of a command: flags > `--config FILE` (TOML or YAML) > built-in defaults.

Commands declare their configurable flags with `default=None` and their real defaults in a dict; `resolve`
fills each value from the flag when given, else from the file, else from the default, and returns the
resolved dict that the command saves (run `config.json`, artifact manifest). Keys of the file are the flag
names (`train-n` or `train_n`). Secrets are refused wherever they come from: an `--api-key`-style option, or
a value that looks like a key (sk-..., hf_..., Bearer ...).
"""

from __future__ import annotations

import argparse
import json
import os
import typing
from pathlib import Path
from typing import Any

from ragzoo.errors import ConfigError
from ragzoo.secrets import SECRET_HINT, carries_credentials, is_secret_name, looks_like_secret, register_url


def add_secret_trap(parser: argparse.ArgumentParser) -> None:
    """Accept (hidden) `--api-key` so that it is refused with a clear line instead of an argparse usage dump."""
    parser.add_argument("--api-key", "--api_key", "--key", dest="api_key", default=None, help=argparse.SUPPRESS)


def refuse_secrets(values: dict[str, Any]) -> None:
    if values.get("api_key"):
        raise ConfigError(f"refusing --api-key on the command line (it would end up in shell history and saved "
                          f"configs); {SECRET_HINT}")
    for name, value in values.items():
        if name == "api_key" or value is None:
            continue
        if is_secret_name(name) and value:
            raise ConfigError(f"refusing {name!r}: {SECRET_HINT}")
        if looks_like_secret(value):
            raise ConfigError(f"refusing --{name.replace('_', '-')}: its value looks like a secret key; {SECRET_HINT}")
        if name.endswith("api_base") and isinstance(value, str) and carries_credentials(value):
            raise ConfigError(f"the --{name.replace('_', '-')} URL carries credentials; give the bare server URL "
                              f"and set the key in the environment")


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"config file {path} must end in .toml, .yaml, .yml or .json")
    except ConfigError:
        raise
    except Exception as error:  # tomllib/yaml/json parse errors
        raise ConfigError(f"config file {path} does not parse: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/mapping of option names to values")
    return {str(key).replace("-", "_"): value for key, value in data.items()}


def resolve(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """Flags (non-None) win over the config file, which wins over `defaults`. Unknown file keys are refused."""
    from_file: dict[str, Any] = {}
    if getattr(args, "config", None):
        from_file = load_config_file(args.config)
        unknown = sorted(set(from_file) - set(defaults))
        if unknown:
            raise ConfigError(f"config file {args.config}: unknown option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(defaults))}")
    resolved = {}
    for name, default in defaults.items():
        flag = getattr(args, name, None)
        if flag is not None and flag != [] :
            resolved[name] = check_number(name, flag)
        elif name in from_file:
            resolved[name] = check_number(name, _file_value(name, from_file[name], default, args.config),
                                          where=f"config file {args.config}: ")
        else:
            resolved[name] = default
    refuse_free_budget(resolved)
    for name in ("api_base", "judge_api_base", "retriever"):  # what an endpoint carries is redacted from every
        if isinstance(resolved.get(name), str) and "://" in resolved[name]:  # error text, a refusal's too
            register_url(resolved[name].partition(":")[2] if name == "retriever" else resolved[name])
    refuse_secrets({**resolved, "api_key": getattr(args, "api_key", None)})
    if "out" in defaults:  # a command that writes a run or an artifact (ask's 0 is a plain budget stop, exit 3)
        refuse_empty_budgets(resolved)
    return resolved


def _numbers():
    from ragzoo.knobs import Range

    at_least_one, none_below_zero, positive = Range(1), Range(0), Range(0, above=True)
    return {
        "n": (int, at_least_one), "train_n": (int, at_least_one), "dev_n": (int, none_below_zero),
        "threads": (int, at_least_one), "trials": (int, at_least_one), "seed": (int, Range()),
        "max_calls": (int, none_below_zero), "max_cost": (float, none_below_zero),
        "timeout": (float, positive), "deadline": (float, positive), "max_reasks": (int, none_below_zero),
        "max_concurrency": (int, at_least_one), "lm_max_concurrency": (int, at_least_one),
        "abort_failure_rate": (float, Range(0, 1)), "price_per_hour": (float, none_below_zero),
        "parallel": (int, at_least_one), "price_sample": (int, at_least_one), "max_queue": (int, none_below_zero),
        "max_pending": (int, at_least_one), "max_query_chars": (int, at_least_one),
        "processes": (int, at_least_one), "workers": (int, at_least_one), "port": (int, Range(1, 65535)),
        "show": (int, none_below_zero),
    }


# Every numeric option of every command, by option name (the flag's dest, the config file's key): its type and
# range. One table and one check (`check_number`, on `ragzoo.knobs`' rules: the type, finite, the Range) for
# flags and --config values alike, because argparse's float() takes "nan", "inf" and "1e400" (= inf) as numbers.
NUMBER_OPTIONS: dict[str, tuple[type, Any]] = _numbers()
_NUMBER_OPTIONS = {name: kind for name, (kind, _range) in NUMBER_OPTIONS.items()}  # the type a flag parses to
PRICE_OPTION = "price"  # "IN,OUT" USD per million prompt / completion tokens: two numbers, each finite and >= 0


def flag_name(name: str) -> str:
    return "-n" if name == "n" else f"--{name.replace('_', '-')}"


def check_number(name: str, value: Any, where: str = "") -> Any:
    """`value` of option `name` if it is of the option's type, finite and in its range (options outside the
    table pass through); else a one-line ConfigError naming the option (`where` prefixes it, e.g. the config
    file). Both a flag's and a config file's value come through here."""
    from ragzoo.knobs import describe, fits

    if value is None:
        return value
    if name == PRICE_OPTION:
        _check_price(value, where)
        return value
    if name not in NUMBER_OPTIONS:
        return value
    kind, bounds = NUMBER_OPTIONS[name]
    annotation = typing.Annotated[kind, bounds]
    if not fits(value, annotation):
        shown = flag_name(name) if not where else name
        raise ConfigError(f"{where}{shown} {value!r}: expected {describe(annotation, shown)}")
    return value


def check_numbers(values: dict[str, Any]) -> None:
    """`check_number` on every option of `values` that has a number (commands that read argparse's namespace
    without `resolve`: `sweep`, `reproduce`, `serve`), then `refuse_free_budget`."""
    for name, value in values.items():
        check_number(name, value)
    refuse_free_budget(values)


def price_parts(value: Any) -> list[float] | None:
    """The numbers of a `--price` value ("IN,OUT", "X" for both, or a pair), None if it is not numbers."""
    try:
        parts = [float(part) for part in (value.replace("/1M", "").split(",") if isinstance(value, str) else value)]
    except (TypeError, ValueError):
        return None
    return parts * 2 if len(parts) == 1 else parts


def parse_price(value: Any, where: str = "") -> tuple[float, float] | None:
    """The one reader of a `--price` (flag, config file, `make_lm(price=...)`): (input, output) USD per token,
    None for no price; a value `check_number` refuses is refused here with its line."""
    if value is None or value == "":
        return None
    _check_price(value, where)
    prompt, completion = price_parts(value)
    return prompt / 1e6, completion / 1e6


def _check_price(value: Any, where: str) -> None:
    import math

    parts = price_parts(value) if not isinstance(value, bool) else None
    shown = "price" if where else "--price"
    if parts is None or len(parts) != 2:
        raise ConfigError(f"{where}{shown} {value!r}: expected 'IN,OUT', USD per million prompt and completion "
                          f"tokens, e.g. 0.15,0.60")
    if not all(math.isfinite(part) and part >= 0 for part in parts):
        raise ConfigError(f"{where}{shown} {value!r}: each price must be a finite number >= 0 (USD per million "
                          f"tokens)")


def refuse_free_budget(values: dict[str, Any]) -> None:
    """`--price 0,0 --max-cost X` (no `--price-per-hour`): every call costs nothing, so the budget could never stop
    the run: refused, since the user who gave it expects it to. A dry-run LM prices at a real model's list
    price and ignores --price, so its budget still binds."""
    price, max_cost = values.get(PRICE_OPTION), values.get("max_cost")
    if price in (None, "") or max_cost is None or values.get("price_per_hour"):
        return
    lms = values.get("lm")
    lms = [lms] if isinstance(lms, str) else list(lms or [])
    if lms and all(str(spec).strip().startswith("dry-run") for spec in lms):
        return
    parts = price_parts(price)
    if parts and not any(parts):
        raise ConfigError(f"--max-cost {max_cost:g} can never stop anything: --price {price} makes every LM call "
                          f"free; cap calls with --max-calls instead, or give the model's real --price")


def _file_value(name: str, value: Any, default: Any, path: Any) -> Any:
    """A config-file value of the type its flag would give, else a one-line ConfigError naming the option (a
    flag's type is checked by argparse; a file's values are checked here)."""
    def wrong(kind: str) -> ConfigError:
        return ConfigError(f"config file {path}: {name} must be {kind}, got {value!r}")

    expected = _NUMBER_OPTIONS.get(name) or (type(default) if default is not None else str)
    if value is None:
        return default
    if expected is bool:
        if not isinstance(value, bool):
            raise wrong("true or false")
    elif expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong("an integer")
    elif expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong("a number")
    elif expected is list:  # repeatable flags (--knob K=V ...): a list of K=V strings, one string, or a table
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return value
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise wrong("a list of K=V strings (or a table)")
    elif expected is str:
        if name == "metric" and isinstance(value, list) and all(isinstance(item, str) for item in value):
            return ",".join(value)  # metric = ["em", "f1"] reads as --metric em,f1
        if not isinstance(value, str):
            raise wrong("text")
    return value


def refuse_empty_budgets(values: dict[str, Any]) -> None:
    """`--max-calls 0` / `--max-cost 0` allow no LM call at all: an evaluate or compile would stop before its first
    question and leave an empty run directory or artifact. Refused, with what to do instead (a dry run shows calls
    and cost for free)."""
    for name, unit in (("max_calls", "LM calls"), ("max_cost", "USD")):
        value = values.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value == 0:
            raise ConfigError(f"--{name.replace('_', '-')} 0 allows no LM call, so nothing would run; give a "
                              f"positive budget ({unit}), or use --lm dry-run:MODEL to see calls and cost "
                              f"without paying")


def knob_dict(value: Any) -> dict[str, Any]:
    """`--knob k=v` strings (list) or a config-file table -> {name: value}."""
    from ragzoo.knobs import parse_knob_args

    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        value = [value]
    return parse_knob_args(list(value))


MIN_FREE_BYTES = 16 * 2**20  # compile/evaluate refuse to start (and pay) when --out's disk has less free space


def check_out_writable(path: str | os.PathLike, flag: str = "--out") -> None:
    """Before any paid work: `path` (to be created or written into) is not a file, its nearest existing folder is
    a writable directory, and its disk has some room. Raises ConfigError saying what to change."""
    import shutil

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is a file, not a folder; choose another {flag}")
    parent = path if path.is_dir() else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} is not a folder; choose another {flag}")
    if not os.access(parent, os.W_OK | os.X_OK) or _read_only_mount(parent):
        raise ConfigError(f"{flag} {path}: {parent} is not writable; choose another {flag} (checked before any LM "
                          f"call, so nothing is paid for a result that could not be saved)")
    try:
        free = shutil.disk_usage(parent).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise ConfigError(f"{flag} {path}: only {free // 1024} KiB free on its disk; free some space or choose "
                          f"another {flag} (checked before any LM call)")


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


# What changes answers, by resolved option name: a resume must match every one of these that the interrupted
# work recorded, or it would file one setup's answers under another's label. One list for evaluate's runs
# (`ragzoo.runs`), compile's checkpoints (`ragzoo.commands.compile`) and so grids, whose cells are those two.
# Options that only pace, meter or bound the work (threads, timeouts, deadlines, budgets, prices, the cache,
# concurrency, -n, which may grow) may change between the two.
ANSWER_OPTIONS = ("method", "program", "knobs", "retriever", "adapter", "max_reasks", "seed", "dataset", "split",
                  "data", "field_map", "metrics", "optimizer", "optimizer_settings", "api_base")
# ... and of the LM, as `ragzoo.lm.describe_lm` records it: the endpoint as its host (never a credential),
# sampling options from its kwargs
ANSWER_LM_KEYS = ("model", "api_base", "priced_model", "dry_run", "temperature", "max_tokens")
_ANSWER_FLAGS = {"knobs": "--knob", "metrics": "--metric", "optimizer_settings": "--optimizer-setting",
                 "lm.model": "--lm", "lm.priced_model": "--lm", "lm.dry_run": "--lm", "lm.api_base": "--api-base",
                 "lm.temperature": "the LM's temperature", "lm.max_tokens": "the LM's max_tokens",
                 "judge.lm.model": "--judge-lm", "judge.lm.priced_model": "--judge-lm",
                 "judge.lm.dry_run": "--judge-lm", "judge.lm.api_base": "--judge-api-base",
                 "judge.lm.temperature": "the judge LM's temperature", "judge.lm.max_tokens": "the judge LM's max_tokens",
                 "train_questions": "the training questions", "dev_questions": "the validation questions"}


def answer_view(config: dict[str, Any], lm: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options of `config` that change answers (`ANSWER_OPTIONS`, then `lm.KEY` of the LM description,
    `lm` or `config["lm"]`) and the scores of an LM-judged metric (`judge.lm.KEY` of the judge LM that
    `ragzoo.metrics.judge.judge_config` records: only a run with a judged metric has one), JSON-normalised and
    without credentials, for comparing a resume with the work it continues."""
    from ragzoo.files import jsonable
    from ragzoo.secrets import storable

    view = {key: jsonable(config[key]) for key in ANSWER_OPTIONS if key in config}
    # the same file and the same server however spelt (a run recorded before paths were made absolute: against
    # the folder it is resumed from)
    for key in ("data", "program"):
        if isinstance(view.get(key), str):
            view[key] = os.path.abspath(os.path.expanduser(view[key]))
    if isinstance(view.get("api_base"), str):
        view["api_base"] = view["api_base"].rstrip("/")
    lm = config.get("lm") if lm is None else lm
    judge = config.get("judge") if isinstance(config.get("judge"), dict) else {}
    for prefix, described in (("lm", lm), ("judge.lm", judge.get("lm"))):
        if isinstance(described, dict):
            sampling = described.get("kwargs") if isinstance(described.get("kwargs"), dict) else {}
            for key in ANSWER_LM_KEYS:
                if key in described or key in sampling:
                    view[f"{prefix}.{key}"] = jsonable(described[key] if key in described else sampling[key])
    return json.loads(json.dumps(storable(view), sort_keys=True, default=str))


def answer_differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """"--adapter was 'chat', now 'json'" for each answer-changing option that differs (options named as flags).
    A key the earlier work did not record matches only an unset value."""
    differing = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        if old == new or (key not in before and new in (None, "", [], {})):
            continue
        flag = _ANSWER_FLAGS.get(key) or flag_name(key)
        if differing and differing[-1].startswith(flag + " "):
            continue  # --lm once, though model and priced_model both differ
        differing.append(f"{flag} was {_short(old)}, now {_short(new)}")
    return differing


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."
