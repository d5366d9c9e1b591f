"""The `datasets` fallback, run offline: `datasets.load_dataset("json", data_files=...)` reads local files
written in each hub dataset's schema; no hub is contacted."""

from __future__ import annotations

import json

import pytest

from ragzoo import data
from ragzoo.data.hub import HubSource
from ragzoo.errors import DataError

HOTPOT_ROWS = [
    {"id": "5a8b57f25542995d1e6f1371", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "answer": "yes", "type": "comparison", "level": "hard",
     "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
     "context": {"title": ["Ed Wood (film)", "Scott Derrickson", "Ed Wood"],
                 "sentences": [["Ed Wood is a 1994 film.", " It stars Johnny Depp."],
                               ["Scott Derrickson is an American director."], ["Ed Wood was an American filmmaker."]]}},
    {"id": "second", "question": "Second?", "answer": "Chief of Protocol", "type": "bridge", "level": "medium",
     "supporting_facts": {"title": ["Shirley Temple"], "sent_id": [1]},
     "context": {"title": ["Shirley Temple"], "sentences": [["a", " b"]]}},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


@pytest.fixture
def no_local_data(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("RAGZOO_DATA", str(empty))
    return empty


def test_missing_split_falls_back_to_the_datasets_library(tmp_path, no_local_data):
    files = write_jsonl(tmp_path / "hotpot.jsonl", HOTPOT_ROWS)
    source = HubSource("json", split="train", convert="hotpot_qa", data_files=files)
    examples = data.load("hotpotqa", "dev", hub=source)
    assert [e.id for e in examples] == ["5a8b57f25542995d1e6f1371", "second"]
    first = examples[0]
    assert first.answers == ["yes"] and first.type == "comparison" and first.level == "hard"
    assert first.supporting_titles == ["Scott Derrickson", "Ed Wood"]
    assert first.supporting_facts == [["Scott Derrickson", 0], ["Ed Wood", 0]]
    assert first.contexts[0] == {"title": "Ed Wood (film)", "text": "Ed Wood is a 1994 film. It stars Johnny Depp.",
                                 "sentences": ["Ed Wood is a 1994 film.", " It stars Johnny Depp."],
                                 "is_supporting": False}
    assert [c["is_supporting"] for c in first.contexts] == [False, True, True]
    # the same n rule as local files
    assert [e.id for e in data.load("hotpotqa", "dev", n=1, seed=None, hub=source)] == ["5a8b57f25542995d1e6f1371"]


def test_registry_hub_sources_name_the_public_datasets():
    assert data.SPLITS[("hotpotqa", "dev")].hub == HubSource("hotpotqa/hotpot_qa", "distractor", "validation",
                                                             "hotpot_qa")
    assert data.SPLITS[("hotpotqa", "dev_first500")].hub.take == 500
    assert data.SPLITS[("nq_open", "dev")].hub.path == "google-research-datasets/nq_open"
    assert data.SPLITS[("triviaqa", "dev")].hub.path == "mandarjoshi/trivia_qa"
    assert data.SPLITS[("2wikimultihopqa", "dev")].hub is None  # no official hub copy: local only


@pytest.mark.parametrize("convert, row, expected", [
    ("nq_open", {"question": "who wrote it", "answer": ["Bobby Scott", "Bob Russell"]},
     {"id": "0", "question": "who wrote it", "answers": ["Bobby Scott", "Bob Russell"]}),
    ("trivia_qa", {"question": "Star sign?", "question_id": "tc_1", "question_source": "http://x",
                   "answer": {"value": "Scorpio", "aliases": ["Scorpio", "Skorpio"], "normalized_value": "scorpio"}},
     {"id": "tc_1", "question": "Star sign?", "answers": ["Scorpio", "Skorpio"], "question_source": "http://x"}),
    ("squad", {"id": "56be", "title": "Super_Bowl_50", "context": "...", "question": "Which team?",
               "answers": {"text": ["Denver Broncos", "Denver Broncos", "Broncos"], "answer_start": [1, 1, 8]}},
     {"id": "56be", "question": "Which team?", "answers": ["Denver Broncos", "Broncos"], "title": "Super_Bowl_50",
      "gold_passage": [{"title": "Super Bowl 50", "text": "..."}]}),
    ("web_questions", {"url": "http://f/m", "question": "what style?", "answers": ["Fauvism", "Modernism"]},
     {"id": "0", "question": "what style?", "answers": ["Fauvism", "Modernism"], "url": "http://f/m"}),
    ("popqa", {"id": 10207, "subj": "Easy Living", "prop": "composer", "question": "Who was the composer?",
               "possible_answers": '["Ralph Rainger", "Ralph Reichenthal"]', "s_aliases": "[\"Long living\"]",
               "o_aliases": "[]", "s_pop": 1381},
     {"id": "popqa_10207", "question": "Who was the composer?", "answers": ["Ralph Rainger", "Ralph Reichenthal"],
      "subj": "Easy Living", "prop": "composer", "s_aliases": ["Long living"], "o_aliases": [], "s_pop": 1381}),
])
def test_hub_converters(tmp_path, no_local_data, convert, row, expected):
    files = write_jsonl(tmp_path / f"{convert}.jsonl", [row])
    records = data.load_records("nq_open", "dev", hub=HubSource("json", split="train", convert=convert,
                                                                data_files=files))
    assert records == [expected]


def test_hub_failure_is_one_data_error_line(tmp_path, no_local_data):
    source = HubSource("json", split="train", convert="nq_open", data_files=str(tmp_path / "absent.jsonl"))
    with pytest.raises(DataError) as raised:
        data.load("nq_open", "dev", hub=source)
    message = str(raised.value)
    assert "hub dataset json split train: could not load it" in message and "\n" not in message
    assert "RAGZOO_DATA" in message


def test_a_hub_row_in_another_shape_is_one_data_error_line(tmp_path, no_local_data):
    """Review: TriviaQA's `answer` as a plain string (not its dict) ended in an internal AttributeError."""
    files = write_jsonl(tmp_path / "tq.jsonl", [{"question": "Star sign?", "question_id": "tc_1", "answer": "Scorpio"}])
    source = HubSource("json", split="train", convert="trivia_qa", data_files=files)
    with pytest.raises(DataError) as raised:
        data.load("triviaqa", "dev", hub=source)
    message = str(raised.value)
    assert "row 0: not in the trivia_qa schema" in message and "\n" not in message
