"""FILCO's CXMI requests under --max-cost (tests/programs/test_filco_cxmi_usage.py bounds them by --max-calls only;
a mutant that reserved nothing for a request's cost before sending it survived): each request reserves what it
could cost before it is sent, so the compile never spends past --max-cost."""

from __future__ import annotations

from tests.programs.test_filco_cxmi_usage import Upstream, _compile

PER_REQUEST = 2e-5  # 10 prompt tokens x 1e-6 + 5 completion tokens x 2e-6, as the loopback server reports them


def test_max_cost_bounds_the_cxmi_requests_before_they_are_sent(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")

    class Server(Upstream):
        completions, chats = [], []

    budget = 2.5 * PER_REQUEST
    code, manifest, printed = _compile(tmp_path, Server, capsys, "--max-cost", f"{budget:g}")
    assert code == 3, printed  # a budget stop, said in one line
    assert "budget" in printed and "Traceback" not in printed, printed
    # what was sent stays within the budget: the request that could pass it is never sent
    assert len(Server.completions) * PER_REQUEST <= budget, len(Server.completions)


def test_token_counts_a_server_reports_in_another_shape_count_as_none(tmp_path, capsys, monkeypatch):
    import tests.programs.test_filco_cxmi_usage as base

    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    # a server's usage with a string and a boolean where the counts go: not counts, so 0 tokens, not a crash
    monkeypatch.setattr(base, "USAGE", {"prompt_tokens": "10", "completion_tokens": True, "total_tokens": -3})

    class Server(base.Upstream):
        completions, chats = [], []

    code, manifest, printed = base._compile(tmp_path, Server, capsys)
    assert code == 0, printed
    (stage,) = [s for s in manifest["stages"] if s["stage"] == "stage:filter"]
    assert stage["lm_calls"] == len(Server.completions) > 3
    assert stage["prompt_tokens"] == 0 and stage["completion_tokens"] == 0
