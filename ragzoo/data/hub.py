"""The fallback for datasets that are not on disk: the `datasets` library (a hub download, the real path for
users with network access). A `HubSource` names the hub id, config and split plus a converter from the hub's
schema to ragzoo's record shape; tests point `path="json"` and `data_files=` at local files so the same code
runs without contacting any hub.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import ujson

from ragzoo.errors import DataError
from ragzoo.data.formats import hotpotqa_fields
from ragzoo.data.records import Located


def _dedup(values) -> list[str]:
    return list(dict.fromkeys(str(value) for value in values if value not in (None, "")))


def _from_hotpot_qa(row: dict) -> dict:
    """`hotpotqa/hotpot_qa` rows carry column-wise facts/context; rebuild the official row shape first."""
    facts = row.get("supporting_facts") or {}
    context = row.get("context") or {}
    official = {key: value for key, value in row.items() if key not in ("id", "supporting_facts", "context")}
    official["_id"] = row.get("id")
    official["supporting_facts"] = [list(pair) for pair in zip(facts.get("title", []), facts.get("sent_id", []))]
    official["context"] = list(zip(context.get("title", []), context.get("sentences", [])))
    return hotpotqa_fields(official)


def _from_nq_open(row: dict) -> dict:
    return {"question": row.get("question"), "answers": row.get("answer")}


def _from_trivia_qa(row: dict) -> dict:
    answer = row.get("answer") or {}
    out = {"id": row.get("question_id"), "question": row.get("question"),
           "answers": _dedup([answer.get("value"), *(answer.get("aliases") or [])])}
    if row.get("question_source"):
        out["question_source"] = row["question_source"]
    return out


def _from_squad(row: dict) -> dict:
    answers = row.get("answers") or {}
    out = {"id": row.get("id"), "question": row.get("question"), "answers": _dedup(answers.get("text", [])),
           "title": row.get("title")}
    if row.get("context"):  # the paragraph the question was written on: its gold passage (Post-Fusion Table 1)
        out["gold_passage"] = [{"title": str(row.get("title") or "").replace("_", " "), "text": row["context"]}]
    return out


def _from_web_questions(row: dict) -> dict:
    return {"question": row.get("question"), "answers": row.get("answers"), "url": row.get("url")}


def _json_list(value) -> list:
    if isinstance(value, str):
        try:
            value = ujson.loads(value)
        except ValueError:
            return [value]
    return list(value or [])


def _from_popqa(row: dict) -> dict:
    out = {key: value for key, value in row.items() if key not in ("possible_answers", "s_aliases", "o_aliases")}
    out["answers"] = _dedup(_json_list(row.get("possible_answers")))
    out["s_aliases"] = _json_list(row.get("s_aliases"))
    out["o_aliases"] = _json_list(row.get("o_aliases"))
    out["id"] = f"popqa_{row['id']}" if row.get("id") is not None else None
    return out


def _identity(row: dict) -> dict:
    return dict(row)


CONVERTERS: dict[str, Callable[[dict], dict]] = {
    "hotpot_qa": _from_hotpot_qa,
    "nq_open": _from_nq_open,
    "trivia_qa": _from_trivia_qa,
    "squad": _from_squad,
    "web_questions": _from_web_questions,
    "popqa": _from_popqa,
    "identity": _identity,
}


@dataclass(frozen=True)
class HubSource:
    """Where `datasets.load_dataset` finds a split: `load_dataset(path, name, split=split,
    data_files=data_files)`; `convert` names an entry of `CONVERTERS`; `take` keeps only the first rows
    (a paper's first-500 set)."""

    path: str
    name: str | None = None
    split: str = "validation"
    convert: str = "identity"
    data_files: dict | str | None = field(default=None, compare=False)
    take: int | None = None

    @property
    def label(self) -> str:
        config = f" ({self.name})" if self.name else ""
        return f"hub dataset {self.path}{config} split {self.split}"


def iter_hub(source: HubSource) -> Iterator[Located]:
    """Rows of a hub split in ragzoo's record shape. Any failure of the `datasets` library (no network,
    unknown id, offline mode) becomes one `DataError` line."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise DataError(f"{source.label}: the `datasets` package is not installed") from None
    from ragzoo.paths import writable_cache_root

    convert = CONVERTERS[source.convert]
    cache_dir = writable_cache_root("hf_datasets")  # the library writes there: only into ragzoo's cache root
    try:
        rows = datasets.load_dataset(source.path, source.name, split=source.split, data_files=source.data_files,
                                     cache_dir=str(cache_dir))
    except Exception as error:  # the library raises many types (ConnectionError, DatasetNotFoundError, ...)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DataError(f"{source.label}: could not load it ({type(error).__name__}: {reason[:200]}); "
                        f"put the file under RAGZOO_DATA or check the network") from None
    for index, row in enumerate(rows):
        if source.take is not None and index >= source.take:
            return
        try:
            converted = convert(dict(row))
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as error:  # another schema than ours
            raise DataError(f"{source.label} row {index}: not in the {source.convert} schema "
                            f"({type(error).__name__}: {error}); the hub's copy changed, or another file was "
                            f"given") from None
        yield Located(converted, f"{source.label} row {index}")
