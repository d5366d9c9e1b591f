"""`ragzoo report` shows each run's attribution and stage diagnostics, and `report --compare` the flips by
class, from run directories written by scripted runs whose classes are known."""

from __future__ import annotations

import json

import dspy

from ragzoo.cli import main
from ragzoo.programs import get
from ragzoo.runs import PREDICTIONS_FILE, evaluate
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example

QUESTIONS = [example(qid=f"q{i}") for i in range(4)]


def _run(tmp_path, name, retriever, answers):
    lm = ScriptedLM({"generate_answer": [{"answer": answer} for answer in answers]})
    with dspy.context(lm=lm):
        evaluate(get("rag", retriever=retriever, k=2), QUESTIONS, "em", tmp_path / name, progress=False,
                 config={"method": name}, abort_failure_rate=None)
    return str(tmp_path / name)


def test_report_shows_attribution_and_stages_and_compare_shows_flips(tmp_path, capsys):
    finds = StaticRetriever([PARIS, *DISTRACTORS])  # the word overlap ranks the Paris passage first
    misses = StaticRetriever(DISTRACTORS, by_query={QUESTIONS[0].question: DISTRACTORS[:2]})
    good = _run(tmp_path, "good", finds, ["Paris", "Paris", "Paris", "Lyon"])  # 3 correct, 1 reader miss
    bad = _run(tmp_path, "bad", misses, ["Lyon", "Lyon", "Paris", "unknown"])  # 2 retrieval misses, 1 abstained
    assert main(["report", good, bad]) == 0
    out = capsys.readouterr().out
    assert "good: correct 3 (75% [" in out and "reader miss 1 (25% [" in out
    assert "bad: correct 1 (25% [" in out and "retrieval miss 2 (50% [" in out and "abstained 1 (25% [" in out
    assert "good / retrieval: records 4, calls 0.00, passages 2.00, answer_in_passages 1.00" in out
    assert "bad / reader: records 4, calls 1.00" in out

    assert main(["report", "--compare", good, bad]) == 0
    out = capsys.readouterr().out
    assert "A right, B wrong: 2, of which B retrieval miss 2" in out
    assert "B right, A wrong: 0" in out
    assert main(["report", "--compare", "--json", good, bad]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["flips"]["a_right_b_wrong"] == {"count": 2, "by_class": {"retrieval_miss": 2}}


def test_a_run_written_before_stage_records_still_reports(tmp_path, capsys):
    old = _run(tmp_path, "old", StaticRetriever([PARIS, *DISTRACTORS]), ["Paris"])
    path = tmp_path / "old" / PREDICTIONS_FILE
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for key in ("stages", "attribution", "gold_pids", "evidence"):
            record.pop(key)
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    assert main(["report", old]) == 0
    assert "old: no attribution (a run written before stage records)" in capsys.readouterr().out
    assert main(["report", "--compare", old, old]) == 0
    assert "A right, B wrong: 0" in capsys.readouterr().out


GRID = """
[grid]
name = "diag"
n = 4
lms = [{ spec = "openai/stub", api_base = "http://127.0.0.1:9/v1" }]
main = "rag"

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]

[[methods]]
id = "direct"

[[methods]]
id = "rag"
"""


def test_report_of_a_grid_folder_shows_each_cells_attribution(tmp_path, capsys):
    from ragzoo.grid.runner import cell_dir, write_grid_file
    from ragzoo.grid.spec import load_grid

    spec = tmp_path / "diag.toml"
    spec.write_text(GRID, encoding="utf-8")
    grid = load_grid(spec)
    out = tmp_path / "g"
    write_grid_file(grid, out, grid.cells())
    classes = {"direct": ["correct", "retrieval_miss", "retrieval_miss", "abstained"],
               "rag": ["correct", "correct", "filtered_out", "reader_miss"]}
    for cell in grid.cells():
        run_dir = cell_dir(out, cell) / "run"
        run_dir.mkdir(parents=True)
        config = {"method": cell.method.id, "knobs": {}, "metrics": ["em"], "n": 4, "dataset": "hotpotqa",
                  "split": "dev_first500", "adapter": "chat", "lm": {"model": "openai/stub", "dry_run": False}}
        (run_dir / "config.json").write_text(json.dumps(config))
        records = [{"id": str(i), "question": f"q{i}", "gold": ["a"], "prediction": "a" if klass == "correct" else "b",
                    "metrics": {"em": float(klass == "correct")}, "lm_calls": 1, "prompt_tokens": 1,
                    "completion_tokens": 1, "cost": 0.0, "latency": 0.1, "error": None, "attribution": klass,
                    "stages": {"reader": {"calls": 1}}}
                   for i, klass in enumerate(classes[cell.method.id])]
        (run_dir / PREDICTIONS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
        (run_dir / "summary.json").write_text(json.dumps({"n": 4, "n_expected": 4, "complete": True}))
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    direct, rag = (cell.describe() for cell in grid.cells())
    assert f"{direct}: correct 1 (25% [" in text and "retrieval miss 2 (50% [" in text
    assert f"{rag}: correct 2 (50% [" in text and "filtered out 1 (25% [" in text
    assert f"{rag} / reader: records 4, calls 1.00" in text


def test_a_dry_run_shows_its_stages_but_no_attribution(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "dry"
    assert main(["evaluate", "--method", "blendfilter", "--dataset", "hotpotqa", "-n", "2", "--lm", "dry-run",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "blendfilter: no attribution (dry run: placeholder answers); its stages:" in text
    assert "correct 0" not in text
    # the calls of BlendFilter's 13 per question, by stage (Appendix B's filter chain: 3 sets x 3 calls)
    for stage, calls in (("original", 0), ("external_cot", 1), ("internal_knowledge", 1), ("filter", 9),
                         ("reader", 2)):
        assert f"blendfilter / {stage}: records 2, calls {calls}.00" in text
