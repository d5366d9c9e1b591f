"""Paths that broke between rooms (issue 11), each through the CLI: the `fixed` retriever from evaluate,
compile and ask; ask's budget; a knob search's total budgets; abbreviations refused; `compile --data`;
defaults shown in `--help`."""

from __future__ import annotations

import json

import pytest

from ragzoo.cli import main

ACTIVERAG = ["--dataset", "nq_open", "--split", "dev_activerag500"]


def _recorded(data_dir, n: int = 2) -> list[dict]:
    path = data_dir / "nq_open" / "dev_activerag500.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:n]]


def _recorded_titles(record: dict) -> set[str]:
    titles = set()
    for item in record["retrieved"]:
        if isinstance(item, dict):
            titles.add(str(item.get("title", "")))
        else:
            titles.add(str(item).split(" | ", 1)[0])
    return titles


# -- the fixed retriever -------------------------------------------------------------------------------------

def test_evaluate_with_the_fixed_retriever_replays_the_recorded_passages(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    code = main(["evaluate", "--method", "rag", "--retriever", "fixed", *ACTIVERAG, "-n", "2", "--lm", "dry-run",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["retriever"] == "fixed"
    records = {r["question"]: r for r in _recorded(data_dir, 500)}
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        titles = {p["title"] for p in line["passages"]}
        assert titles and titles <= _recorded_titles(records[line["question"]])


def test_compile_then_evaluate_with_the_fixed_retriever(tmp_path, capsys):
    art = tmp_path / "art"
    code = main(["compile", "--method", "rag", "--retriever", "fixed", *ACTIVERAG, "--train-n", "2", "--dev-n", "1",
                 "--optimizer", "none", "--lm", "dry-run", "--out", str(art)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((art / "manifest.json").read_text())["retriever"] == "fixed"
    # the artifact's `fixed` retriever is rebuilt from the questions being evaluated
    run = tmp_path / "run"
    assert main(["evaluate", "--program", str(art), *ACTIVERAG, "-n", "2", "--lm", "dry-run",
                 "--out", str(run)]) == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n"] == 2 and summary["failures"] == 0


def test_ask_with_the_fixed_retriever(capsys, data_dir):
    record = _recorded(data_dir, 1)[0]
    assert main(["ask", "--method", "rag", "--retriever", "fixed", *ACTIVERAG, "--lm", "dry-run",
                 record["question"]]) == 0
    out = capsys.readouterr().out
    assert "passages (5)" in out and any(title in out for title in _recorded_titles(record))


@pytest.mark.parametrize("extra, needle", [
    ([], "--dataset"),  # nothing to replay from
    (ACTIVERAG, "not in nq_open/dev_activerag500"),  # a question without recorded passages
])
def test_ask_with_the_fixed_retriever_says_what_is_missing(extra, needle, capsys):
    code = main(["ask", "--method", "rag", "--retriever", "fixed", *extra, "--lm", "dry-run",
                 "a question nobody recorded?"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err and "fixed retriever" in err


# -- budgets -------------------------------------------------------------------------------------------------

def test_ask_holds_max_calls(capsys):
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        code = main(["ask", "--method", "direct", "--lm", "openai/stub-model", "--api-base",
                     server.base_url + "/v1", "--no-cache", "--max-calls", "0", "Who wrote The Hobbit?"])
        assert server.requests == 0  # the call past the budget is never sent
    captured = capsys.readouterr()
    assert code == 3 and captured.err.count("\n") == 1 and "max-calls" in captured.err
    assert "answer:" not in captured.out


def test_ask_dry_run_over_budget_exits_3(capsys):
    assert main(["ask", "--method", "direct", "--lm", "dry-run", "--max-calls", "0", "Who wrote it?"]) == 3
    assert "stopped" in capsys.readouterr().err


def test_knob_search_gets_both_budgets(tmp_path, capsys, monkeypatch):
    import ragzoo.optimizers

    seen = {}

    def fake_search(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(ragzoo.optimizers, "search_knobs", fake_search)
    monkeypatch.setenv("RAGZOO_DEBUG", "")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"T{i}", "text": f"fact {i}"}) + "\n"
                              for i in range(10)))
    main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "1", "--optimizer",
          "none", "--search", "k=1,2", "--lm", "dry-run", "--retriever", f"bm25:{corpus}", "--max-calls", "7",
          "--max-cost", "0.5", "--out", str(tmp_path / "x")])
    assert seen["max_calls"] == 7 and seen["max_cost"] == 0.5


def test_knob_search_budget_is_a_total_over_trials(tmp_path, capsys):
    from ragzoo.stubserver import StubLMServer

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"T{i}", "text": f"fact {i}"}) + "\n"
                              for i in range(10)))
    with StubLMServer() as server:
        # 3 trials x 2 validation questions = 6 calls without a budget; a per-trial budget of 3 allows all 6
        code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "2",
                     "--optimizer", "none", "--search", "k=1,2", "--trials", "3", "--max-calls", "3",
                     "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1", "--no-cache",
                     "--retriever", f"bm25:{corpus}", "--out", str(tmp_path / "best")])
        requests = server.requests
    err = capsys.readouterr().err
    assert 0 < requests <= 3, (requests, err)
    assert code == 3 and "stopped" in err, err  # a budget stop, as for compile and evaluate
    if (tmp_path / "best").exists():  # the best program so far is kept, and says it was stopped
        assert json.loads((tmp_path / "best" / "manifest.json").read_text())["stopped"]


# -- parsing -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["compile", "--method", "direct", "--datas", "hotpotqa", "--lm", "dry-run"],
    ["evaluate", "--meth", "direct", "--dataset", "hotpotqa", "--lm", "dry-run", "--out", "x"],
    ["ask", "--meth", "direct", "--lm", "dry-run", "who?"],
    ["index", "build", "--corp", "x.jsonl"],
    ["--vers"],
])
def test_abbreviated_flags_are_refused(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as excinfo:
        main(argv)
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err or "required: --corpus" in err, err  # never read as the full flag
    assert list(tmp_path.iterdir()) == []


def test_compile_reads_data_as_a_question_file(tmp_path, capsys):
    questions = tmp_path / "my.csv"
    questions.write_text("q,gold\nwho wrote it?,me\nwhat is it?,that\nwhen was it?,then\n")
    art = tmp_path / "art"
    code = main(["compile", "--method", "direct", "--data", str(questions), "--field-map", "question=q,answers=gold",
                 "--train-n", "2", "--dev-n", "1", "--optimizer", "labeled", "--lm", "dry-run", "--out", str(art)])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["data"] == str(questions) and manifest["dataset"] is None
    assert manifest["sizes"] == {"train": 2, "dev": 1}
    demos = json.dumps(json.loads((art / "program.json").read_text()))
    assert sum(q in demos for q in ("who wrote it?", "what is it?", "when was it?")) == 2


def test_compile_refuses_dataset_and_data_together(tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "who?", "answers": ["x"]}) + "\n")
    code = main(["compile", "--method", "direct", "--dataset", "hotpotqa", "--data", str(questions),
                 "--lm", "dry-run", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not both" in err


@pytest.mark.parametrize("command, needles", [
    ("evaluate", ["default: the whole split", "default 1", "default: the dataset's", "strategyqa: acc",
                  "bm25:hotpotqa/corpus_wiki17_abstracts.jsonl"]),
    ("compile", ["default 50", "default bootstrap", "strategyqa: acc", "default: held out"]),
    ("ask", ["default: no limit", "default 0"]),
    ("serve", ["default: 8893"]),
])
def test_help_shows_defaults(command, needles, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needle in needles:
        assert needle in out, needle
