"""`ragzoo compile --search`: the knob search from the command line saves the best program with its trials."""

from __future__ import annotations

import json

from ragzoo.cli import main


def _corpus(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"Title {i}", "text": f"magazine fact {i}"}) + "\n"
                              for i in range(30)))
    return corpus


def test_search_saves_the_best_program_and_its_trials(tmp_path, capsys):
    out = tmp_path / "best"
    code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "2",
                 "--optimizer", "none,labeled", "--search", "k=1,2", "--trials", "3", "--lm", "dry-run",
                 "--retriever", f"bm25:{_corpus(tmp_path)}", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "knob search over 3 trials" in printed and "n/a (dry-run" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    trials = manifest["knob_search"]["trials"]
    assert len(trials) == 3 and {t["optimizer"] for t in trials} <= {"none", "labeled"}
    assert manifest["knobs"]["k"] in (1, 2) and manifest["optimizer"] in ("none", "labeled")


def test_several_optimizers_without_search_are_refused(tmp_path, capsys):
    code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--optimizer", "none,labeled",
                 "--lm", "dry-run", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "--search" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_search_prints_typed_trials_once_each_and_resumes_from_its_storage(tmp_path, capsys):
    storage = f"journal:{tmp_path / 'search.log'}"
    args = ["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "4", "--dev-n", "2",
            "--optimizer", "none,labeled", "--search", "k=1,2", "--trials", "12", "--lm", "dry-run",
            "--retriever", f"bm25:{_corpus(tmp_path)}", "--out", str(tmp_path / "best"), "--storage", storage]
    assert main(args) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("trial ")]
    assert len(lines) == 4 and len(set(lines)) == 4  # a 2x2 grid: each point once, not 12 trials
    assert all("=n/a" in line and "LM calls 2" in line for line in lines), lines  # 2 dev questions each
    assert "more than the grid's 4 points" in captured.err
    search = json.loads((tmp_path / "best" / "manifest.json").read_text())["knob_search"]
    trials = search["trials"]
    assert search["space"] == {"k": [1, 2]} and search["grid_size"] == 4
    assert sorted((t["knobs"]["k"], t["optimizer"]) for t in trials) == [
        (1, "labeled"), (1, "none"), (2, "labeled"), (2, "none")]  # k=1 the int, not "1"
    # the same command again: every trial is in the storage, none is run
    assert main([*args, "--force"]) == 0, capsys.readouterr().err
    assert "0 run here" in capsys.readouterr().out


def test_a_budget_stop_after_the_best_trial_ran_before_says_so_and_saves_nothing(tmp_path, capsys):
    """Review: a search resumed from its storage, stopped by the budget while its best trial had run in an earlier
    run, crashed (AttributeError 'NoneType' ... named_predictors): no budget was left to compile the best again."""
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        args = ["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "3", "--dev-n", "3",
                "--optimizer", "none", "--search", "k=3,5", "--storage", f"sqlite:///{tmp_path / 's.db'}",
                "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1",
                "--retriever", f"bm25:{_corpus(tmp_path)}"]
        assert main([*args, "--trials", "1", "--out", str(tmp_path / "ks1")]) == 0, capsys.readouterr().err
        capsys.readouterr()
        code = main([*args, "--trials", "2", "--max-calls", "1", "--no-cache", "--out", str(tmp_path / "ks2")])
    err = capsys.readouterr().err
    assert code == 3 and "internal error" not in err, err
    assert "the search is not finished and saved nothing" in err and "a larger --max-calls/--max-cost" in err
    assert not (tmp_path / "ks2").exists()


def test_a_search_budget_counts_what_the_stored_trials_spent_and_only_the_finishing_run_saves(tmp_path, capsys):
    """Review: each rerun of a budget-stopped search started its budget at 0 (7 + 7 + 6 calls under --max-calls 7),
    and a budget-stopped worker saved its partial best at --out and took the search's one "saved" claim, so the
    worker that finished the search saved nothing."""
    from ragzoo.stubserver import StubLMServer

    out = tmp_path / "best"
    with StubLMServer() as server:
        args = ["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "3",
                "--optimizer", "none", "--search", "k=1,2,3,4", "--storage", f"sqlite:///{tmp_path / 's.db'}",
                "--lm", "openai/stub-model", "--api-base", server.base_url + "/v1", "--no-cache",
                "--retriever", f"bm25:{_corpus(tmp_path)}", "--out", str(out)]
        assert main([*args, "--max-calls", "7"]) == 3
        err = capsys.readouterr().err
        assert "the search is not finished and saved nothing" in err and not out.exists(), err
        assert server.requests == 7
        assert main([*args, "--max-calls", "7"]) == 3  # the same budget again: spent already, nothing sent
        capsys.readouterr()
        assert server.requests == 7 and not out.exists()
        assert main([*args, "--max-calls", "14"]) == 0, capsys.readouterr().err
        assert server.requests == 13  # the cut trial again (3) and the last one (3); the best needs no calls
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest.get("stopped") and len(manifest["knob_search"]["trials"]) == 4


def test_a_knob_given_twice_and_search_options_without_a_search_are_refused(tmp_path, capsys):
    """`--search k=3 --search k=5` searched k=5 alone and `--knob k=3 --knob k=5` compiled k=5, the first value
    dropped without a word; `--storage`/`--trials` without `--search` were ignored (no resumable, shared search)."""
    base = ["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "2", "--lm",
            "dry-run", "--optimizer", "none", "--retriever", f"bm25:{_corpus(tmp_path)}", "--out", str(tmp_path / "o")]
    cases = {("--search", "k=3", "--search", "k=5"): "knob 'k' is given twice (k=3 and k=5)",
             ("--knob", "k=3", "--knob", "k=5"): "knob 'k' is given twice (k=3 and k=5)",
             ("--storage", f"sqlite:///{tmp_path / 's.db'}"): "--storage and --trials belong to a knob search",
             ("--trials", "3"): "--storage and --trials belong to a knob search",
             ("--knob", "k=3", "--search", "k=5"): "--knob and --search cannot be combined"}
    for extra, message in cases.items():
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "bm25" not in err, (extra, err)  # before the index
    assert not (tmp_path / "o").exists() and not (tmp_path / "s.db").exists()
