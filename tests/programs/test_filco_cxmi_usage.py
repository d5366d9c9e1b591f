"""FILCO's CXMI scoring requests (`/completions` with echo=True, logprobs=1, to the compile LM's own server) are LM
requests that are paid for: they go through the one usage meter (`ragzoo.usage`), so the compile's calls, tokens
and cost include them (the filter stage's row, the totals, `by_signature`), and `--max-calls` / `--max-cost` bound
them like any other call. Before, they were counted only as `logprob_requests` in the stage record."""

from __future__ import annotations

import json
import re

from ragzoo.stubserver import adapter_responder
from ragzoo.testing import JSONHandler, LoopbackHTTPServer

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
PRICE = "1,2"  # USD per million prompt, completion tokens: 10 x 1e-6 + 5 x 2e-6 per request


def _echo_logprobs(prompt: str) -> dict:
    tokens = list(re.finditer(r"\s*\S+", prompt))
    cut = prompt.rindex("answer:") + len("answer:")
    return {"tokens": [t.group() for t in tokens], "text_offset": [t.start() for t in tokens],
            "token_logprobs": [None if t.start() == 0 else (-0.5 if t.start() >= cut else -1.0) for t in tokens],
            "top_logprobs": None}


class Upstream(JSONHandler):
    """An OpenAI-compatible loopback server: chat completions answer placeholders, /completions echoes prompt
    log-probabilities (as vLLM does); every reply reports USAGE."""

    completions: list = []
    chats: list = []

    def do_GET(self):
        self.reply(200, {"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions"):
            type(self).chats.append(body)
            self.reply(200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "message": {"role": "assistant",
                                                                  "content": adapter_responder(body["messages"])},
                                          "finish_reason": "stop"}], "usage": USAGE})
        elif self.path.endswith("/completions"):
            type(self).completions.append(body)
            self.reply(200, {"id": "t", "object": "text_completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "text": body["prompt"] + " x", "finish_reason": "length",
                                          "logprobs": _echo_logprobs(body["prompt"])}], "usage": USAGE})
        else:
            self.reply(404, {"error": {"message": "not found"}})


def _compile(tmp_path, upstream, capsys, *flags) -> tuple[int, dict, str]:
    from ragzoo.cli import main

    out = tmp_path / "filco"
    with LoopbackHTTPServer(upstream) as server:
        code = main(["compile", "--method", "filco", "--dataset", "hotpotqa", "--optimizer", "labeled",
                     "--train-n", "3", "--dev-n", "0", "--lm", "openai/loopback", "--api-base",
                     server.base_url + "/v1", "--no-cache", "--price", PRICE, "--out", str(out), *flags])
    printed = capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").is_file() else {}
    return code, manifest, printed.out + printed.err


def test_cxmi_requests_are_counted_as_lm_calls_with_their_tokens_and_cost(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")

    class Server(Upstream):
        completions, chats = [], []

    code, manifest, printed = _compile(tmp_path, Server, capsys)
    assert code == 0, printed
    (record,) = manifest["compile_stages"]
    assert record["measure"] == "cxmi"
    sent = len(Server.completions)  # the probe and every scoring request
    assert sent > 3 and not Server.chats  # labeled demos: no chat call, so every call below is a CXMI request
    (stage,) = [s for s in manifest["stages"] if s["stage"] == "stage:filter"]
    assert stage["lm_calls"] == sent
    assert stage["prompt_tokens"] == 10 * sent and stage["completion_tokens"] == 5 * sent
    assert abs(stage["cost"] - sent * 2e-5) < 1e-9
    assert manifest["usage"]["lm_calls"] == sent and abs(manifest["cost"] - sent * 2e-5) < 1e-9
    assert manifest["usage"]["by_signature"]["filco.cxmi"]["calls"] == sent
    assert re.search(rf"stage:filter\s+{sent}\s+0\s+{10 * sent}\s+{5 * sent}", printed), printed


def test_max_calls_bounds_the_cxmi_requests(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")

    class Server(Upstream):
        completions, chats = [], []

    code, manifest, printed = _compile(tmp_path, Server, capsys, "--max-calls", "4")
    assert len(Server.completions) <= 4, len(Server.completions)
    assert code == 3, printed  # a budget stop
    assert "budget" in printed and "Traceback" not in printed, printed
