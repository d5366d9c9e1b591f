"""`ragzoo report` comparisons that could be wrong without a word (issue 21): questions paired by id AND
question text, `--shared` with nothing shared, runs on two endpoints (or adapters, retrievers, metric
definitions, data), CIs that moved with the file order, p printed as 0.0000, spend vs uncached tokens,
abstentions vs failures, and a grid folder given to `report`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ragzoo.cli import main


def write_run(path: Path, *, ids=range(10), em=None, question="q{}", method="rag", knobs=None, errors=(),
              predictions=None, dataset="hotpotqa", split="dev", order=None, usage=None, **config_extra) -> str:
    """A run directory as `ragzoo.runs` writes it (config.json, predictions.jsonl, summary.json)."""
    path.mkdir(parents=True)
    ids = [str(i) for i in ids]
    config = {"method": method, "knobs": knobs or {"k": 5}, "metrics": ["em"], "n": len(ids), "dataset": dataset,
              "split": split, "adapter": "chat", "retriever": "bm25:corpus.jsonl", "api_base": None,
              "lm": {"model": "openai/stub", "dry_run": False, "api_base": None}, **config_extra}
    (path / "config.json").write_text(json.dumps(config))
    records = []
    for position, i in enumerate(ids):
        score = float(em[position]) if em is not None else 1.0
        prediction = predictions[position] if predictions is not None else ("a" if score else "b")
        records.append({"id": i, "question": question.format(i), "gold": ["a"], "prediction": prediction,
                        "metrics": {"em": score}, "lm_calls": 1, "prompt_tokens": 10, "completion_tokens": 2,
                        "cost": 0.001, "cached_calls": 0, "cached_prompt_tokens": 0, "cached_completion_tokens": 0,
                        "cached_cost": 0.0, "latency": 0.5, **(usage or {}),
                        "error": {"kind": "parse", "message": "x"} if i in errors else None})
    if order is not None:
        records = [records[i] for i in order]
    (path / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "summary.json").write_text(json.dumps({"n": len(ids), "n_expected": len(ids), "complete": True}))
    return str(path)


# --- pairing by question, not by id alone -------------------------------------------------------------------

def test_compare_refuses_same_ids_holding_other_questions(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(20), em=[1, 0] * 10)
    b = write_run(tmp_path / "b", ids=range(20), em=[0, 1] * 10, question="another question {}")
    assert main(["report", a, b, "--compare"]) == 2
    err = capsys.readouterr().err
    assert "20 question(s) with the same id differ" in err and "Traceback" not in err
    # only some ids re-used for other questions: the count names them
    c = write_run(tmp_path / "c", ids=range(20), em=[0] * 20,
                  question="{}")  # questions "0".."19" instead of "q0".."q19"
    d = write_run(tmp_path / "d", ids=range(15), em=[0] * 15)
    e = write_run(tmp_path / "e", ids=range(20), em=[1] * 20)
    assert main(["report", c, e, "--compare"]) == 2
    assert "20 question(s)" in capsys.readouterr().err
    assert main(["report", d, e, "--compare", "--json"]) == 0  # same questions, fewer of them: compared
    assert json.loads(capsys.readouterr().out)["shared"] == 15
    # plain report: the questions are not shared, and it says so
    assert main(["report", a, b]) == 0
    assert "0 shared by all (of 20/20)" in capsys.readouterr().out


def test_compare_warns_about_different_datasets_like_plain_report(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(8), em=[1] * 8)
    b = write_run(tmp_path / "b", ids=range(8), em=[0] * 8, dataset=None, split=None, data="my_questions.jsonl")
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "warning: the runs are on different datasets/splits: hotpotqa/dev vs my_questions.jsonl/None" in out


def test_shared_with_no_shared_question_is_refused(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(5))
    b = write_run(tmp_path / "b", ids=range(5, 10))
    assert main(["report", a, b, "--shared"]) == 2
    err = capsys.readouterr().err
    assert "--shared: the runs share no question (5/5 answered)" in err and "Traceback" not in err


# --- what the runs were run on -------------------------------------------------------------------------------

def test_two_endpoints_of_one_model_are_shown_and_flagged(tmp_path, capsys):
    secret_url = "http://user:s3cr3t-pass@10.0.0.1:8000/v1?api_key=sk-abcdefghijklmnop"
    a = write_run(tmp_path / "a", ids=range(8), em=[1] * 8, api_base=secret_url,
                  lm={"model": "openai/llama", "dry_run": False, "api_base": "10.0.0.1:8000"})
    b = write_run(tmp_path / "b", ids=range(8), em=[0] * 8, knobs={"k": 3}, api_base="http://10.0.0.2:8000/v1",
                  lm={"model": "openai/llama", "dry_run": False, "api_base": "10.0.0.2:8000"})
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "warning: the runs differ in endpoint (http://10.0.0.1:8000/v1 vs http://10.0.0.2:8000/v1)" in out
    assert "LM openai/llama @ http://10.0.0.1:8000/v1, adapter chat" in out
    assert "s3cr3t" not in out and "sk-abc" not in out
    assert main(["report", a, b]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("run "))
    assert header.split()[:6] == ["run", "dataset/split", "LM", "endpoint", "adapter", "optimizer"]
    assert "http://10.0.0.2:8000/v1" in out and "differ in endpoint" in out and "s3cr3t" not in out


@pytest.mark.parametrize("aspect, change", [
    ("LM", {"lm": {"model": "openai/other", "dry_run": False}}),
    ("adapter", {"adapter": "json"}),
    ("retriever", {"retriever": "bm25:other_corpus.jsonl"}),
    ("metric definition", {"preset": "paper"}),
    ("data", {"split": "dev_first500"}),
])
def test_a_comparison_whose_setups_differ_says_in_what(tmp_path, capsys, aspect, change):
    a = write_run(tmp_path / "a", ids=range(6), em=[1, 1, 1, 0, 0, 0])
    b = write_run(tmp_path / "b", ids=range(6), em=[0] * 6, knobs={"k": 3}, **change)
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert f"warning: the runs differ in {aspect} (" in out
    same = write_run(tmp_path / "same", ids=range(6), em=[0] * 6, knobs={"k": 3})
    assert main(["report", a, same, "--compare"]) == 0
    assert "differ in" not in capsys.readouterr().out


def test_a_method_without_retrieval_is_not_flagged_for_its_retriever(tmp_path, capsys):
    rag = write_run(tmp_path / "rag", ids=range(6), em=[1, 1, 1, 0, 0, 0], retriever="bm25:corpus.jsonl")
    direct = write_run(tmp_path / "direct", ids=range(6), em=[0] * 6, method="direct", knobs={}, retriever=None)
    assert main(["report", rag, direct, "--compare"]) == 0
    assert "differ in" not in capsys.readouterr().out


# --- statistics that do not move ------------------------------------------------------------------------------

def test_bootstrap_ci_does_not_depend_on_the_order_of_predictions(tmp_path, capsys):
    scores = [1] * 36 + [0] * 24
    order = list(range(60))
    random.Random(3).shuffle(order)
    a = write_run(tmp_path / "a", ids=range(60), em=scores)
    b = write_run(tmp_path / "b", ids=range(60), em=scores, order=order)  # threads finished in another order
    cis = []
    for run in (a, b):
        assert main(["report", run, "--ci", "--json"]) == 0
        cis.append(json.loads(capsys.readouterr().out)[0]["ci"]["em"])
    assert cis[0] == cis[1]


def test_a_tiny_p_value_is_not_printed_as_zero(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(20), em=[1] * 20)
    b = write_run(tmp_path / "b", ids=range(20), em=[0] * 20, knobs={"k": 3})
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "p < 0.0001" in out and "0.0000" not in out  # exact p = 2 / 2^20


def test_holm_matches_statsmodels_multipletests():
    from ragzoo.stats import format_p, holm

    # statsmodels.stats.multitest.multipletests(p, method="holm")[1], computed by hand:
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, 0.5, 0.01]) == pytest.approx([0.4, 0.5, 0.03])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []
    assert format_p(3e-5) == "< 0.0001" and format_p(0.0625) == "0.0625"


# --- spend and uncached tokens -------------------------------------------------------------------------------

def test_a_cached_run_shows_spend_and_uncached_tokens_and_cost(tmp_path, capsys):
    cached = write_run(tmp_path / "cached", usage={"prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0,
                                                   "cached_calls": 1, "cached_prompt_tokens": 100,
                                                   "cached_completion_tokens": 20, "cached_cost": 0.002})
    paid = write_run(tmp_path / "paid", knobs={"k": 3}, usage={"prompt_tokens": 100, "completion_tokens": 20,
                                                               "cost": 0.002})
    assert main(["report", cached, paid, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["tokens_per_question"] for r in rows] == [0, 120]
    assert [r["uncached_tokens_per_question"] for r in rows] == [120, 120]
    assert [r["cost"] for r in rows] == pytest.approx([0.0, 0.02])
    assert [r["cost_uncached"] for r in rows] == pytest.approx([0.02, 0.02])
    assert main(["report", cached, paid]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert ["spent", "tok/q", "uncached", "tok/q", "spent", "$", "uncached", "$"] == header[4:12]
    assert "spent: tokens and $ paid (calls served from the LM cache cost nothing)" in out


# --- abstentions and failures ---------------------------------------------------------------------------------

def test_compare_states_failures_and_abstentions_per_side(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(10), em=[1] * 7 + [0] * 3, errors={"7", "8", "9"},
                  predictions=["a"] * 7 + [None] * 3)
    b = write_run(tmp_path / "b", ids=range(10), em=[1] * 8 + [0] * 2, knobs={"k": 3},
                  predictions=["a"] * 8 + ["unknown", "Unknown."])
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "failed (scored 0): A 3, B 0" in out
    assert 'abstained ("unknown", scored 0, counted in %Unk): A 0, B 2' in out
    assert "both answered" not in out


def _unknown_then_yes():
    from ragzoo.stubserver import _system_of, adapter_answer, prompt_style, render_answer

    count = {"n": 0}

    def responder(messages, body=None):
        system = _system_of(messages)
        values = adapter_answer(system)
        count["n"] += 1
        if "answer" in values:
            values["answer"] = "unknown" if count["n"] % 2 else "yes"
        return render_answer(values, prompt_style(system))

    return responder


def test_strategyqa_paper_preset_reads_unknown_as_an_abstention(tmp_path, capsys, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    out = tmp_path / "run"
    with StubLMServer(_unknown_then_yes()) as server:
        assert main(["evaluate", "--method", "cot", "--dataset", "strategyqa", "--preset", "paper", "-n", "4",
                     "--metric", "acc,unknown", "--lm", "openai/stub", "--api-base", f"{server.base_url}/v1",
                     "--no-cache", "--out", str(out)]) == 0  # exit 4 if any example failed
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == [None] * 4
    assert sorted(r["prediction"] for r in records) == ["unknown", "unknown", "yes", "yes"]
    unknown = [r for r in records if r["prediction"] == "unknown"]
    assert [r["metrics"] for r in unknown] == [{"acc": 0.0, "unknown": 1.0}] * 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failures"] == 0 and summary["metrics"]["unknown"] == pytest.approx(0.5)
    capsys.readouterr()
    other = write_run(tmp_path / "other", ids=[r["id"] for r in records], em=None)
    # the same questions, so --compare pairs them (questions and golds as the run recorded them)
    lines = [json.dumps({**r, "metrics": {"acc": 1.0}}) + "\n" for r in records]
    (Path(other) / "predictions.jsonl").write_text("".join(lines))
    config = json.loads((Path(other) / "config.json").read_text())
    (Path(other) / "config.json").write_text(json.dumps({**config, "metrics": ["acc"], "dataset": "strategyqa",
                                                         "split": records and "train_first500"}))
    assert main(["report", str(out), other, "--compare", "--metric", "acc"]) == 0
    text = capsys.readouterr().out
    assert "failed (scored 0): A 0, B 0" in text and "A 2, B 2" in text  # B replays A's predictions
    assert main(["report", str(out), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["failures"] == 0 and row["abstained"] == 2 and row["metrics"]["unknown"] == pytest.approx(0.5)


# --- a grid folder ----------------------------------------------------------------------------------------------

GRID = """
[grid]
name = "cmp"
n = 20
lms = [{{ spec = "openai/stub", api_base = "http://127.0.0.1:9/v1" }}]
main = "rag"

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]
label = "HotPotQA"

[[methods]]
id = "direct"
label = "Direct"

[[methods]]
id = "cot"
label = "CoT"

[[methods]]
id = "rag"
label = "RAG"
"""


def test_report_of_a_grid_folder_prints_its_table_with_holm_adjusted_p(tmp_path, capsys):
    from ragzoo.grid.runner import cell_dir, write_grid_file
    from ragzoo.grid.spec import load_grid

    spec = tmp_path / "cmp.toml"
    spec.write_text(GRID.format(), encoding="utf-8")
    grid = load_grid(spec)
    out = tmp_path / "g"
    write_grid_file(grid, out, grid.cells())
    scores = {"direct": [0] * 20, "cot": [1] * 10 + [0] * 10, "rag": [1] * 20}
    for cell in grid.cells():
        write_run(cell_dir(out, cell) / "run", ids=range(20), em=scores[cell.method.id], method=cell.method.id,
                  dataset="hotpotqa", split="dev_first500")
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| Direct |" in text and "| CoT |" in text and "| RAG |" in text
    assert "Holm-adjusted over the 2 comparisons of this table" in text
    # RAG vs Direct: exact p = 2/2^20, adjusted x2 -> still < 0.0001; RAG vs CoT: 2/2^10 = 0.00195 -> x1
    assert "| RAG | Direct | HotPotQA | em | 20 (of 20/20) | +1.000" in text
    direct = next(line for line in text.splitlines() if line.startswith("| RAG | Direct |"))
    cot = next(line for line in text.splitlines() if line.startswith("| RAG | CoT |"))
    assert "| < 0.0001 | < 0.0001 |" in direct and "0.0000" not in text
    assert "| 0.0020 | 0.0020 |" in cot
    for cell in grid.cells():
        assert str(cell_dir(out, cell) / "run") in text  # its cells, by run directory
    # beside other runs, a grid folder stands for its cells' runs
    other = write_run(tmp_path / "other", ids=range(20), em=[1] * 20, method="rag", knobs={"k": 9})
    assert main(["report", str(out), other, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4
    spec.unlink()  # the grid file is gone: said in one line, pointing at the saved table
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cmp.toml it was swept from is gone" in err and "results.md" in err and err.count("\n") == 1
    # not a grid folder and not a run: the one-line refusal
    assert main(["report", str(tmp_path)]) != 0
    assert "not a ragzoo run directory" in capsys.readouterr().err


# --- a knob search whose trials tie ------------------------------------------------------------------------------

def test_a_knob_search_whose_trials_tie_says_so_with_each_trials_ci(tmp_path, capsys, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"Title {i}", "text": f"magazine fact {i}"}) + "\n"
                              for i in range(30)))
    with StubLMServer() as server:  # placeholder answers: every trial scores 0 on dev
        code = main(["compile", "--method", "rag", "--dataset", "hotpotqa", "--train-n", "2", "--dev-n", "3",
                     "--optimizer", "none", "--search", "k=1,2", "--lm", "openai/stub", "--api-base",
                     f"{server.base_url}/v1", "--no-cache", "--retriever", f"bm25:{corpus}",
                     "--out", str(tmp_path / "best")])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    trials = [line for line in out.splitlines() if line.startswith("trial ")]
    assert len(trials) == 2 and all("=0.000 [95% CI 0.000, 0.000]" in line for line in trials), trials
    assert "no best, 2 trials tie at dev em=0.000 (k=" in out and "best k=" not in out


def test_a_rerun_served_from_the_cache_reports_spend_zero_and_the_same_uncached_tokens(tmp_path, capsys, monkeypatch):
    from ragzoo.stubserver import StubLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    runs = [tmp_path / "first", tmp_path / "again"]
    with StubLMServer() as server:
        for out in runs:  # the same requests twice: the second run is answered by DSPy's cache
            assert main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "3", "--lm", "openai/stub",
                         "--api-base", f"{server.base_url}/v1", "--out", str(out), "--seed", "7"]) == 0
        assert server.requests == 3
    capsys.readouterr()
    assert main(["report", *map(str, runs), "--json"]) == 0
    first, again = json.loads(capsys.readouterr().out)
    assert first["tokens_per_question"] > 0 and first["cached_calls"] == 0
    assert again["tokens_per_question"] == 0 and again["cost"] == 0 and again["cached_calls"] == 3
    assert again["uncached_tokens_per_question"] > 0
    assert again["uncached_tokens_per_question"] == pytest.approx(first["uncached_tokens_per_question"], rel=0.3)
