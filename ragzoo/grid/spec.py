"""Grid specifications: a TOML file naming methods (with knobs) x datasets/splits x optimizers x LMs, the
compile settings, metrics, n and seed, and (for the bundled reproductions) the paper's numbers per cell.

```toml
[grid]
name = "my-grid"
n = 100                      # questions per cell (default: the whole split)
seed = 0
threads = 1                  # examples in parallel inside a cell
max_concurrency = 8          # LM requests in flight per endpoint, one limit shared by all cells (--parallel)
                             # and all their processes on this machine (--processes)
processes = 1                # worker processes of each cell's evaluation (evaluate --processes)
retriever = "bm25:hotpotqa/corpus_wiki17_abstracts.jsonl"   # default retriever (optional)
lms = ["openai/gpt-4o-mini"] # or [{spec = "openai/llama", api_base = "http://...", cache = false}]; --lm overrides
scale = 100                  # paper numbers in percent (1 = fractions); ours are shown on the same scale
main = "blendfilter"         # the method every other row is compared with (paired test), default: last

[compile]                    # absent or optimizers = ["none"]: cells evaluate the uncompiled program
optimizers = ["bootstrap"]
train_n = 50
dev_n = 50

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em", "f1"]
label = "HotPotQA"           # column label and key of the paper numbers (default: name)
knobs = { k = 5 }            # knobs this column sets for every method (e.g. ActiveRAG's top-5 / top-10)

[[methods]]
id = "blendfilter"
label = "BlendFilter"
knobs = { k = 5 }
paper = { HotPotQA = { em = 0.508, f1 = 0.624 } }   # the paper's numbers, keyed by dataset label
dataset_knobs = { StrategyQA = { answer_mode = "yes_no" } }   # knobs of this method on one column only
columns = ["HotPotQA"]       # the columns this method runs on (default: all)

[paper]                      # what the bundled grids record about the paper's setting
citation = "..."; table = "Table 2"; setting = "LM, k, shots, split"; differences = ["retriever: ..."]
```
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragzoo.errors import ConfigError

GRIDS_DIR = Path(__file__).resolve().parent / "grids"


@dataclass(frozen=True)
class LMEntry:
    spec: str
    api_base: str | None = None
    label: str | None = None
    cache: bool = True  # False: bypass DSPy's LM cache (evaluate --no-cache)

    @property
    def name(self) -> str:
        return self.label or self.spec


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    split: str | None
    metrics: tuple[str, ...]
    label: str
    knobs: dict = field(default_factory=dict)
    retriever: str | None = None
    n: int | None = None  # the paper's n for this column (pricing at the paper's n)


@dataclass(frozen=True)
class MethodEntry:
    id: str
    label: str
    knobs: dict = field(default_factory=dict)
    paper: dict = field(default_factory=dict)  # dataset label -> {metric: value}
    note: str | None = None
    dataset_knobs: dict = field(default_factory=dict)  # dataset label -> knobs for this method on that column
    columns: tuple[str, ...] = ()  # dataset labels this method runs on (default: all)


@dataclass
class Grid:
    name: str
    title: str
    methods: list[MethodEntry]
    datasets: list[DatasetEntry]
    optimizers: list[str]
    lms: list[LMEntry]
    n: int | None = None
    seed: int = 0
    threads: int = 1
    max_concurrency: int | None = None  # LM requests in flight per endpoint, shared by every cell and process
    processes: int = 1  # worker processes of each cell's evaluation (`evaluate --processes`)
    deadline: float | None = None  # seconds per question of each cell's evaluation (None: evaluate's default)
    timeout: float | None = None  # seconds per LM request of each cell's compile and evaluation (None: the default)
    retriever: str | None = None
    train_n: int = 50
    dev_n: int = 50
    scale: float = 1.0
    main: str | None = None
    paper: dict = field(default_factory=dict)  # citation, table, page, LM, k, shots, split, differences
    source: str | None = None

    @property
    def compiles(self) -> bool:
        return any(opt != "none" for opt in self.optimizers)

    def cells(self) -> list["Cell"]:
        return [Cell(self, method, dataset, optimizer, lm) for lm in self.lms for dataset in self.datasets
                for method in self.methods for optimizer in self.optimizers
                if not method.columns or dataset.label in method.columns]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-").lower() or "x"


@dataclass(frozen=True)
class Cell:
    grid: Grid
    method: MethodEntry
    dataset: DatasetEntry
    optimizer: str
    lm: LMEntry

    @property
    def knobs(self) -> dict:
        """The method's knobs, then the column's (only those the method has: a column's k means nothing to a
        method without retrieval), then the method's own knobs for this column."""
        column = dict(self.dataset.knobs)
        if column:
            from ragzoo import programs

            registry = programs.methods()
            if self.method.id in registry:
                column = {k: v for k, v in column.items() if k in registry[self.method.id].knobs}
        return {**self.method.knobs, **column, **self.method.dataset_knobs.get(self.dataset.label, {})}

    @property
    def retriever(self) -> str | None:
        return self.dataset.retriever or self.grid.retriever

    @property
    def n(self) -> int | None:
        return self.grid.n

    @property
    def key(self) -> str:
        """Stable, readable, unique id of the cell: its directory name and its claim in a shared storage. Not
        `n`: a grid rerun with a larger -n extends each cell's run (evaluate --resume -n) and reuses its compile."""
        return self._key()

    def legacy_key(self, n: int | None) -> str:
        """The key this cell had, run with `n` questions, when `n` was part of a cell (a grid folder made then is
        resumed in place: `ragzoo.grid.runner.cell_dir`)."""
        return self._key(("n", n))

    def _key(self, with_n: tuple | None = None) -> str:
        knobs = ",".join(f"{k}={self.knobs[k]}" for k in sorted(self.knobs))
        fields = [self.method.id, knobs, self.dataset.name, self.dataset.split, self.retriever, self.optimizer,
                  self.lm.spec, self.lm.api_base, self.grid.seed, self.grid.train_n, self.grid.dev_n]
        if with_n is not None:
            fields.insert(8, with_n[1])
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
        return "__".join([_slug(self.method.label), _slug(f"{self.dataset.label}-{self.dataset.split or 'default'}"),
                          _slug(self.optimizer), _slug(self.lm.name), digest])

    def describe(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(self.knobs.items()))
        return (f"{self.method.id}{' ' + knobs if knobs else ''} | {self.dataset.name}/{self.dataset.split or 'default'}"
                f" | {self.optimizer} | {self.lm.name}")


# every key a grid file may hold, table by table: another is refused, never ignored (a `[compil]` typo ran every
# cell uncompiled; `knob = {...}` ran the method at its default k)
_KEYS = {
    "file": {"grid", "compile", "datasets", "methods", "paper"},
    "[grid]": {"name", "title", "n", "seed", "threads", "max_concurrency", "processes", "retriever", "lms", "scale",
               "main", "deadline", "timeout"},
    "[compile]": {"optimizers", "optimizer", "train_n", "dev_n"},
    "[[datasets]]": {"name", "split", "metrics", "metric", "label", "knobs", "retriever", "n"},
    "[[methods]]": {"id", "label", "knobs", "paper", "note", "dataset_knobs", "columns"},
    "an LM": {"spec", "api_base", "label", "cache"},
}


def _table(value: Any, name: str, where: str, *, optional: bool = True) -> dict:
    """`value` as the table `name` of the grid file, its keys known (`_KEYS`)."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {name} must be a table, got {value!r}")
    unknown = sorted(set(value) - _KEYS[name])
    if unknown:
        raise ConfigError(f"{where}: {name} has no key {', '.join(map(repr, unknown))}; its keys: "
                          f"{', '.join(sorted(_KEYS[name]))}")
    return value


def _text(table: dict, key: str, name: str, where: str, default: str | None = None) -> str | None:
    value = table.get(key, default)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{where}: {name} {key} must be a non-empty string, got {value!r}")
    return value


def _mapping(table: dict, key: str, name: str, where: str) -> dict:
    value = table.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {name} {key} must be a table, got {value!r}")
    return dict(value)


def _strings(table: dict, keys: tuple[str, ...], name: str, where: str, default: list) -> list[str]:
    """A string or a list of strings under the first of `keys` present."""
    key = next((k for k in keys if table.get(k) is not None), keys[0])
    value = table.get(key)
    items = list(default) if value is None else [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
        raise ConfigError(f"{where}: {name} {key} must be a string or a list of strings, got {value!r}")
    return items


def _default_metrics(dataset: str) -> tuple[str, ...]:
    """The metrics `evaluate` scores a registered dataset by when none is named (its `eval_metrics`: em and f1, or
    acc), which a grid's cells were scored by before; () for a name the registry does not know (refused with the
    grid's other mistakes, in `check_cells`)."""
    from ragzoo.data.registry import dataset_defaults
    from ragzoo.errors import RagzooError

    try:
        return tuple(name.strip() for name in dataset_defaults(dataset).eval_metrics.split(",") if name.strip())
    except RagzooError:
        return ()


def _lms(raw, where: str = "grid") -> list[LMEntry]:
    entries = []
    if raw is not None and not isinstance(raw, (str, dict, list)):  # a number or a boolean is not iterated
        raise ConfigError(f"{where}: lms is a spec string, a table with 'spec' or a list of them, got {raw!r}")
    for item in [raw] if isinstance(raw, (str, dict)) else raw or []:
        if isinstance(item, str) and item.strip():
            entries.append(LMEntry(item))
        elif isinstance(item, dict) and item.get("spec"):
            _table(item, "an LM", where)
            cache = item.get("cache", True)
            if not isinstance(cache, bool):  # "false" read as true had turned the cache on
                raise ConfigError(f"{where}: an LM's cache must be true or false, got {cache!r}")
            entries.append(LMEntry(_text(item, "spec", "an LM's", where), _text(item, "api_base", "an LM's", where),
                                   _text(item, "label", "an LM's", where), cache))
        else:
            raise ConfigError(f"an LM of a grid is a spec string or a table with 'spec', got {item!r}")
    return entries


def _paper_numbers(value: dict, label: str, where: str) -> dict:
    for column, numbers in value.items():
        if not isinstance(numbers, dict) or not all(
                isinstance(number, (int, float)) and not isinstance(number, bool) for number in numbers.values()):
            raise ConfigError(f"{where}: method {label!r}: paper.{column} must be a table of numbers "
                              f"(metric = value), got {numbers!r}")
    return value


def parse_grid(data: dict, source: str | None = None) -> Grid:
    """A grid from its TOML's data: every key known and of its type, refused in one line otherwise, before
    anything runs."""
    where = source or "grid"
    _table(data, "file", where, optional=False)
    head = _table(data.get("grid"), "[grid]", where)
    compile_section = _table(data.get("compile"), "[compile]", where)
    datasets = []
    raw_datasets = data.get("datasets", [])
    if not isinstance(raw_datasets, list):
        raise ConfigError(f"{where}: datasets must be [[datasets]] tables")
    for raw in raw_datasets:
        if not isinstance(raw, dict) or not raw.get("name"):
            raise ConfigError(f"{where}: every [[datasets]] entry needs a name")
        _table(raw, "[[datasets]]", where)
        name = _text(raw, "name", "[[datasets]]", where)
        # no metrics given: the dataset's own default, which its cells are scored by (the table showed a
        # "(default)" column every cell was missing, and compared no rows)
        metrics = tuple(_strings(raw, ("metrics", "metric"), f"dataset {name!r}:", where, [])) \
            or _default_metrics(name)
        datasets.append(DatasetEntry(name=name, split=_text(raw, "split", f"dataset {name!r}:", where),
                                     metrics=metrics,
                                     label=_text(raw, "label", f"dataset {name!r}:", where, name),
                                     knobs=_mapping(raw, "knobs", f"dataset {name!r}:", where),
                                     retriever=_text(raw, "retriever", f"dataset {name!r}:", where),
                                     n=_number(raw, "n", None, where, f"dataset {name!r}:")))
    methods = []
    raw_methods = data.get("methods", [])
    if not isinstance(raw_methods, list):
        raise ConfigError(f"{where}: methods must be [[methods]] tables")
    for raw in raw_methods:
        if not isinstance(raw, dict) or not raw.get("id"):
            raise ConfigError(f"{where}: every [[methods]] entry needs an id")
        _table(raw, "[[methods]]", where)
        identifier = _text(raw, "id", "[[methods]]", where)
        label = _text(raw, "label", f"method {identifier!r}:", where, identifier)
        dataset_knobs = _mapping(raw, "dataset_knobs", f"method {label!r}:", where)
        if not all(isinstance(knobs, dict) for knobs in dataset_knobs.values()):
            raise ConfigError(f"{where}: method {label!r}: dataset_knobs must map column labels to tables of knobs")
        methods.append(MethodEntry(id=identifier, label=label, knobs=_mapping(raw, "knobs", f"method {label!r}:", where),
                                   paper=_paper_numbers(_mapping(raw, "paper", f"method {label!r}:", where), label,
                                                        where),
                                   note=_text(raw, "note", f"method {label!r}:", where), dataset_knobs=dataset_knobs,
                                   columns=tuple(_strings(raw, ("columns",), f"method {label!r}:", where, []))))
    if not datasets or not methods:
        raise ConfigError(f"{where}: a grid needs at least one [[datasets]] and one [[methods]] entry")
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: method labels must be unique (two rows would share a name): {labels}")
    dlabels = [d.label for d in datasets]
    if len(set(dlabels)) != len(dlabels):
        raise ConfigError(f"{where}: dataset labels must be unique: {dlabels}")
    for method in methods:  # a label of no column had dropped the method's row without a word
        for label in [*method.columns, *method.dataset_knobs, *method.paper]:
            if label not in dlabels:
                raise ConfigError(f"{where}: method {method.label!r} names column {label!r}, which is none of the "
                                  f"datasets' labels: {', '.join(dlabels)}")
    optimizers = _strings(compile_section, ("optimizers", "optimizer"), "[compile]", where, ["none"])
    if len(set(optimizers)) != len(optimizers):
        raise ConfigError(f"{where}: [compile] optimizers lists one twice: {optimizers}")
    scale = head.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ConfigError(f"{where}: [grid] scale must be a positive number (100 for percent), got {scale!r}")
    lms = _lms(head.get("lms"), where)
    names = [lm.name for lm in lms]
    if len(set(names)) != len(names):  # one cell folder and one row for two LMs: give each a label
        raise ConfigError(f"{where}: [grid] lms names one LM twice ({', '.join(names)}); give each a distinct label")
    name = _text(head, "name", "[grid]", where)
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        # it names the default grid folder (runs/grids/NAME): a path there wrote wherever the file said
        raise ConfigError(f"{where}: [grid] name {name!r} must be letters, digits, '.', '_' or '-' (it names the "
                          f"grid's folder under runs/grids)")
    grid = Grid(name=name or (Path(source).stem if source else "grid"),
                title=_text(head, "title", "[grid]", where) or name or "grid",
                methods=methods, datasets=datasets, optimizers=optimizers, lms=lms,
                n=_number(head, "n", None, where), seed=_number(head, "seed", 0, where),
                threads=_number(head, "threads", 1, where), retriever=_text(head, "retriever", "[grid]", where),
                max_concurrency=_number(head, "max_concurrency", None, where),
                processes=_number(head, "processes", 1, where),
                deadline=_number(head, "deadline", None, where), timeout=_number(head, "timeout", None, where),
                train_n=_number(compile_section, "train_n", 50, where, "[compile]"),
                dev_n=_number(compile_section, "dev_n", 50, where, "[compile]"),
                scale=float(scale), main=_text(head, "main", "[grid]", where), paper=_mapping(data, "paper", "", where),
                source=source)
    if grid.main and grid.main not in labels and grid.main not in [m.id for m in methods]:
        raise ConfigError(f"{where}: main = {grid.main!r} is not one of the methods")
    return grid


def _number(head: dict, key: str, default, where: str, table: str = "[grid]"):
    """A number from a table of the grid file (`default` when absent), by the rule its command-line flag follows:
    the one table of numeric options (`ragzoo.config.check_number`)."""
    from ragzoo.config import check_number

    return check_number(key, head.get(key, default), f"{where}: {table} " if table else f"{where} ")


def search_corpus(grid: Grid, name: str) -> Grid:
    """`grid` with every bm25 retriever over the shipped sample standing in for corpus `name` searching `name`
    itself (`ragzoo.retrieval.fetch.over_sample`): what `reproduce` runs when the paper's corpus is fetched, and
    what `report` reads back from a grid folder that ran so."""
    from dataclasses import replace

    from ragzoo.retrieval import fetch

    grid.retriever = fetch.over_sample(grid.retriever or "", name) or grid.retriever
    grid.datasets = [replace(d, retriever=fetch.over_sample(d.retriever or "", name) or d.retriever)
                     for d in grid.datasets]
    return grid


def load_grid(path: str | Path) -> Grid:
    path = Path(path)
    if not path.is_file():
        bundled = GRIDS_DIR / f"{path.name}.toml"
        if bundled.is_file():
            path = bundled
        else:
            raise ConfigError(f"grid file {path} not found (bundled grids: ragzoo reproduce --list)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); a grid file is TOML, saved as UTF-8") \
            from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from None
    return parse_grid(data, str(path))


def bundled_grids() -> dict[str, Path]:
    return {path.stem: path for path in sorted(GRIDS_DIR.glob("*.toml"))}
