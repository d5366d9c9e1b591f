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


def _lms(raw) -> list[LMEntry]:
    entries = []
    for item in raw or []:
        if isinstance(item, str):
            entries.append(LMEntry(item))
        elif isinstance(item, dict) and item.get("spec"):
            entries.append(LMEntry(str(item["spec"]), item.get("api_base"), item.get("label"),
                                   bool(item.get("cache", True))))
        else:
            raise ConfigError(f"an LM of a grid is a spec string or a table with 'spec', got {item!r}")
    return entries


def _as_list(value, default):
    if value is None:
        return list(default)
    return [value] if isinstance(value, (str, int, float)) else list(value)


def parse_grid(data: dict, source: str | None = None) -> Grid:
    where = source or "grid"
    head = data.get("grid", {})
    if not isinstance(head, dict):
        raise ConfigError(f"{where}: [grid] must be a table")
    compile_section = data.get("compile", {}) or {}
    datasets = []
    for raw in data.get("datasets", []):
        if not isinstance(raw, dict) or not raw.get("name"):
            raise ConfigError(f"{where}: every [[datasets]] entry needs a name")
        metrics = tuple(_as_list(raw.get("metrics") or raw.get("metric"), []))
        datasets.append(DatasetEntry(name=str(raw["name"]), split=raw.get("split"), metrics=metrics,
                                     label=str(raw.get("label") or raw["name"]), knobs=dict(raw.get("knobs") or {}),
                                     retriever=raw.get("retriever"), n=raw.get("n")))
    methods = []
    for raw in data.get("methods", []):
        if not isinstance(raw, dict) or not raw.get("id"):
            raise ConfigError(f"{where}: every [[methods]] entry needs an id")
        methods.append(MethodEntry(id=str(raw["id"]), label=str(raw.get("label") or raw["id"]),
                                   knobs=dict(raw.get("knobs") or {}), paper=dict(raw.get("paper") or {}),
                                   note=raw.get("note"), dataset_knobs=dict(raw.get("dataset_knobs") or {}),
                                   columns=tuple(raw.get("columns") or ())))
    if not datasets or not methods:
        raise ConfigError(f"{where}: a grid needs at least one [[datasets]] and one [[methods]] entry")
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: method labels must be unique (two rows would share a name): {labels}")
    dlabels = [d.label for d in datasets]
    if len(set(dlabels)) != len(dlabels):
        raise ConfigError(f"{where}: dataset labels must be unique: {dlabels}")
    optimizers = [str(o) for o in _as_list(compile_section.get("optimizers") or compile_section.get("optimizer"),
                                           ["none"])]
    grid = Grid(name=str(head.get("name") or (Path(source).stem if source else "grid")),
                title=str(head.get("title") or head.get("name") or "grid"), methods=methods, datasets=datasets,
                optimizers=optimizers, lms=_lms(_as_list(head.get("lms"), [])), n=head.get("n"),
                seed=int(head.get("seed", 0)), threads=int(head.get("threads", 1)), retriever=head.get("retriever"),
                max_concurrency=_number(head, "max_concurrency", None, where),
                processes=_number(head, "processes", 1, where),
                deadline=_number(head, "deadline", None, where), timeout=_number(head, "timeout", None, where),
                train_n=int(compile_section.get("train_n", 50)), dev_n=int(compile_section.get("dev_n", 50)),
                scale=float(head.get("scale", 1.0)), main=head.get("main"), paper=dict(data.get("paper") or {}),
                source=source)
    if grid.main and grid.main not in labels and grid.main not in [m.id for m in methods]:
        raise ConfigError(f"{where}: main = {grid.main!r} is not one of the methods")
    return grid


def _number(head: dict, key: str, default, where: str):
    """A number from [grid] (`default` when absent), by the rule its command-line flag follows: the one table of
    numeric options (`ragzoo.config.check_number`)."""
    from ragzoo.config import check_number

    return check_number(key, head.get(key, default), f"{where}: [grid] ")


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
    return parse_grid(data, str(path))


def bundled_grids() -> dict[str, Path]:
    return {path.stem: path for path in sorted(GRIDS_DIR.glob("*.toml"))}
