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
from pathlib import Path
from typing import Any

from ragzoo.errors import ConfigError
from ragzoo.secrets import SECRET_HINT, is_secret_name, looks_like_secret


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
            resolved[name] = flag
        elif name in from_file:
            resolved[name] = from_file[name]
        else:
            resolved[name] = default
    refuse_secrets({**resolved, "api_key": getattr(args, "api_key", None)})
    return resolved


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
