"""Readers for question files: the normalized JSONL of `RAGZOO_DATA`, a user's own JSONL / JSON / CSV, and
the original releases kept under `raw/` (HotPotQA's official JSON, StrategyQA's JSON, NQ-open's JSONL,
ActiveRAG's sampled JSONL).

Each reader yields `Located` dicts already in the normalized shape (`question`, `answers` or an alias,
optional `id`, extras), so one validation step (`records.to_record`) serves them all.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Iterator

import ujson

from ragzoo.errors import ConfigError, DataError
from ragzoo.data.records import Located, check_file, iter_jsonl, read_json_document

FORMATS = ("auto", "jsonl", "json", "csv", "tsv", "hotpotqa", "strategyqa", "activerag")


# --- generic formats ---------------------------------------------------------------------------------

def _decoded_lines(path: Path) -> Iterator[str]:
    """Text lines of a file, decoding each line so bad UTF-8 is reported with its line number."""
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}:{line_number}: not valid UTF-8 ({error.reason} at byte {error.start})") \
                    from None


def _cell(value: str | None):
    """A CSV cell: a JSON list written in the cell (`["a", "b"]`) becomes a list, anything else stays text."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            parsed = ujson.loads(text)
        except ValueError:
            return value
        if isinstance(parsed, list):
            return parsed
    return value


def iter_csv(path: str | os.PathLike, delimiter: str = ",") -> Iterator[Located]:
    """Rows of a CSV/TSV file with a header line, via the csv module. A cell holding a JSON list (e.g. several
    gold answers `["Paris", "Paris, France"]`) is read as that list."""
    path = check_file(path)
    reader = csv.DictReader(_decoded_lines(path), delimiter=delimiter)
    if not reader.fieldnames:
        raise DataError(f"{path}:1: no header line")
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if None in row:  # more cells than header columns
            raise DataError(f"{where}: {len(reader.fieldnames) + len(row[None])} cells but the header has "
                            f"{len(reader.fieldnames)} columns")
        yield Located({key: _cell(value) for key, value in row.items()}, where)


def iter_json_array(path: str | os.PathLike) -> Iterator[Located]:
    """Items of a JSON document that is an array of objects (or an object whose `data` is one)."""
    path = check_file(path)
    document = read_json_document(path)
    if isinstance(document, dict) and isinstance(document.get("data"), list):
        document = document["data"]
    if not isinstance(document, list):
        raise DataError(f"{path}: expected a JSON array of objects, got {type(document).__name__}")
    for index, item in enumerate(document):
        where = f"{path}: item {index}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(item).__name__}")
        yield Located(item, where)


# --- original releases -------------------------------------------------------------------------------

def hotpotqa_fields(item: dict) -> dict:
    """One question of the official HotPotQA JSON (`_id`, `answer`, `supporting_facts` [[title, sent_id]],
    `context` [[title, [sentences]]]) in the normalized shape of `hotpotqa/dev_distractor.jsonl`."""
    out = {key: value for key, value in item.items() if key not in ("_id", "answer", "context")}
    if "_id" in item:
        out["id"] = item["_id"]
    if "answer" in item:
        out["answers"] = [item["answer"]] if isinstance(item["answer"], str) else item["answer"]
    facts = item.get("supporting_facts")
    if facts is not None:
        if not isinstance(facts, (list, tuple)) or not all(isinstance(fact, (list, tuple)) and len(fact) == 2
                                                           and isinstance(fact[0], str) for fact in facts):
            raise ValueError("'supporting_facts' is not HotPotQA's [[title, sentence index], ...]")
        out["supporting_facts"] = [list(fact) for fact in facts]
        out["supporting_titles"] = list(dict.fromkeys(fact[0] for fact in facts))
    context = item.get("context")
    if context is not None:
        if not isinstance(context, (list, tuple)) or not all(
                isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], (list, tuple)) and all(isinstance(sentence, str) for sentence in entry[1])
                for entry in context):
            raise ValueError("'context' is not HotPotQA's [[title, [sentences]], ...]")
        supporting_titles = set(out.get("supporting_titles", []))
        out["contexts"] = [
            {"title": title, "text": "".join(sentences), "sentences": list(sentences),
             "is_supporting": title in supporting_titles}
            for title, sentences in context
        ]
    return out


def iter_hotpotqa(path: str | os.PathLike) -> Iterator[Located]:
    """HotPotQA's JSON (chosen for a .json file whose records look like it: `_id`, `supporting_facts`): a record
    whose fields are not in its shape is one line naming it, never mangled into gold titles of one letter."""
    for item in iter_json_array(path):
        try:
            fields = hotpotqa_fields(item.data)
        except ValueError as error:
            raise DataError(f"{item.where}: read as HotPotQA's format (it has {sorted(item.data)[:6]}): {error}; "
                            f"give the file in ragzoo's JSONL (question, answers, ...)") from None
        yield Located(fields, item.where)


def strategyqa_fields(item: dict) -> dict:
    """One question of StrategyQA's JSON (`qid`, boolean `answer`, `facts`, `decomposition`, `evidence`):
    answers become ["yes"] / ["no"] and the boolean is kept as `answer_bool`."""
    out = {key: value for key, value in item.items() if key not in ("qid", "answer")}
    if "qid" in item:
        out["id"] = item["qid"]
    answer = item.get("answer")
    if isinstance(answer, bool):
        out["answers"] = ["yes" if answer else "no"]
        out["answer_bool"] = answer
    elif answer is not None:
        out["answers"] = answer
    return out


def iter_strategyqa(path: str | os.PathLike) -> Iterator[Located]:
    for item in iter_json_array(path):
        yield Located(strategyqa_fields(item.data), item.where)


_ACTIVERAG_PASSAGE = re.compile(r"^Document \d+ \(Title: (?P<title>.*?)\):\s?(?P<text>.*)$", re.DOTALL)


def activerag_fields(item: dict) -> dict:
    """One line of ActiveRAG's sampled files: `passages` ["Document i (Title: T): text", ...] becomes
    `retrieved` [{title, text}], the form the normalized `*_activerag500.jsonl` files carry."""
    out = {key: value for key, value in item.items() if key != "passages"}
    retrieved = []
    for passage in item.get("passages") or []:
        match = _ACTIVERAG_PASSAGE.match(passage) if isinstance(passage, str) else None
        retrieved.append({"title": match["title"], "text": match["text"]} if match
                         else {"title": "", "text": str(passage)})
    out["retrieved"] = retrieved
    return out


def iter_activerag(path: str | os.PathLike) -> Iterator[Located]:
    for item in iter_jsonl(path):
        yield Located(activerag_fields(item.data), item.where)


# --- detection ---------------------------------------------------------------------------------------

def _first_jsonl_object(path: Path) -> dict | None:
    for item in iter_jsonl(path):
        return item.data
    return None


def _looks_like_jsonl(path: Path) -> bool:
    """True when the file's first non-blank line is a complete JSON object (one record per line); a JSON
    array, even on one line, is a document."""
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    return isinstance(ujson.loads(raw), dict)
                except ValueError:
                    return False
    return False


def detect_format(path: str | os.PathLike) -> str:
    """Guess the format from the suffix and the first record."""
    path = check_file(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".tsv":
        return "tsv"
    if suffix == ".json" and not _looks_like_jsonl(path):
        with open(path, "rb") as handle:
            head = handle.read(1 << 16).decode("utf-8", errors="replace")
        if '"supporting_facts"' in head or '"_id"' in head or re.search(r'"type":\s*"(bridge|comparison)"', head):
            return "hotpotqa"
        if '"qid"' in head and re.search(r'"answer":\s*(true|false)', head):
            return "strategyqa"
        return "json"
    first = _first_jsonl_object(path)
    passages = (first or {}).get("passages")
    if isinstance(passages, list) and passages and isinstance(passages[0], str) \
            and _ACTIVERAG_PASSAGE.match(passages[0]):
        return "activerag"
    return "jsonl"


def iter_file(path: str | os.PathLike, format: str = "auto") -> Iterator[Located]:
    """Raw items of a question file in any supported format."""
    if format not in FORMATS:
        raise ConfigError(f"unknown data format {format!r}; choose one of {', '.join(FORMATS)}")
    if format == "auto":
        format = detect_format(path)
    readers = {
        "jsonl": iter_jsonl,
        "json": iter_json_array,
        "csv": iter_csv,
        "tsv": lambda p: iter_csv(p, delimiter="\t"),
        "hotpotqa": iter_hotpotqa,
        "strategyqa": iter_strategyqa,
        "activerag": iter_activerag,
    }
    return readers[format](path)
