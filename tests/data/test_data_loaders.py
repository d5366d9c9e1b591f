"""Registered benchmark splits: names, sizes, fields, the n/seed rule, bad names, missing files."""

from __future__ import annotations

import shutil

import pytest

from ragzoo import data
from ragzoo.errors import ConfigError, DataError


def test_every_local_split_loads_with_its_listed_size(data_dir):
    rows = data.available()
    assert {row["dataset"] for row in rows} == set(data.DATASETS)
    local = [row for row in rows if row["source"] == "local"]
    assert len(local) >= 20
    for row in local:
        records = data.load_records(row["dataset"], row["split"])
        assert len(records) == row["size"], row
        assert all(record["question"] and record["answers"] for record in records)
        assert all(isinstance(answer, str) for record in records for answer in record["answers"])


@pytest.mark.parametrize("dataset, split, size", [
    ("hotpotqa", "dev", 7405), ("hotpotqa", "dev_first500", 500), ("hotpotqa", "dev_distractor", 1525),
    ("2wikimultihopqa", "dev_first500", 500), ("2wikimultihopqa", "dev_activerag500", 500),
    ("strategyqa", "train_first500", 500), ("nq_open", "dev", 3610), ("triviaqa", "dev", 11313),
    ("squad_open", "dev", 10570), ("webquestions", "test", 2032), ("popqa", "test", 1000),
])
@pytest.mark.needs_full_data
def test_paper_split_sizes(data_dir, dataset, split, size):
    row = next(r for r in data.available() if (r["dataset"], r["split"]) == (dataset, split))
    assert row["size"] == size


def test_examples_carry_inputs_labels_and_extra_fields(data_dir):
    example = data.load("hotpotqa", "dev_distractor", n=1, seed=None)[0]
    assert set(example.inputs().keys()) == {"question"}
    assert example.id == "5abf63f15542997ec76fd3ea"
    assert example.answers == ["October 1922"] and example.answer == "October 1922"
    assert example.supporting_titles == ["Socialist Revolutionary Party", "Russian Civil War"]
    assert len(example.contexts) == 10 and example.supporting_facts[0] == ["Socialist Revolutionary Party", 5]
    labels = example.labels()
    assert "answers" in labels and "question" not in labels


@pytest.mark.needs_full_data
def test_strategyqa_answers_are_yes_no_strings_with_answer_bool(data_dir):
    examples = data.load("strategyqa", "train_first500")
    assert len(examples) == 500
    assert {tuple(e.answers) for e in examples} == {("yes",), ("no",)}
    assert all((e.answers[0] == "yes") == e.answer_bool for e in examples)
    assert examples[0].question == "Are more people today related to Genghis Khan than Julius Caesar?"
    assert examples[0].decomposition and examples[0].facts


@pytest.mark.needs_full_data
def test_first500_splits_are_prefixes_of_the_full_files(data_dir):
    first = data.load_records("hotpotqa", "dev_first500")
    full = data.load_records("hotpotqa", "dev", n=500, seed=None)
    assert [r["id"] for r in first] == [r["id"] for r in full]
    strategy = data.load_records("strategyqa", "train", n=500, seed=None)
    assert [r["question"] for r in strategy] == [r["question"] for r in data.load_records("strategyqa", "train_first500")]


@pytest.mark.needs_full_data
def test_activerag_samples_keep_their_recorded_passages(data_dir):
    for dataset, split in [("nq_open", "dev_activerag500"), ("triviaqa", "dev_activerag500"),
                           ("popqa", "test_activerag500"), ("2wikimultihopqa", "dev_activerag500")]:
        examples = data.load(dataset, split)
        assert len(examples) == 500
        assert all(e.retrieved and {"title", "text"} <= set(e.retrieved[0]) for e in examples), split
    wiki = data.load_records("2wikimultihopqa", "dev_activerag500")
    assert all("activerag" in r["source"] for r in wiki)


def test_n_on_ordered_split_takes_the_first_n_whatever_the_seed(data_dir):
    a = data.load_records("hotpotqa", "dev_first500", n=5, seed=0)
    b = data.load_records("hotpotqa", "dev_first500", n=5, seed=123)
    assert [r["id"] for r in a] == [r["id"] for r in b] == [r["id"] for r in data.load_records("hotpotqa", "dev_first500")[:5]]


def test_n_on_other_splits_is_a_seeded_sample_in_file_order(data_dir):
    full_ids = [r["id"] for r in data.load_records("nq_open", "dev")]
    a = [r["id"] for r in data.load_records("nq_open", "dev", n=20, seed=0)]
    again = [r["id"] for r in data.load_records("nq_open", "dev", n=20, seed=0)]
    other = [r["id"] for r in data.load_records("nq_open", "dev", n=20, seed=1)]
    assert a == again and a != other
    assert a != full_ids[:20]  # a sample, not the head
    positions = [full_ids.index(i) for i in a]
    assert positions == sorted(positions)
    assert [r["id"] for r in data.load_records("nq_open", "dev", n=3, seed=None)] == full_ids[:3]


@pytest.mark.needs_full_data
def test_bad_n_and_too_large_n(data_dir):
    with pytest.raises(ConfigError, match="positive integer"):
        data.load_records("nq_open", "dev", n=0)
    with pytest.raises(DataError, match="has only 500 examples, 501 asked"):
        data.load_records("hotpotqa", "dev_first500", n=501)
    with pytest.raises(DataError, match="has only 300 examples"):
        data.load_records("webquestions", "dev", n=301, seed=3)


def test_unknown_dataset_and_split_list_the_valid_names():
    with pytest.raises(DataError, match=r"unknown dataset 'hotpot'.*hotpotqa, 2wikimultihopqa"):
        data.load("hotpot", "dev")
    with pytest.raises(DataError, match=r"unknown split 'test' of hotpotqa.*dev, dev_first500, dev_distractor"):
        data.load("hotpotqa", "test")
    assert "train_first500" in data.splits("strategyqa")


def test_missing_file_without_hub_is_a_data_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGZOO_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"2wikimultihopqa/dev\.jsonl not found and this split has no hub source"):
        data.load("2wikimultihopqa", "dev")
    rows = {(r["dataset"], r["split"]): r for r in data.available()}
    assert rows[("2wikimultihopqa", "dev")]["source"] == "missing"
    assert rows[("hotpotqa", "dev")]["source"] == "hub" and rows[("hotpotqa", "dev")]["size"] is None


def test_malformed_line_in_a_registered_file_names_file_and_line(tmp_path, monkeypatch, data_dir):
    (tmp_path / "webquestions").mkdir()
    target = tmp_path / "webquestions" / "dev.jsonl"
    shutil.copy(data_dir / "webquestions" / "dev.jsonl", target)
    lines = target.read_text(encoding="utf-8").splitlines()
    lines[6] = lines[6][:-5]  # truncate line 7
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("RAGZOO_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"webquestions/dev\.jsonl:7: malformed JSON"):
        data.load("webquestions", "dev")
    assert len(data.load("webquestions", "dev", n=5, seed=None)) == 5  # lines before the bad one still load


@pytest.mark.needs_full_data
def test_dev_first500_gets_gold_titles_from_the_distractor_file(data_dir):
    records = data.load_records("hotpotqa", "dev_first500")
    with_gold = [r for r in records if "supporting_titles" in r]
    assert len(with_gold) == 369
    distractor = {r["id"]: r for r in data.load_records("hotpotqa", "dev_distractor")}
    assert all(r["supporting_titles"] == distractor[r["id"]]["supporting_titles"] for r in with_gold)
    assert all(r["id"] not in distractor for r in records if "supporting_titles" not in r)
    assert records[0]["supporting_titles"] == ["Scott Derrickson", "Ed Wood"]


def test_default_split_exists_for_every_dataset():
    for name in data.DATASETS:
        assert (name, data.default_split(name)) in data.SPLITS
    assert data.default_split("strategyqa") == "train_first500"
    with pytest.raises(DataError, match="unknown dataset"):
        data.default_split("nope")


def test_dataset_defaults_are_on_disk_and_disjoint_where_declared(data_dir):
    """Every dataset's default evaluation and compile splits load from disk (no hub wait); a compile pool
    declared disjoint shares no question with the evaluation split."""
    def key(record):
        return " ".join(record["question"].split()).casefold()

    for name in data.DATASETS:
        defaults = data.dataset_defaults(name)
        for split in (defaults.eval_split, defaults.train_split):
            spec = data.get_spec(name, split)
            assert data.local_path(spec) is not None and data.local_path(spec).is_file(), (name, split)
        exclude = defaults.eval_split if defaults.exclude_eval else None
        pool = {key(r) for r in data.load_records(name, defaults.train_split, exclude_split=exclude)}
        evaluation = {key(r) for r in data.load_records(name, defaults.eval_split)}
        assert pool, name
        assert bool(pool & evaluation) == (not defaults.disjoint), name
    assert data.default_metric("strategyqa") == "acc" and data.default_metric("nq_open") == "em"
    assert data.default_metric(None) == "em"  # a user's file
    assert data.default_train_split("nq_open") == "efficientqa_dev"


@pytest.mark.needs_full_data
def test_exclude_split_drops_the_other_splits_questions(data_dir):
    first500 = {r["question"] for r in data.load_records("strategyqa", "train_first500")}
    rest = data.load_records("strategyqa", "train", exclude_split="train_first500")
    assert len(rest) >= 2290 - 500 - 1 and not {r["question"] for r in rest} & first500
    sample = data.load("strategyqa", "train", n=5, seed=1, exclude_split="train_first500")
    assert len(sample) == 5 and not {e.question for e in sample} & first500
