"""The CLI path: optimizers list, secrets refused, report table and plot, and compile + evaluate + ask through
the real dspy.LM against the loopback OpenAI-compatible stub server."""

from __future__ import annotations

import json

import pytest

from ragzoo.cli import main


def _write_run(path, method, em, calls):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"method": method, "metrics": ["em"], "n": 2}))
    lines = [{"id": str(i), "metrics": {"em": em}, "lm_calls": calls, "prompt_tokens": 10, "completion_tokens": 2,
              "cost": 0.001, "latency": 0.1, "error": None} for i in range(2)]
    (path / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_report_table_and_plot(tmp_path, capsys):
    _write_run(tmp_path / "a", "rag", 0.5, 1)
    _write_run(tmp_path / "b", "blendfilter", 1.0, 13)
    plot = tmp_path / "plot.png"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["method", "n", "em", "calls/q", "spent", "tok/q", "uncached", "tok/q", "spent", "$",
                              "uncached", "$", "failures"]
    assert out[1].split()[:4] == ["rag", "2", "0.500", "1.00"] and out[2].split()[:4] == ["blendfilter", "2",
                                                                                          "1.000", "13.00"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_optimizers_listed(capsys):
    assert main(["optimizers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    if lines and lines[0].split()[:1] == ["optimizer"]:  # the header row
        lines = lines[1:]
    names = [line.split()[0] for line in lines if line.strip() and not line[0].isspace()]  # not wrapped text
    assert names == ["none", "labeled", "bootstrap", "bootstrap-rs", "optuna", "mipro", "gepa", "simba", "knn",
                     "ensemble"]


@pytest.mark.parametrize("argv", [
    ["evaluate", "--method", "rag", "--lm", "openai/x", "--api-key", "sk-abcdefghijklmnopqrstu", "--out", "x"],
    ["compile", "--method", "rag", "--dataset", "hotpotqa", "--lm", "openai/sk-abcdefghijklmnopqrstuvw"],
    ["ask", "--method", "rag", "--lm", "openai/x", "--retriever", "Bearer abcdefgh", "question?"],
])
def test_secrets_refused_with_one_line(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "environment" in err[0] and "sk-abc" not in err[0]
    assert list(tmp_path.iterdir()) == []


def test_existing_out_refused(tmp_path, capsys):
    (tmp_path / "art").mkdir()
    code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--lm", "dry-run", "--out",
                 str(tmp_path / "art")])
    assert code == 2 and "already exists" in capsys.readouterr().err


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": str(i), "title": f"Topic {i}", "text": f"Topic {i} is a thing about subject {i}."} for i in range(20)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_cli_compile_evaluate_ask_against_stub_server(tmp_path, corpus, capsys, data_dir):
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        common = ["--lm", "openai/stub-model", "--api-base", server.base_url + "/v1",
                  "--retriever", f"bm25:{corpus}"]
        art = tmp_path / "art"
        assert main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "2",
                     "--optimizer", "bootstrap", "--out", str(art), "--no-cache", *common]) == 0
        manifest = json.loads((art / "manifest.json").read_text())
        assert manifest["method"] == "rag" and manifest["optimizer"] == "bootstrap"
        assert manifest["lm"]["model"] == "openai/stub-model"
        assert "ragzoo-no-key" not in (art / "manifest.json").read_text()  # the placeholder key is masked
        compile_requests = server.requests
        assert manifest["usage"]["lm_calls"] == compile_requests > 0
        run = tmp_path / "run"
        assert main(["evaluate", "--program", str(art), "--dataset", "hotpotqa", "--split", "dev", "-n", "3",
                     "--out", str(run), "--threads", "2", "--no-cache", *common]) == 0
        lines = (run / "predictions.jsonl").read_text().splitlines()
        assert len(lines) == 3 and server.requests == compile_requests + 3
        summary = json.loads((run / "summary.json").read_text())
        assert summary["usage"]["lm_calls"] == 3 and summary["failures"] == 0
        assert json.loads((run / "config.json").read_text())["program"] == str(art)
        capsys.readouterr()
        assert main(["ask", "--program", str(art), "What is topic 3?", *common]) == 0
        out = capsys.readouterr().out
        assert "answer:" in out and "generate_answer" in out and "Topic 3" in out


def test_cli_dry_run_prints_stage_estimates(tmp_path, corpus, capsys, data_dir):
    code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "5", "--dev-n", "3",
                 "--dry-run", "--lm", "openai/gpt-4o-mini", "--retriever", f"bm25:{corpus}"])
    assert code == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    # under the dry-run LM every trace passes, as with a model that gets the training questions right: bootstrap
    # stops after its 3 demos (not all 5 training questions), and validation prompts carry the demos
    assert rows["compile"][1] == "3" and rows["validation"][1] == "3" and rows["total"][2] == "6"
    assert float(rows["total"][-1]) > 0 and "gpt-4o-mini" in out and not list(tmp_path.glob("art*"))
