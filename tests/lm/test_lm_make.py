"""make_lm specs, refusals of secrets, and describe_lm's manifest view."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dspy
import pytest

from ragzoo.errors import ConfigError
from ragzoo.engines import DryRunEngine
from ragzoo.lm import describe_lm, is_dry_run, make_lm
from ragzoo.usage import USAGE_CALLBACK, TrackedLM


@pytest.mark.parametrize("spec", ["openai/gpt-4o-mini", "ollama_chat/llama3.1", "hosted_vllm/meta-llama/Llama-3.1-8B"])
def test_litellm_specs_build_tracked_lms_with_defaults(spec):
    lm = make_lm(spec)
    assert isinstance(lm, TrackedLM) and isinstance(lm, dspy.LM)
    assert lm.model == spec
    assert lm.kwargs["temperature"] == 0.0
    assert lm.cache is True and lm.num_retries == 3
    assert lm.engine == "auto"
    assert sum(cb is USAGE_CALLBACK for cb in lm.callbacks) == 1


def test_options_pass_through():
    lm = make_lm("openai/gpt-4o-mini", cache=False, num_retries=1, max_tokens=256, engine="litellm", timeout=5)
    assert (lm.cache, lm.num_retries, lm.engine) == (False, 1, "litellm")
    assert lm.kwargs["max_tokens"] == 256 and lm.kwargs["timeout"] == 5


def test_reasoning_models_get_no_forced_temperature():
    lm = make_lm("openai/o3-mini")
    assert lm.kwargs.get("temperature") is None


@pytest.mark.parametrize("spec, fragment", [
    ("", "empty LM spec"),
    ("   ", "empty LM spec"),
    ("gpt-4o-mini", "provider prefix"),
    ("openai/", "provider prefix"),
    ("/gpt-4o", "provider prefix"),
    ("dry-run:nonexistent-vendor/model-x", "no price"),
    ("dry-run:gpt-4o-mini", "provider prefix"),
    ("dry-run:anthropic/claude-sonnet-4-20250514", "no price"),
])
def test_bad_specs_raise_config_error_with_a_clear_line(spec, fragment):
    with pytest.raises(ConfigError) as info:
        make_lm(spec)
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs", [
    {"api_key": "sk-abc"},
    {"token": "x"},
    {"client_secret": "x"},
    {"max_tokens": 10, "extra_headers_token": "y"},
])
def test_credentials_in_options_are_refused(kwargs):
    with pytest.raises(ConfigError, match="environment"):
        make_lm("openai/gpt-4o-mini", **kwargs)


def test_key_like_values_are_refused_in_spec_api_base_and_options():
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    with pytest.raises(ConfigError, match="secret"):
        make_lm(f"openai/{key}")
    with pytest.raises(ConfigError, match="secret"):
        make_lm("openai/gpt-4o-mini", stop=key)
    with pytest.raises(ConfigError, match="credentials"):
        make_lm("openai/gpt-4o-mini", api_base="http://user:pw@127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match="credentials"):
        make_lm("openai/gpt-4o-mini", api_base=f"http://127.0.0.1:8000/v1?api_key={key}")


def test_unknown_options_and_bad_retries_and_bad_api_base():
    with pytest.raises(ConfigError, match="unknown LM option"):
        make_lm("openai/gpt-4o-mini", tempurature=0.5)
    for bad in (-1, 11, "3", True):
        with pytest.raises(ConfigError, match="num_retries"):
            make_lm("openai/gpt-4o-mini", num_retries=bad)
    with pytest.raises(ConfigError, match="http"):
        make_lm("openai/gpt-4o-mini", api_base="127.0.0.1:8000")
    with pytest.raises(ConfigError, match="engine"):
        make_lm("openai/gpt-4o-mini", engine="fast")


def test_dry_run_specs():
    lm = make_lm("dry-run")
    assert is_dry_run(lm) and isinstance(lm.engine, DryRunEngine)
    assert lm.model == "dry-run/openai/gpt-4o-mini" and lm.priced_model == "openai/gpt-4o-mini"
    assert lm.cache is False
    other = make_lm("dry-run:openai/gpt-4o")
    assert other.priced_model == "openai/gpt-4o"
    with pytest.raises(ConfigError, match="api-base"):
        make_lm("dry-run", api_base="http://127.0.0.1:1/v1")
    assert not is_dry_run(make_lm("openai/gpt-4o-mini"))


def test_api_base_without_env_key_sends_a_placeholder_and_describe_masks_it(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lm = make_lm("openai/local-model", api_base="http://127.0.0.1:8000/v1/")
    assert lm.kwargs["api_base"] == "http://127.0.0.1:8000/v1"
    assert lm.kwargs["api_key"] == "ragzoo-no-key"
    described = describe_lm(lm)
    assert described["api_base"] == "127.0.0.1:8000"
    assert described["kwargs"]["api_key"] == "***"


def test_api_base_with_env_key_never_copies_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-" + "Z" * 40)
    lm = make_lm("openai/gpt-4o-mini", api_base="https://gateway.example.com:8443/openai/v1")
    assert "api_key" not in lm.kwargs
    text = json.dumps(describe_lm(lm))
    assert "sk-live" not in text and "gateway.example.com:8443" in text and "/openai/v1" not in text


def test_describe_lm_masks_secrets_of_any_lm():
    secret = "sk-" + "q" * 48
    lm = dspy.LM("openai/gpt-4o-mini", api_key=secret, api_base="https://h.example/v1",
                 extra_headers={"Authorization": "Bearer " + secret, "X-Trace": "on"}, cache=False)
    described = describe_lm(lm)
    text = json.dumps(described)
    assert secret not in text
    assert described["kwargs"]["api_key"] == "***"
    assert described["kwargs"]["extra_headers"] == {"Authorization": "***", "X-Trace": "on"}
    assert described["model"] == "openai/gpt-4o-mini" and described["api_base"] == "h.example"


def test_describe_dry_run():
    described = describe_lm(make_lm("dry-run"))
    assert described["dry_run"] is True and described["priced_model"] == "openai/gpt-4o-mini"
    json.dumps(described)


def test_importing_the_lm_layer_changes_nothing_in_the_environment():
    code = ("import json, os; before = dict(os.environ)\n"
            "import ragzoo.lm, ragzoo.usage, ragzoo.engines, ragzoo.stubserver\n"
            "print(json.dumps(sorted(set(os.environ.items()) ^ set(before.items()))))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LITELLM_LOCAL_MODEL_COST_MAP", "TIKTOKEN_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == []


def test_make_lm_uses_litellms_bundled_price_table_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP", raising=False)
    make_lm("dry-run")
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")
    make_lm("dry-run")
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "False"
