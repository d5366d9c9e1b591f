"""Gold passages where a dataset ships them (issue 22 item 2), for Post-Fusion's Table 1 "with gold passage":
HotPotQA's distractor setting (its supporting paragraphs) from the data folder, and SQuAD's paragraph through
the `datasets` hub path, served here by a loopback stand-in for the Hugging Face hub (HF_ENDPOINT): nothing
contacts a non-loopback address."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest

from ragzoo import data
from ragzoo.testing import LoopbackHTTPServer


def test_hotpotqa_distractor_records_carry_their_supporting_paragraphs_as_gold_passages():
    (first, second) = data.load("hotpotqa", "dev_distractor", n=2, seed=None)
    for example in (first, second):
        gold = example.gold_passage
        assert [passage["title"] for passage in gold] == example.supporting_titles
        by_title = {context["title"]: context["text"] for context in example.contexts}
        assert [passage["text"] for passage in gold] == [by_title[title] for title in example.supporting_titles]
        assert "gold_passage" not in example.inputs()  # an oracle input only the programs that declare it get


def test_the_hub_converters_keep_the_gold_paragraphs(tmp_path, monkeypatch):
    """The hub's HotPotQA rows (column-wise context) and SQuAD rows (its paragraph) give the same field."""
    from ragzoo.data.hub import HubSource

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("RAGZOO_DATA", str(empty))
    hotpot = tmp_path / "hotpot.jsonl"
    hotpot.write_text(json.dumps({
        "id": "h1", "question": "Same nationality?", "answer": "yes", "type": "comparison", "level": "hard",
        "supporting_facts": {"title": ["Ed Wood", "Scott Derrickson"], "sent_id": [0, 0]},
        "context": {"title": ["Ed Wood (film)", "Scott Derrickson", "Ed Wood"],
                    "sentences": [["A film."], ["Scott Derrickson is American."], ["Ed Wood was American."]]}}) + "\n")
    (record,) = data.load_records("hotpotqa", "dev", hub=HubSource("json", split="train", convert="hotpot_qa",
                                                                   data_files=str(hotpot)))
    assert record["gold_passage"] == [{"title": "Ed Wood", "text": "Ed Wood was American."},
                                      {"title": "Scott Derrickson", "text": "Scott Derrickson is American."}]
    squad = tmp_path / "squad.jsonl"
    squad.write_text(json.dumps(SQUAD_ROWS[0]) + "\n")
    (record,) = data.load_records("squad_open", "dev_paragraphs", hub=HubSource("json", split="train",
                                                                                 convert="squad",
                                                                                 data_files=str(squad)))
    assert record["gold_passage"] == [{"title": "Super Bowl 50", "text": SQUAD_ROWS[0]["context"]}]
    assert record["answers"] == ["Denver Broncos"]


def test_records_without_gold_passages_get_none():
    (example,) = data.load("nq_open", "dev", n=1, seed=None)
    assert example.get("gold_passage") is None


# -- a loopback stand-in for the Hugging Face hub, serving rajpurkar/squad as parquet ---------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "rajpurkar/squad"
SQUAD_ROWS = [
    {"id": "56be4db0acb8001400a502ec", "title": "Super_Bowl_50",
     "context": "Super Bowl 50 was an American football game to determine the champion of the National Football "
                "League (NFL) for the 2015 season. The American Football Conference (AFC) champion Denver Broncos "
                "defeated the National Football Conference (NFC) champion Carolina Panthers 24-10.",
     "question": "Which NFL team represented the AFC at Super Bowl 50?",
     "answers": {"text": ["Denver Broncos", "Denver Broncos"], "answer_start": [177, 177]}},
    {"id": "56be4db0acb8001400a502ed", "title": "Super_Bowl_50",
     "context": "The game was played on February 7, 2016, at Levi's Stadium in the San Francisco Bay Area at Santa "
                "Clara, California.",
     "question": "Where did Super Bowl 50 take place?",
     "answers": {"text": ["Santa Clara, California"], "answer_start": [88]}},
]


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


class SquadHub(BaseHTTPRequestHandler):
    """What `datasets.load_dataset("rajpurkar/squad")` asks the hub for: the repo's info, its file tree and the
    parquet file (HEAD and GET, with the headers `huggingface_hub` reads); anything else is 404."""

    files = {"plain_text/validation-00000-of-00001.parquet": _parquet(SQUAD_ROWS)}
    requests: list = []

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {"Content-Type": "application/json"}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        type(self).requests.append((self.command, self.path))
        path = self.path.split("?")[0]
        if path in (f"/api/datasets/{REPO}", f"/api/datasets/{REPO}/revision/main",
                    f"/api/datasets/{REPO}/revision/{COMMIT}"):
            info = {"id": REPO, "sha": COMMIT, "private": False, "siblings": [{"rfilename": f} for f in self.files]}
            return self._send(200, json.dumps(info).encode())
        if path.startswith(f"/api/datasets/{REPO}/tree/"):
            folder = path[len(f"/api/datasets/{REPO}/tree/"):].partition("/")[2]
            entries = []
            for name, content in self.files.items():
                if folder and not name.startswith(folder + "/"):
                    continue
                below = name[len(folder) + 1:] if folder else name
                if "/" in below and "recursive=true" not in self.path:
                    entries.append({"type": "directory", "oid": COMMIT, "size": 0,
                                    "path": (folder + "/" if folder else "") + below.split("/")[0]})
                    continue
                entries.append({"type": "file", "oid": hashlib.sha1(content).hexdigest(), "size": len(content),
                                "path": name, "lfs": {"oid": hashlib.sha256(content).hexdigest(),
                                                      "size": len(content), "pointerSize": 130}})
            return self._send(200, json.dumps(entries).encode())
        prefix = f"/datasets/{REPO}/resolve/"
        name = path[len(prefix):].partition("/")[2] if path.startswith(prefix) else None
        if name in self.files:
            content = self.files[name]
            digest = hashlib.sha256(content).hexdigest()
            return self._send(200, content, {"Content-Type": "application/octet-stream", "X-Repo-Commit": COMMIT,
                                             "ETag": f'"{digest}"', "X-Linked-Etag": f'"{digest}"',
                                             "X-Linked-Size": str(len(content))})
        return self._send(404, b'{"error": "Entry not found"}',
                          {"Content-Type": "application/json", "X-Error-Code": "EntryNotFound"})


def _env(tmp_path, hub_url: str) -> dict:
    env = {**os.environ, "HF_ENDPOINT": hub_url, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "RAGZOO_CACHE": str(tmp_path / "cache")}
    return env


@pytest.fixture
def squad_hub():
    SquadHub.requests = []
    with LoopbackHTTPServer(SquadHub) as server:
        yield server


def test_squad_paragraphs_load_through_the_hub_path_and_feed_post_fusion_with_gold_passage(tmp_path, squad_hub):
    """`squad_open/dev_paragraphs` has no file: it loads from the hub through `datasets`, each question with
    its SQuAD paragraph as the gold passage; then Table 1's setting runs on it through the CLI: every question
    runs (none fails for want of a gold passage), and the paragraph replaces one of the five retrieved
    passages when none of them holds the answer. One interpreter for both (HF_ENDPOINT is read at import)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"Stadium {i}",
                                          "text": f"Super Bowl {i} was played in a stadium."}) + "\n"
                              for i in range(8)))
    out = tmp_path / "run"
    argv = ["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "squad_open", "--split",
            "dev_paragraphs", "--retriever", f"bm25:{corpus}", "--lm", "dry-run", "--metric", "em", "--out", str(out)]
    code = ("import json, sys; from ragzoo import data; from ragzoo.cli import main; "
            "records = data.load_records('squad_open', 'dev_paragraphs', n=None); "
            f"code = main({argv!r}); print(json.dumps(records)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, squad_hub.base_url), capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout.strip().splitlines()[-1])
    assert [record["question"] for record in records] == [row["question"] for row in SQUAD_ROWS]
    assert records[0]["answers"] == ["Denver Broncos"]
    assert records[1]["gold_passage"] == [{"title": "Super Bowl 50", "text": SQUAD_ROWS[1]["context"]}]
    assert any(path.endswith("validation-00000-of-00001.parquet") for method, path in SquadHub.requests
               if method == "GET")
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [record["error"] for record in predictions] == [None, None]
    for record in predictions:
        assert len(record["passages"]) == 5
        assert [passage["title"] for passage in record["passages"]].count("Super Bowl 50") == 1
