"""A run directory belongs to one process at a time, is resumed only with what produced it, and ragzoo never
writes into or deletes from a folder it did not write."""

from __future__ import annotations

import fcntl
import json

import pytest

from ragzoo.cli import main

BASE = ["evaluate", "--method", "direct", "--lm", "dry-run", "--dataset", "hotpotqa", "--split", "dev_first500",
        "-n", "3", "--metric", "em"]


def _run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_second_process_on_the_same_run_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".ragzoo-run.lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running evaluate holds
        held.write("4242")
        held.flush()
        code, err = _run([*BASE, "--out", str(out)], capsys)
    assert code == 2 and "another ragzoo process (pid 4242)" in err and len(err.strip().splitlines()) == 1
    assert not (out / "predictions.jsonl").exists()
    code, _ = _run([*BASE, "--out", str(out)], capsys)  # the lock died with its holder: the run goes ahead
    assert code == 0 and len((out / "predictions.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("change, named", [(["--lm", "dry-run:openai/gpt-4o"], "--lm was"),
                                           (["--metric", "f1"], "--metric was"),
                                           (["--retriever", "bm25:{corpus}?k1=1.2"], "retriever")])
def test_resume_refuses_a_change_that_alters_results_and_keeps_the_config(tmp_path, capsys, change, named):
    out = tmp_path / "run"
    # a small corpus: a change of retriever is refused all the same, without indexing the 17,703 abstracts twice
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"Title {i}", "text": f"passage {i} of a magazine"})
                              + "\n" for i in range(30)))
    change = [arg.format(corpus=corpus) for arg in change]
    # a method that retrieves, so the retriever matters
    base = [*BASE[:2], "rag", *BASE[3:], "--retriever", f"bm25:{corpus}"]
    assert _run([*base, "--out", str(out)], capsys)[0] == 0
    config = (out / "config.json").read_text()
    argv = [*base, "--out", str(out), "--resume"]
    flag = change[0]
    argv = argv[: argv.index(flag)] + change + argv[argv.index(flag) + 2:] if flag in argv else argv + change
    code, err = _run(argv, capsys)
    assert code == 2 and named in err and "cannot resume" in err
    assert (out / "config.json").read_text() == config


def test_resume_refuses_an_edited_data_file(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    rows = [{"id": f"q{i}", "question": f"question {i}?", "answers": [f"a{i}"]} for i in range(3)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["evaluate", "--method", "direct", "--lm", "dry-run", "--data", str(data), "--metric", "em",
            "--out", str(tmp_path / "run")]
    assert _run(argv, capsys)[0] == 0
    rows[1]["answers"] = ["something else"]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, err = _run([*argv, "--resume"], capsys)
    assert code == 2 and "'q1' changed since the interrupted run" in err


def test_force_never_writes_into_a_folder_that_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "mydocs"
    out.mkdir()
    (out / "config.json.bak").write_text("mine")
    (out / "summary.json").write_text("my own summary")  # a name ragzoo also uses
    code, err = _run([*BASE, "--out", str(out), "--force"], capsys)
    assert code == 2 and "not a ragzoo run directory" in err and "--force" not in err
    assert sorted(p.name for p in out.iterdir()) == ["config.json.bak", "summary.json"]
    assert (out / "summary.json").read_text() == "my own summary"


def test_a_hand_edited_record_with_a_list_id_is_dropped_not_a_crash(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run([*BASE, "--out", str(out), "-n", "2"], capsys)[0] == 0
    lines = (out / "predictions.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["id"] = ["not", "an", "id"]
    (out / "predictions.jsonl").write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    code, err = _run([*BASE, "--out", str(out), "-n", "2", "--resume"], capsys)
    assert code == 0 and "internal error" not in err
    ids = [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(ids) == 2 and all(isinstance(identifier, str) for identifier in ids)
