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
