"""Datasets as lists of `dspy.Example`.

- `load(name, split, n=None, seed=0)`: a registered benchmark split (see `available()` or `ragzoo datasets`),
  read from `RAGZOO_DATA`, or through the `datasets` library when the file is not on disk and the split has a
  hub source.
- `load_file(path, ...)`: a user's own JSONL / JSON / CSV / TSV, or an original release (HotPotQA official
  JSON, StrategyQA JSON, NQ-open JSONL, ActiveRAG sampled JSONL), with a field mapping.
- `parse_field_map("question=q,answers=gold,id=qid")`: the CLI's `--field-map` as `load_file` keyword args.
- `dataset_defaults(name)`: a dataset's default evaluation split, compile split and metric (the registry's
  `DEFAULTS`); `default_split`, `default_train_split`, `default_metric` read single fields of it.

Corpora (the passages retrievers index) are read by `ragzoo.retrieval.corpus` (`iter_corpus`, `count_lines`):
only retrieval reads corpora.

Every example has `question` (its only input), `answers` (list of gold strings), `answer` (the first gold,
for DSPy's own metrics and labeled demos), `id`, and every other field of the file (`supporting_titles`,
`supporting_facts`, `contexts`, `retrieved`, `answer_bool`, `type`, ...). Where a dataset ships the gold
paragraph(s) of a question (HotPotQA's supporting paragraphs in its distractor setting, SQuAD's paragraph from
the hub split `squad_open/dev_paragraphs`), the example has `gold_passage`: a list of {"title", "text"}
(`records.add_gold_passages`), the oracle input of Post-Fusion's "with gold passage" setting.

The `n` / `seed` rule:
- `n=None`: the whole split, in file order.
- ordered paper splits (`ordered=True` in `available()`: the first-500 sets, ActiveRAG's and IRCoT's samples)
  and `seed=None`: the first n, in file order (a paper's fixed sample is not re-sampled).
- otherwise: a random sample of n drawn with `random.Random(seed)`, returned in file order, so the same
  (split, n, seed) always gives the same questions.
- n larger than the split raises `DataError`.

Bad input raises `ragzoo.errors.DataError` with one line naming the file and line.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragzoo.data.formats import FORMATS, detect_format, iter_file
from ragzoo.data.hub import HubSource, iter_hub
from ragzoo.data.records import ANSWERS_KEY, QUESTION_KEY, add_gold_passages, select, to_example, to_record
from ragzoo.data.registry import (DATASETS, DEFAULTS, FILE_DEFAULTS, SPLITS, DatasetDefaults, SplitSpec, available,
                                  dataset_defaults, default_metric, default_split, default_train_split, get_spec,
                                  local_path)
from ragzoo.errors import ConfigError, DataError

__all__ = [
    "DATASETS", "DEFAULTS", "FILE_DEFAULTS", "FORMATS", "SPLITS", "DataError", "DatasetDefaults", "HubSource",
    "SplitSpec", "available", "dataset_defaults", "default_metric", "default_split",
    "default_train_split", "detect_format", "load", "load_file", "load_records", "parse_field_map",
    "splits",
]


def splits(name: str) -> list[str]:
    """The registered split names of a dataset."""
    if name not in DATASETS:
        get_spec(name, "")  # raises the DataError that lists the datasets
    return [split for owner, split in SPLITS if owner == name]


def _records(items, *, source_contains: str | None = None, take: int | None = None,
             exclude: frozenset[str] = frozenset(), **fields):
    position = 0
    for item in items:
        if source_contains is not None and source_contains not in str(item.data.get("source", "")):
            continue
        if take is not None and position >= take:
            return
        record = add_gold_passages(to_record(item, default_id=str(position), **fields))
        position += 1
        if exclude and _question_key(record[QUESTION_KEY]) in exclude:
            continue
        yield record


def _question_key(question) -> str:
    return " ".join(str(question).split()).casefold()


def questions_of(name: str, split: str) -> frozenset[str]:
    """The (whitespace- and case-normalized) questions of a registered split, for `exclude_split=`."""
    return frozenset(_question_key(record[QUESTION_KEY]) for record in load_records(name, split, n=None))


def load_records(name: str, split: str, *, n: int | None = None, seed: int | None = 0,
                 hub: HubSource | None = None, exclude_split: str | None = None) -> list[dict]:
    """Like `load` but plain dicts (no DSPy import)."""
    spec = get_spec(name, split)
    label = f"{name}/{split}"
    exclude = frozenset()
    if exclude_split is not None:
        exclude = questions_of(name, exclude_split)
        label = f"{label} without the questions of {exclude_split}"
    path = local_path(spec)
    if path is not None and path.is_file():
        items = iter_file(path, spec.format)
    elif hub is not None or spec.hub is not None:
        items = iter_hub(hub or spec.hub)
    else:
        raise DataError(f"{label}: {path} not found and this split has no hub source; "
                        f"set RAGZOO_DATA to the folder that holds {spec.file}")
    records = _records(items, source_contains=spec.source_contains, take=spec.take, exclude=exclude)
    chosen = select(records, n=n, seed=seed, ordered=spec.ordered, label=label)
    if spec.gold_from is not None:
        from ragzoo.paths import data_root

        _add_gold_titles(chosen, data_root() / spec.gold_from)
    return chosen


_GOLD_FIELDS = ("supporting_titles", "supporting_facts")


def _add_gold_titles(records: list[dict], path: Path) -> None:
    """Copy supporting titles/facts from another file of the same questions, matched by id."""
    if not path.is_file():
        return
    wanted = {record["id"] for record in records if "supporting_titles" not in record}
    gold = {}
    for item in iter_file(path, "jsonl"):
        if item.data.get("id") in wanted:
            gold[item.data["id"]] = {key: item.data[key] for key in _GOLD_FIELDS if key in item.data}
    for record in records:
        for key, value in gold.get(record["id"], {}).items():
            record.setdefault(key, value)


def split_size(name: str, split: str | None = None) -> int:
    """How many questions the split (the dataset's default split when None) holds."""
    return len(load(name, split or default_split(name)))


def load(name: str, split: str, *, n: int | None = None, seed: int | None = 0, hub: HubSource | None = None,
         exclude_split: str | None = None):
    """A registered split as `list[dspy.Example]` (inputs: `question`; labels: `answers`, `answer`).

    exclude_split: drop the questions that also occur in this split of the same dataset (before `n` is
    drawn), e.g. StrategyQA's `train` without its `train_first500` evaluation set.
    hub: replace the split's hub source (used only when its file is not on disk), e.g. to read a local
    file through `datasets` in tests: `HubSource("json", split="train", data_files=..., convert="nq_open")`.
    """
    return [to_example(record) for record in load_records(name, split, n=n, seed=seed, hub=hub,
                                                         exclude_split=exclude_split)]


def load_file(path: str | os.PathLike, *, question_field: str = QUESTION_KEY, answers_field: str = ANSWERS_KEY,
              id_field: str | None = None, format: str = "auto", n: int | None = None, seed: int | None = 0):
    """A question file as `list[dspy.Example]`.

    format: "auto" (by suffix and first record), "jsonl", "json" (array of objects), "csv", "tsv",
    "hotpotqa" (official JSON), "strategyqa" (JSON with boolean answers), "activerag" (sampled JSONL).
    answers_field: the gold answer(s), a string or a list (in CSV a cell may hold a JSON list). With the
    default "answers", a file that has `answer` or `golden_answers` instead is read too.
    id_field: the id column; None: the `id` field when present, else the record's 0-based position.
    n / seed: as in `load` (a user's file is never an ordered paper split: n draws a seeded sample;
    seed=None takes the first n).
    """
    label = str(Path(path).expanduser())
    items = iter_file(path, format)
    records = list(_records(items, question_field=question_field, answers_field=answers_field,
                            id_field=id_field))
    if not records:  # blank lines, `[]`, a CSV header: a run of it would be a "scored" run of nothing
        raise DataError(f"{label}: holds no question")
    return [to_example(record) for record in select(records, n=n, seed=seed, ordered=False, label=label)]


_FIELD_MAP_KEYS = {"question": "question_field", "answers": "answers_field", "answer": "answers_field",
                   "id": "id_field"}


def parse_field_map(text: str | None) -> dict[str, str]:
    """Parse `--field-map` ("question=q,answers=gold,id=qid") into `load_file` keyword arguments
    ({"question_field": "q", "answers_field": "gold", "id_field": "qid"}). Empty/None gives {}.
    Raises `ConfigError` for an unknown key, a missing "=", an empty field name or a repeated key."""
    result: dict[str, str] = {}
    if not text or not text.strip():
        return result
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(f"bad --field-map entry {part!r}: write ours=theirs, e.g. question=q,answers=gold")
        if key not in _FIELD_MAP_KEYS:
            raise ConfigError(f"bad --field-map key {key!r}: use question, answers or id")
        target = _FIELD_MAP_KEYS[key]
        if target in result:
            raise ConfigError(f"--field-map sets {key!r} twice")
        result[target] = value
    return result
