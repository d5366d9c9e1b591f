"""Prices come from LiteLLM's bundled price table, read as a file: no ragzoo process imports LiteLLM to price a
model (the import alone is ~3.4 s of CPU), and every name the table prices per token gets LiteLLM's price."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap

import pytest

from ragzoo.errors import ConfigError
from ragzoo.usage import _price_lookup, price_table

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _names_and_entries():
    table = price_table()
    for key, entry in table.items():
        if "input_cost_per_token" not in entry or "output_cost_per_token" not in entry:
            continue
        yield key, entry
        provider = entry.get("litellm_provider")
        prefixed = f"{provider}/{key}"
        if provider and not key.startswith(provider + "/") and prefixed not in table:
            yield prefixed, entry


def test_every_per_token_entry_and_its_prefixed_name_gets_litellms_price():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    assert set(litellm.model_cost) - {"sample_spec"} == set(price_table())  # the models LiteLLM reads
    checked = refused = 0
    wrong = []
    for name, entry in _names_and_entries():
        listed = (float(entry["input_cost_per_token"]), float(entry["output_cost_per_token"]))
        ours = _price_lookup(name)
        try:
            if entry.get("litellm_provider") == "github_copilot":  # LiteLLM signs in to GitHub first (~0.3 s each,
                raise RuntimeError("offline")                        # then refuses): counted as refused, unasked
            with contextlib.redirect_stdout(io.StringIO()):
                theirs = tuple(float(x) for x in litellm.cost_per_token(model=name, prompt_tokens=1,
                                                                         completion_tokens=1))
        except Exception:  # LiteLLM's router refuses the name (a provider it cannot call): we give the table's
            refused += 1
            if ours != listed:
                wrong.append((name, ours, "refused", listed))
            continue
        checked += 1
        if entry.get("off_peak_pricing") and ours == listed:  # LiteLLM's price depends on the hour: ours is the list one
            continue
        if ours != theirs:
            wrong.append((name, ours, theirs, listed))
    assert not wrong, wrong[:10]
    assert checked > 3000 and refused < checked


@pytest.mark.parametrize("name, expected", [
    ("openai/gpt-4o-mini", (1.5e-07, 6e-07)),  # the dry-run's default priced model
    ("gpt-4o-mini", (1.5e-07, 6e-07)), ("openai/GPT-4o-mini", (1.5e-07, 6e-07)),  # LiteLLM ignores case
    ("openai/ft:gpt-4o-mini-2024-07-18:my-org::abc123", (3e-07, 1.2e-06)),  # fine-tuned: its base's ft: price
    ("litellm_proxy/gpt-4o-mini", (1.5e-07, 6e-07)),  # LiteLLM's provider aliases
    ("azure_ai/gpt-4o-mini", (1.5e-07, 6e-07)),
    ("openai/stub", None), ("ollama_chat/llama3.1", None), ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", None),
    ("anthropic/gpt-4o-mini", None),  # an entry of another provider is not this provider's price
    ("sample_spec", None),
])
def test_names_the_suite_and_readme_use(name, expected):
    assert _price_lookup(name) == expected


def test_an_unlisted_model_under_a_cost_budget_says_where_prices_come_from():
    import dspy

    from ragzoo.lm import make_lm
    from ragzoo.usage import metering

    lm = make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)
    with dspy.context(lm=lm), pytest.raises(ConfigError) as raised:
        with metering(max_cost=1.0):
            pass
    message = str(raised.value)
    assert "not in LiteLLM's bundled price table" in message and "--price IN,OUT" in message

    from ragzoo.grid.runner import check_budget_options
    from ragzoo.grid.spec import parse_grid

    grid = parse_grid({"grid": {"name": "t", "lms": ["openai/stub"]}, "datasets": [{"name": "hotpotqa"}],
                       "methods": [{"id": "rag"}]})
    with pytest.raises(ConfigError, match="not in LiteLLM's bundled price table.*--price IN,OUT"):
        check_budget_options(grid, max_cost=1.0, max_calls=None, price=None, price_per_hour=None)


PROBE = textwrap.dedent("""
    import json, sys
    import dspy
    from ragzoo.grid.runner import check_budget_options
    from ragzoo.grid.spec import parse_grid
    from ragzoo.lm import make_lm
    from ragzoo.stubserver import StubLMServer
    from ragzoo.usage import metering

    with StubLMServer() as server:
        lm = make_lm("openai/gpt-4o-mini", api_base=server.base_url + "/v1", cache=False)
        with dspy.context(lm=lm), metering(max_cost=1.0) as meter:
            dspy.Predict("question -> answer")(question="Who wrote Hamlet?")
    dry = make_lm("dry-run")
    grid = parse_grid({"grid": {"name": "t", "lms": ["openai/gpt-4o-mini", "dry-run"]},
                       "datasets": [{"name": "hotpotqa"}], "methods": [{"id": "rag"}]})
    check_budget_options(grid, max_cost=1.0, max_calls=None, price=None, price_per_hour=None)
    usage = meter.usage
    print(json.dumps({"litellm": sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm.")),
                      "cost": usage.cost, "prompt": usage.prompt_tokens, "completion": usage.completion_tokens}))
""")


def test_no_process_imports_litellm_to_price_a_model():
    import json

    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["litellm"] == []
    assert seen["prompt"] > 0 and seen["completion"] > 0
    assert seen["cost"] == pytest.approx(seen["prompt"] * 1.5e-07 + seen["completion"] * 6e-07)


def test_the_table_is_read_once_per_process_across_threads(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    import ragzoo.usage as usage

    reads = []
    real_open = open

    def counting_open(path, *args, **kwargs):
        if str(path).endswith(usage.PRICE_TABLE_FILE):
            reads.append(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(usage, "_PRICE_TABLE", None)
    monkeypatch.setattr("builtins.open", counting_open)
    with ThreadPoolExecutor(8) as pool:
        tables = list(pool.map(lambda _: usage.price_table(), range(32)))
    assert len(reads) == 1 and all(table is tables[0] for table in tables) and len(tables[0]) > 1000
