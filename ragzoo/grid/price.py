"""Pricing a grid before anything runs (`ragzoo sweep --dry-run`): every runnable cell is run with the dry-run
LM (real retrieval, formatted and counted prompts, placeholder answers, no LM called) on a small sample of its
evaluation questions, priced at the model each cell would call (or `--price-as MODEL`), and scaled to the
cell's n. Compilation is priced separately:

- `none`, `labeled`: no LM call;
- any other preset (bootstrap included): the compile itself, run with the dry-run LM at the grid's train_n /
  dev_n (as `ragzoo compile --dry-run` does), once per (method, knobs, dataset, optimizer). (Bootstrap was once
  bounded by (train_n + dev_n) runs of the program; a compile stops bootstrapping once it has its demos, so that
  bound was ~10x what was used.)
A compile estimate models DSPy's response cache as the cell's LM uses it: a request identical to one already
sent in the same compile (an optimizer scoring the same program on the same question again) is counted as served
from the cache and priced at nothing (`ragzoo.engines.DryRunEngine`); its calls and tokens are those that would be
sent. The evaluation sample prices every call.
Cells that share a method, knobs, dataset and split share one sample (the LM only changes the price).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragzoo.grid.spec import Cell, Grid

NO_CALL_PRESETS = ("none", "labeled")


@dataclass
class Price:
    calls: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    cost: float = 0.0

    def scaled(self, factor: float) -> "Price":
        return Price(self.calls * factor, self.prompt_tokens * factor, self.completion_tokens * factor,
                     self.cost * factor)

    def __add__(self, other: "Price") -> "Price":
        return Price(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens, self.cost + other.cost)

    def to_dict(self) -> dict:
        return {"lm_calls": round(self.calls), "prompt_tokens": round(self.prompt_tokens),
                "completion_tokens": round(self.completion_tokens), "cost": round(self.cost, 4)}


@dataclass
class CellPrice:
    cell: Cell
    n: int
    evaluation: Price
    compile: Price
    compile_note: str = ""
    per_question: Price = field(default_factory=Price)

    @property
    def total(self) -> Price:
        return self.evaluation + self.compile


def _priced_model(cell: Cell, price_as: str | None) -> str:
    from ragzoo.engines import is_dry_run_spec

    if price_as:
        return price_as
    spec = cell.lm.spec
    if is_dry_run_spec(spec):
        return spec.partition(":")[2] or "openai/gpt-4o-mini"
    return spec




def _retriever(spec: str | None, examples: list):
    """The cell's retriever (the default one when the grid names none); `fixed` replays the examples'
    recorded passages."""
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    spec = spec or DEFAULT_RETRIEVER
    if spec.strip().partition(":")[0].lower() == "fixed":
        return make_retriever(spec, examples=examples)
    return make_retriever(spec)


def _sample_usage(cell: Cell, priced: str, sample: int) -> Price:
    """Per-question usage of the cell's uncompiled program on the first `sample` questions, dry-run LM."""
    import dspy

    from ragzoo import data, programs
    from ragzoo.config import knob_dict
    from ragzoo.lm import make_lm
    from ragzoo.runs import evaluate

    examples = data.load(cell.dataset.name, cell.dataset.split or data.default_split(cell.dataset.name), n=sample,
                         seed=cell.grid.seed)
    info = programs.info(cell.method.id)
    knobs = programs.resolve_knobs(cell.method.id, knob_dict({k: str(v) if not isinstance(v, bool) else
                                                               str(v).lower() for k, v in cell.knobs.items()}))
    retriever = _retriever(cell.retriever, examples) if info.uses_retrieval else None
    program = programs.get(cell.method.id, retriever=retriever, **knobs)
    # every call priced, no cache modelled: an evaluation asks each question once, so its repeats would be within
    # one run of the program, where placeholder answers repeat (the same placeholder query retrieves the same
    # passages) and a real model's mostly would not
    lm = make_lm(f"dry-run:{priced}")
    metrics = list(cell.dataset.metrics) or [data.dataset_defaults(cell.dataset.name).metric]
    with dspy.context(lm=lm):
        summary = evaluate(program, examples, metrics, None, progress=False)
    usage, n = summary["usage"], max(1, summary["n"])
    return Price(usage["lm_calls"] / n, usage["prompt_tokens"] / n, usage["completion_tokens"] / n, usage["cost"] / n)


def _compile_dry_run(cell: Cell, priced: str) -> Price:
    import contextlib
    import io

    import dspy

    from ragzoo import data, programs
    from ragzoo.config import knob_dict
    from ragzoo.lm import make_lm
    from ragzoo.optimizers import compile_program

    # the questions `ragzoo compile` would use by default: the dataset's training split (without the evaluation
    # split's questions where they overlap), train_n for training and dev_n held out after them
    defaults = data.dataset_defaults(cell.dataset.name)
    options = {"exclude_split": defaults.eval_split} if defaults.exclude_eval else {}
    pool = data.load(cell.dataset.name, defaults.train_split, n=cell.grid.train_n + cell.grid.dev_n,
                     seed=cell.grid.seed, **options)
    train, dev = pool[:cell.grid.train_n], pool[cell.grid.train_n:]
    metric = cell.dataset.metrics[0] if cell.dataset.metrics else defaults.metric
    info = programs.info(cell.method.id)
    knobs = programs.resolve_knobs(cell.method.id, knob_dict({k: str(v) for k, v in cell.knobs.items()}))
    retriever = _retriever(cell.retriever, [*train, *dev]) if info.uses_retrieval else None
    program = programs.get(cell.method.id, retriever=retriever, **knobs)
    lm = make_lm(f"dry-run:{priced}")
    lm.engine.start_estimate(model_cache=cell.lm.cache)
    with dspy.context(lm=lm), contextlib.redirect_stdout(io.StringIO()):
        result = compile_program(program, trainset=train, valset=dev, optimizer=cell.optimizer,
                                 metric=metric, seed=cell.grid.seed)
    u = result.usage
    return Price(u.lm_calls - u.cached_calls, u.prompt_tokens, u.completion_tokens, u.cost)


def price_grid(grid: Grid, *, sample: int = 5, price_as: str | None = None, paper_n: bool = False,
               on_cell=None) -> list[CellPrice]:
    """A `CellPrice` per runnable cell. `paper_n`: price each cell at its column's paper n (`n` of the dataset
    entry) instead of the grid's n."""
    from ragzoo import data
    from ragzoo.grid.runner import runnable

    samples: dict[tuple, Price] = {}
    compiles: dict[tuple, Price] = {}
    sizes: dict[tuple, int] = {}
    prices = []
    for cell in grid.cells():
        if runnable(cell):
            continue
        priced = _priced_model(cell, price_as)
        base = (cell.method.id, tuple(sorted(cell.knobs.items())), cell.dataset.name, cell.dataset.split,
                cell.retriever, priced)
        if base not in samples:
            samples[base] = _sample_usage(cell, priced, sample)
        per_q = samples[base]
        size_key = (cell.dataset.name, cell.dataset.split)
        if size_key not in sizes:
            sizes[size_key] = data.split_size(cell.dataset.name, cell.dataset.split)
        n = (cell.dataset.n if paper_n and cell.dataset.n else None) or cell.n or sizes[size_key]
        if not paper_n:
            n = min(n, sizes[size_key])
        note = ""
        if cell.optimizer in NO_CALL_PRESETS:
            compile_price = Price()
        else:
            key = (*base, cell.optimizer, grid.train_n, grid.dev_n)
            if key not in compiles:
                compiles[key] = _compile_dry_run(cell, priced)
            compile_price = compiles[key]
            note = "dry-run compile"
        price = CellPrice(cell, n, per_q.scaled(n), compile_price, note, per_q)
        prices.append(price)
        if on_cell is not None:
            on_cell(price)
    return prices


def format_prices(prices: list[CellPrice], priced_label: str) -> str:
    header = f"{'cell':<60} {'n':>6} {'eval calls':>11} {'eval $':>10} {'compile calls':>14} {'compile $':>10} {'total $':>10}"
    lines = [f"dry run, priced as {priced_label} (no LM called):", header]
    total_eval, total_compile = Price(), Price()
    for p in prices:
        lines.append(f"{p.cell.describe()[:60]:<60} {p.n:>6} {p.evaluation.calls:>11.0f} {p.evaluation.cost:>10.4f} "
                     f"{p.compile.calls:>14.0f} {p.compile.cost:>10.4f} "
                     f"{p.total.cost:>9.4f}")
        total_eval += p.evaluation
        total_compile += p.compile
    lines.append(f"{'total':<60} {sum(p.n for p in prices):>6} {total_eval.calls:>11.0f} {total_eval.cost:>10.4f} "
                 f"{total_compile.calls:>14.0f} {total_compile.cost:>10.4f} {(total_eval + total_compile).cost:>9.4f}")
    lines.append(f"evaluation: {total_eval.calls:.0f} LM calls, {total_eval.prompt_tokens:.0f} prompt + "
                 f"{total_eval.completion_tokens:.0f} completion tokens, ${total_eval.cost:.4f}; compile: "
                 f"{total_compile.calls:.0f} LM calls, {total_compile.prompt_tokens:.0f} + "
                 f"{total_compile.completion_tokens:.0f} tokens, ${total_compile.cost:.4f}")
    lines.append("compile calls and tokens are those that would be sent: a request identical to an earlier one of "
                 "the same compile is counted as served from the response cache (free), unless the LM has "
                 "cache = false")
    return "\n".join(lines)
