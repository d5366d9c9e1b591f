"""An endpoint given through the environment (HF_ENDPOINT, an OpenAI-compatible base URL, a proxy) is a URL the
libraries ragzoo calls echo in their own log lines and errors (huggingface_hub/datasets log "... thrown while
requesting HEAD https://user:password@mirror/..."), whoever prints them: its credentials are known secrets, so
`redact` (every stream of the CLI, every record) hides them, as it hides a `*_TOKEN` variable's value."""

from __future__ import annotations

import pytest

PASSWORD = "s3cretPassQ7"
TOKEN = "tok3nValueZ9x"


@pytest.mark.parametrize("name", ["HF_ENDPOINT", "OPENAI_BASE_URL", "OPENAI_API_BASE", "HTTPS_PROXY", "https_proxy"])
def test_the_credentials_of_an_endpoint_in_the_environment_are_redacted(monkeypatch, name):
    from ragzoo.secrets import redact

    url = f"https://reader:{PASSWORD}@127.0.0.1:9/v1?token={TOKEN}"
    monkeypatch.setenv(name, url)
    line = f"'[Errno 111] Connection refused' thrown while requesting HEAD {url}/datasets/x/resolve/main/README.md"
    shown = redact(line)
    assert PASSWORD not in shown and TOKEN not in shown, shown
    assert "127.0.0.1:9" in shown and "thrown while requesting HEAD" in shown  # the rest of the line is kept


def test_an_endpoint_without_credentials_changes_nothing(monkeypatch):
    from ragzoo.secrets import redact

    monkeypatch.setenv("HF_ENDPOINT", "https://hub-mirror.example.org/api/v1")
    line = "requesting https://hub-mirror.example.org/api/v1/datasets/hotpotqa/hotpot_qa"
    assert redact(line) == line


@pytest.mark.parametrize("given, shown", [
    ("https://reader:{password}@127.0.0.1:9/v1?token={token}", "https://127.0.0.1:9/v1"),
    ("htp://reader:{password}@127.0.0.1:9/v1?token={token}", "htp://127.0.0.1:9/v1"),  # a misspelt scheme
    ("reader:{password}@127.0.0.1:9/v1?token={token}", "127.0.0.1:9/v1"),  # the scheme forgotten
    ("127.0.0.1:9/v1?token={token}", "127.0.0.1:9/v1"),
])
def test_an_endpoint_is_shown_without_its_credentials_with_its_scheme_or_without(given, shown):
    """`strip_endpoint`: the one rule for an address a user gave (a ColBERTv2 server, a hub mirror), which may
    come without its scheme or with a misspelt one; what it removes is registered, so redact hides it anywhere."""
    from ragzoo.secrets import redact, strip_endpoint

    password, token = f"{PASSWORD}{len(given)}", f"{TOKEN}{len(given)}"
    assert strip_endpoint(given.format(password=password, token=token)) == shown
    echoed = redact(f"GET {given.format(password=password, token=token)} failed")
    assert token not in echoed and (password not in echoed or "{password}" not in given), echoed


def test_a_hub_mirror_without_its_scheme_is_named_without_its_credentials(monkeypatch):
    from ragzoo.retrieval.fetch import hub_shown

    monkeypatch.setenv("HF_ENDPOINT", f"mirror:{PASSWORD}x@127.0.0.1:9/hub/")
    assert hub_shown() == "127.0.0.1:9/hub"
