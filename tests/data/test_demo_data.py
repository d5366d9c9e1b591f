"""The demo slice shipped in `ragzoo/demo_data/`: found when no data folder is, enough for the CLI's main path,
and exactly what `tools/build_demo_data.py` makes from the full data."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragzoo import paths
from ragzoo.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_data_folder(tmp_path, monkeypatch):
    """A machine with no data folder at all: RAGZOO_DATA not set, nothing beside the checkout, no
    ~/.ragzoo/data."""
    monkeypatch.delenv("RAGZOO_DATA", raising=False)
    monkeypatch.setattr(paths, "CHECKOUT_SIBLING", tmp_path / "no-shared" / "data")
    monkeypatch.setattr(paths, "HOME_DATA", tmp_path / "no-home" / ".ragzoo" / "data")
    return tmp_path


def test_without_any_data_folder_the_demo_slice_is_used_and_said(no_data_folder, capsys):
    root, why = paths.locate_data()
    assert root == paths.DEMO_DATA and paths.is_demo_data()
    assert "demo slice" in why and "RAGZOO_DATA is not set" in why
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    first500 = next(line for line in out.splitlines() if line.startswith("hotpotqa") and "dev_first500" in line)
    assert " 100 " in first500 and "local" in first500
    assert f"data root: {paths.DEMO_DATA}" in out and "demo slice" in out


def test_an_existing_folder_wins_over_the_slice(no_data_folder, monkeypatch):
    sibling = no_data_folder / "shared" / "data"
    sibling.mkdir(parents=True)
    monkeypatch.setattr(paths, "CHECKOUT_SIBLING", sibling)
    assert paths.locate_data() == (sibling, "beside the checkout")
    mine = no_data_folder / "mine"
    mine.mkdir()
    monkeypatch.setenv("RAGZOO_DATA", str(mine))
    assert paths.locate_data() == (mine, "RAGZOO_DATA") and not paths.is_demo_data()


def test_index_search_and_evaluate_run_on_the_slice(no_data_folder, capsys):
    assert main(["index", "build", "--corpus", "hotpotqa/corpus_wiki17_abstracts.jsonl", "--quiet"]) == 0
    assert main(["search", "Who directed Ed Wood?", "-k", "3"]) == 0
    assert "Ed Wood (film)" in capsys.readouterr().out
    run = no_data_folder / "run"
    code = main(["evaluate", "--method", "rag", "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "3",
                 "--lm", "dry-run", "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "note: hotpotqa comes from the demo slice shipped with ragzoo" in err and "set RAGZOO_DATA" in err
    lines = (run / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3


def test_a_data_folder_named_but_missing_is_refused_not_replaced(tmp_path, monkeypatch, capsys):
    """A typo in RAGZOO_DATA must not run a benchmark on the next folder found (the demo slice's 100 questions
    read as a split's): one line, non-zero, nothing written."""
    monkeypatch.setenv("RAGZOO_DATA", str(tmp_path / "dta"))
    run = tmp_path / "run"
    for argv in (["evaluate", "--method", "direct", "--dataset", "hotpotqa", "--split", "dev_first500", "--lm",
                  "dry-run", "--out", str(run)], ["datasets"]):
        assert main(argv) != 0
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"RAGZOO_DATA={tmp_path / 'dta'} is not a folder" in err, err
    assert not run.exists()


def test_slice_gold_passages_are_in_its_corpus_and_it_stays_small():
    from ragzoo.retrieval.corpus import iter_corpus

    demo = paths.DEMO_DATA
    titles = {p.title for p in iter_corpus(demo / "hotpotqa" / "corpus_wiki17_abstracts.jsonl")}
    assert 200 <= len(titles) <= 1000  # a few hundred abstracts
    dev_ids = [json.loads(line)["id"] for line in open(demo / "hotpotqa" / "dev.jsonl")]
    distractor = [json.loads(line) for line in open(demo / "hotpotqa" / "dev_distractor.jsonl")]
    assert len(distractor) == 40 and {row["id"] for row in distractor} <= set(dev_ids)
    for row in distractor:
        assert set(row["supporting_titles"]) <= titles, row["id"]
    total = sum(path.stat().st_size for path in demo.rglob("*") if path.is_file())
    assert total < 2_000_000
    sources = (demo / "SOURCES.md").read_text()
    assert "CC BY-SA 4.0" in sources and "tools/build_demo_data.py" in sources


def test_a_corpus_missing_from_the_slice_says_where_it_looked(no_data_folder, capsys):
    assert main(["index", "build", "--corpus", "nq_open/wiki21.jsonl"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "corpus not found: nq_open/wiki21.jsonl" in err
    assert str(paths.DEMO_DATA) in err and "demo slice" in err and "set RAGZOO_DATA" in err


def test_a_default_compile_has_its_questions_on_the_slice(no_data_folder):
    from ragzoo import data

    for name in ("hotpotqa", "strategyqa", "nq_open", "triviaqa", "squad_open", "webquestions"):
        defaults = data.dataset_defaults(name)
        exclude = defaults.eval_split if defaults.exclude_eval else None
        pool = data.load_records(name, defaults.train_split, exclude_split=exclude)
        assert len(pool) >= 100, name  # compile's default: 50 training + 50 validation questions


@pytest.mark.needs_full_data
def test_the_shipped_slice_is_what_the_build_script_makes(data_dir, tmp_path):
    out = tmp_path / "slice"
    done = subprocess.run([sys.executable, str(REPO / "tools" / "build_demo_data.py"), "--source", str(data_dir),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shipped = sorted(p.relative_to(paths.DEMO_DATA) for p in paths.DEMO_DATA.rglob("*") if p.is_file())
    built = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert shipped == built
    for name in shipped:
        assert filecmp.cmp(paths.DEMO_DATA / name, out / name, shallow=False), name
    for name in shipped:
        if name.suffix == ".jsonl":  # every line is a line of the full file, in its order
            full = (data_dir / name).read_bytes().splitlines()
            positions = {line: i for i, line in enumerate(full)}
            order = [positions[line] for line in (out / name).read_bytes().splitlines()]
            assert order == sorted(order), name
