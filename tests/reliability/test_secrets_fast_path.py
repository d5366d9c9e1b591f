"""A run record with nothing to hide is written as it is (`secrets.holds_secret` searches all its texts at once);
one holding a secret anywhere (a key, a nested list, a tuple, an object's text, a value split across lines) is
still scrubbed whole. Scrubbing every record string by string cost ~5% of a question's CPU."""

from __future__ import annotations

import json
import random
from collections import OrderedDict

from ragzoo import secrets
from ragzoo.runs import storable_record

ENV_VALUE = "env-secret-value-31337"
SECRETS = [ENV_VALUE, "sk-" + "a1" * 10, "Bearer tok3n-abcdefgh", "Bearer\nzz9zz9zz9zz9", "hf_" + "Q" * 14,
           "AIza" + "x" * 22]
HARMLESS = ["the Torch Bearer in Young Chef Olympiad", "sk-short", "Bearer", "abc12345678", "env-secret",
            "value-31337", "hf_abc", "", "Paris", "wiki17-9e73d92681f61e16", "Bearer of news"]


class Shown:
    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def build(rng: random.Random, leaves: list, depth: int = 0):
    kind = rng.randrange(6 if depth < 3 else 2)
    if kind == 0:
        return rng.choice(leaves)
    if kind == 1:
        return rng.choice([None, True, 3, 2.5, rng.choice(leaves)])
    if kind == 2:
        return {rng.choice(leaves + ["k", "id"]): build(rng, leaves, depth + 1) for _ in range(rng.randrange(4))}
    if kind == 3:
        return [build(rng, leaves, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 4:
        return tuple(build(rng, leaves, depth + 1) for _ in range(rng.randrange(3)))
    if rng.random() < 0.5:  # subclasses of what a record holds (the walk takes exact types first)
        return rng.choice([OrderedDict(a=rng.choice(leaves)), Text(rng.choice(leaves)), Items([rng.choice(leaves)])])
    return Shown(rng.choice(leaves))


class Text(str):
    pass


class Items(list):
    pass


def written(value) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def test_a_clean_record_is_written_as_it_is_and_one_with_a_secret_is_scrubbed(monkeypatch):
    monkeypatch.setenv("RAGZOO_FASTPATH_API_KEY", ENV_VALUE)
    clean = {"id": "q1", "question": "Who bore the torch?", "passages": [{"pid": "p1", "title": "Bearer of news"}],
             "metrics": {"em": 1.0}, "error": None}
    assert storable_record(clean) is clean  # no copy string by string
    dirty = {**clean, "lm_trace": [{"reply": "echo " + ENV_VALUE}]}
    stored = storable_record(dirty)
    assert ENV_VALUE not in written(stored) and "echo ***" in written(stored) and stored["id"] == "q1"


def test_holds_secret_never_misses_what_scrub_would_hide(monkeypatch):
    monkeypatch.setenv("RAGZOO_FASTPATH_API_KEY", ENV_VALUE)
    rng = random.Random(7)
    clean_seen = dirty_seen = 0
    for _ in range(3000):
        leaves = HARMLESS + ([f"x {rng.choice(SECRETS)} y"] * 8 if rng.random() < 0.5 else [])
        value = build(rng, leaves)
        changed = written(secrets.scrub(value)) != written(value)
        if not secrets.holds_secret(value):
            assert not changed, value  # the value is written as it is: scrub must have had nothing to hide
            clean_seen += 1
        elif changed:
            dirty_seen += 1
    assert clean_seen > 500 and dirty_seen > 500


def test_a_database_files_folder_is_not_taken_for_a_token():
    """Review (found through a compile's search): a manifest naming `sqlite:///.../a_long_folder_name_0/s.db`
    registered the folder name as a secret, and every later output showed the path with `***` in it. A file's
    URL is where it is; its password (a database server's URL) is still hidden."""
    folder = "test_a_budget_stop_after_the_b0"
    assert secrets.strip_url(f"sqlite:////tmp/{folder}/s.db") == f"sqlite:////tmp/{folder}/s.db"
    assert secrets.redact(f"saved /tmp/{folder}/ks1") == f"saved /tmp/{folder}/ks1"
    assert secrets.strip_url("postgresql://user:pw9secret@db:5432/grid") == "postgresql://db:5432/grid"
    assert secrets.redact("login pw9secret refused") == "login *** refused"
    token = "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4"
    assert secrets.strip_url(f"https://host/v1/{token}/chat") == "https://host/v1/***/chat"  # an LM URL's token
