"""Streaming readers and the record -> `dspy.Example` step every loader shares.

A *record* is a plain dict `{"id", "question", "answers": [str, ...], ...extras}` plus where it came from
(`where` = "file:line", "file: item N" or "hub-id row N") so every error names the place of the bad input.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import ujson

from ragzoo.errors import ConfigError, DataError

# Fields a question record must carry once read; everything else is kept as an extra field.
QUESTION_KEY = "question"
ANSWERS_KEY = "answers"
ID_KEY = "id"
# When the configured answers field is the default ("answers") and absent, these common names are tried,
# in order: NQ-open and HotPotQA use `answer`, FlashRAG uses `golden_answers`.
ANSWER_ALIASES = ("answers", "answer", "golden_answers")


@dataclass(frozen=True)
class Located:
    """A parsed dict and the place it came from, for error messages."""

    data: Any
    where: str


def check_file(path: str | os.PathLike) -> Path:
    """The path as a `Path`, or a `DataError` naming it when it is missing, a folder or empty."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected a file")
    if not path.is_file():  # a pipe (<(...), a FIFO) or a device: its size says nothing, and it reads only once
        raise DataError(f"{path}: not a regular file (a pipe or a device); ragzoo reads a data file more than once "
                        f"(its format, its questions, a resume's check), so save it to a file first")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    if not os.access(path, os.R_OK):
        raise DataError(f"{path}: not readable (permission denied); check its permissions")
    return path


def iter_jsonl(path: str | os.PathLike) -> Iterator[Located]:
    """Parse a JSONL file line by line (bounded memory). Blank lines are skipped. Bad UTF-8, bad JSON or a
    line that is not a JSON object raise `DataError` with file:line."""
    path = check_file(path)
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            where = f"{path}:{line_number}"
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # a BOM some editors write
            except UnicodeDecodeError as error:
                raise DataError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from None
            if not line.strip():
                continue
            try:
                data = ujson.loads(line)
            except ValueError as error:
                raise DataError(f"{where}: malformed JSON ({error})") from None
            if not isinstance(data, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
            yield Located(data, where)


def count_lines(path: str | os.PathLike) -> int:
    """Number of non-blank lines of a text file, read in binary chunks (cheap: no decoding, no parsing).
    Used for progress bars and for the sizes `ragzoo datasets` shows."""
    path = check_file(path)
    count = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                count += 1
    return count


def read_json_document(path: Path) -> Any:
    """A whole JSON document (the original HotPotQA / StrategyQA releases are one JSON array)."""
    import json  # stdlib: its errors carry the line and column ujson's lack

    path = check_file(path)
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return json.load(handle)
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to be a question file (hundreds of levels); check the "
                        f"file") from None
    except UnicodeDecodeError as error:
        line = _line_of_byte(path, error.start)
        raise DataError(f"{path}:{line}: not valid UTF-8 ({error.reason})") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: malformed JSON ({error.msg}, column {error.colno})") from None


def _line_of_byte(path: Path, offset: int) -> int:
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def _as_answer_list(value: Any, where: str, field: str) -> list[str]:
    if isinstance(value, bool):  # a yes/no label (StrategyQA); bool before int: bool is an int
        return ["yes" if value else "no"]
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise DataError(f"{where}: field '{field}' must be a string or a list of strings, "
                        f"got {type(value).__name__}")
    if any(isinstance(item, (list, tuple, dict)) for item in value):
        raise DataError(f"{where}: field '{field}' must be a string or a list of strings, got a nested "
                        f"{type(next(i for i in value if isinstance(i, (list, tuple, dict)))).__name__} inside")
    if any(isinstance(item, float) and not math.isfinite(item) for item in value):  # NaN in JSON: not an answer
        raise DataError(f"{where}: field '{field}' holds a number that is not finite (NaN or infinity), not an "
                        f"answer")
    answers = [str(item).strip() for item in value if item is not None and str(item).strip()]
    if not answers:
        raise DataError(f"{where}: field '{field}' has no non-empty answer")
    return answers


def to_record(item: Located, *, question_field: str = QUESTION_KEY, answers_field: str = ANSWERS_KEY,
              id_field: str | None = None, default_id: str) -> dict:
    """Map one raw dict to a record: `question` (non-empty string), `answers` (non-empty list of strings),
    `id` (from `id_field`, else an `id` field, else `default_id`), plus every other field unchanged."""
    data, where = item.data, item.where
    question = data.get(question_field)
    if not isinstance(question, str) or not question.strip():
        present = ", ".join(sorted(map(str, data))[:12]) or "none"
        raise DataError(f"{where}: missing or empty question field '{question_field}' (fields: {present})")
    field = answers_field
    if field not in data and answers_field == ANSWERS_KEY:
        field = next((alias for alias in ANSWER_ALIASES if alias in data), answers_field)
    if field not in data:
        present = ", ".join(sorted(map(str, data))[:12])
        raise DataError(f"{where}: missing answers field '{answers_field}' (fields: {present}); "
                        f"map it with --field-map answers=<field>")
    answers = _as_answer_list(data[field], where, field)
    for name in {id_field or ID_KEY}:
        if isinstance(data.get(name), (list, dict, bool)):
            raise DataError(f"{where}: field '{name}' must be a string or a number (an example id), got "
                            f"{type(data[name]).__name__}")
    if id_field is not None:
        if data.get(id_field) in (None, ""):
            raise DataError(f"{where}: missing id field '{id_field}'")
        example_id = str(data[id_field])
    elif data.get(ID_KEY) not in (None, ""):
        example_id = str(data[ID_KEY])
    else:
        example_id = default_id
    record = {key: value for key, value in data.items()
              if key not in (question_field, field, id_field, ID_KEY)}
    record[ID_KEY] = example_id
    record[QUESTION_KEY] = question.strip()
    record[ANSWERS_KEY] = answers
    for titles in ("supporting_titles", "gold_titles"):  # one title as a string (a CSV cell) is one title
        if isinstance(record.get(titles), str):
            record[titles] = [record[titles]] if record[titles] else []
    return record


def to_example(record: dict):
    """A `dspy.Example` with `question` as its only input. Labels: `answers` (all golds) and `answer`
    (the first gold, added when the record has none, so DSPy's own metrics and labeled demos work)."""
    import dspy

    fields = dict(record)
    fields.setdefault("answer", record[ANSWERS_KEY][0])
    return dspy.Example(**fields).with_inputs(QUESTION_KEY)


def check_n(n: int | None) -> None:
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be a positive integer or None, got {n!r}")


def select(records: Iterable[dict], *, n: int | None, seed: int | None, ordered: bool, label: str) -> list[dict]:
    """Apply the `n`/`seed` rule (see `ragzoo.data.load`): all records; or the first n (ordered paper splits,
    or seed=None); or a seeded random sample of n, returned in file order."""
    check_n(n)
    if n is not None and (ordered or seed is None):
        taken = []
        for record in records:
            taken.append(record)
            if len(taken) == n:
                return taken
        raise DataError(f"{label} has only {len(taken)} examples, {n} asked; ask for fewer (-n; a compile: "
                        f"--train-n and --dev-n)")
    records = list(records)
    if n is None:
        return records
    if n > len(records):
        raise DataError(f"{label} has only {len(records)} examples, {n} asked; ask for fewer (-n; a compile: "
                        f"--train-n and --dev-n)")
    chosen = sorted(random.Random(seed).sample(range(len(records)), n))
    return [records[index] for index in chosen]


GOLD_PASSAGE_KEY = "gold_passage"


def add_gold_passages(record: dict) -> dict:
    """Give a record whose dataset ships its gold paragraphs a `gold_passage` field: a list of
    {"title", "text"}, in the order of `supporting_titles` (HotPotQA's distractor setting: the supporting
    paragraphs among its `contexts`, marked `is_supporting` or named by `supporting_titles`). A record that
    already has the field (SQuAD's paragraph, from its hub converter) or has no supporting paragraphs is left
    as it is. Post-Fusion's "with gold passage" setting reads it (an oracle input, never a program input)."""
    contexts = record.get("contexts")
    if GOLD_PASSAGE_KEY in record or not isinstance(contexts, list):
        return record
    titles = [str(title) for title in record.get("supporting_titles") or []]
    supporting = [c for c in contexts if isinstance(c, dict) and (c.get("is_supporting") or c.get("title") in titles)]
    if not supporting:
        return record
    order = {title: rank for rank, title in enumerate(titles)}
    supporting.sort(key=lambda c: order.get(c.get("title"), len(order)))
    record[GOLD_PASSAGE_KEY] = [{"title": str(c.get("title") or ""),
                                 "text": c.get("text") or "".join(c.get("sentences") or [])} for c in supporting]
    return record
