"""The table of every (dataset, split) ragzoo can load: which file under `RAGZOO_DATA` (and which rows of
it), its format, whether it is an ordered paper split, and the hub source used when the file is absent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragzoo.data.hub import HubSource
from ragzoo.errors import DataError

DATASETS = ("hotpotqa", "2wikimultihopqa", "strategyqa", "nq_open", "triviaqa", "squad_open", "webquestions",
            "popqa")

_HOTPOT_DEV = HubSource("hotpotqa/hotpot_qa", "distractor", "validation", "hotpot_qa")


@dataclass(frozen=True)
class SplitSpec:
    """One loadable split.

    file: path relative to the data root (None: hub only). take: keep the first `take` records.
    source_contains: keep records whose `source` field contains this text (a paper's subset of a merged
    file). ordered: a fixed paper sample, so `n` takes its first n instead of a random sample.
    """

    dataset: str
    split: str
    file: str | None
    description: str
    format: str = "jsonl"
    take: int | None = None
    source_contains: str | None = None
    ordered: bool = False
    hub: HubSource | None = None
    gold_from: str | None = None


def _spec(dataset: str, split: str, file: str | None, description: str, **kw) -> SplitSpec:
    return SplitSpec(dataset, split, file, description, **kw)


SPLITS: dict[tuple[str, str], SplitSpec] = {
    (spec.dataset, spec.split): spec for spec in [
        # HotPotQA
        _spec("hotpotqa", "dev", "hotpotqa/dev.jsonl",
              "official dev (distractor) questions in official order; `type`",
              hub=_HOTPOT_DEV),
        _spec("hotpotqa", "dev_first500", "hotpotqa/dev.jsonl",
              "first 500 dev questions (BlendFilter / ITER-RETGEN evaluation set); gold titles for the 369 "
              "also in dev_distractor", take=500, ordered=True, gold_from="hotpotqa/dev_distractor.jsonl",
              hub=HubSource("hotpotqa/hotpot_qa", "distractor", "validation", "hotpot_qa", take=500)),
        _spec("hotpotqa", "dev_distractor", "hotpotqa/dev_distractor.jsonl",
              "dev questions with their 10 distractor paragraphs, supporting titles and facts; the supporting "
              "paragraphs as `gold_passage`"),
        _spec("hotpotqa", "dev_ircot500", "hotpotqa/dev_ircot500.jsonl",
              "IRCoT's 500-question dev subsample, with paragraphs and supporting titles", ordered=True),
        _spec("hotpotqa", "train", "hotpotqa/train.jsonl",
              "600 official train questions (few-shot / compile set); some with supporting facts"),
        _spec("hotpotqa", "train_full", None, "the whole official train set (hub download)",
              hub=HubSource("hotpotqa/hotpot_qa", "distractor", "train", "hotpot_qa")),
        # 2WikiMultihopQA: no official hub copy, local files only
        _spec("2wikimultihopqa", "dev", "2wikimultihopqa/dev.jsonl",
              "R1-Searcher's 500 eval questions followed by ActiveRAG's 500 (28 shared)"),
        _spec("2wikimultihopqa", "dev_first500", "2wikimultihopqa/dev.jsonl",
              "first 500 dev questions (R1-Searcher's 2wiki_500 eval set; BlendFilter's 500-question setting)",
              take=500, ordered=True, source_contains="r1searcher:"),  # by source too: the demo slice has 40
        _spec("2wikimultihopqa", "dev_activerag500", "2wikimultihopqa/dev.jsonl",
              "ActiveRAG's 500-question sample with its recorded top-5 passages (`retrieved`)",
              source_contains="activerag:", ordered=True),
        # StrategyQA: the official train order only exists locally
        _spec("strategyqa", "train", "strategyqa/train.jsonl",
              "official train in official order; yes/no answers, `answer_bool`, facts, decomposition"),
        _spec("strategyqa", "train_first500", "strategyqa/train_first500.jsonl",
              "first 500 train questions (BlendFilter / ITER-RETGEN evaluation set)", ordered=True),
        # NQ-open
        _spec("nq_open", "dev", "nq_open/dev.jsonl", "NQ-open dev (the 'test' set of open-domain QA papers)",
              hub=HubSource("google-research-datasets/nq_open", None, "validation", "nq_open")),
        _spec("nq_open", "efficientqa_dev", "nq_open/efficientqa_dev.jsonl", "EfficientQA dev"),
        _spec("nq_open", "efficientqa_test", "nq_open/efficientqa_test.jsonl", "EfficientQA test"),
        _spec("nq_open", "dev_activerag500", "nq_open/dev_activerag500.jsonl",
              "ActiveRAG's 500-question sample with its recorded top-5 passages (`retrieved`)", ordered=True),
        _spec("nq_open", "train", None, "NQ-open train (hub download)",
              hub=HubSource("google-research-datasets/nq_open", None, "train", "nq_open")),
        # TriviaQA
        _spec("triviaqa", "dev", "triviaqa/dev.jsonl",
              "unfiltered dev as used by DPR (the 'test' set of open-domain QA papers)",
              hub=HubSource("mandarjoshi/trivia_qa", "unfiltered.nocontext", "validation", "trivia_qa")),
        _spec("triviaqa", "dpr_dev_from_train", "triviaqa/dpr_dev_from_train.jsonl",
              "DPR's dev split carved from TriviaQA train"),
        _spec("triviaqa", "dev_activerag500", "triviaqa/dev_activerag500.jsonl",
              "ActiveRAG's 500-question sample with its recorded top-5 passages (`retrieved`)", ordered=True),
        # SQuAD open
        _spec("squad_open", "dev", "squad_open/dev.jsonl", "SQuAD v1.1 dev questions, open-domain",
              hub=HubSource("rajpurkar/squad", None, "validation", "squad")),
        _spec("squad_open", "dev_paragraphs", None,
              "SQuAD v1.1 dev questions with the paragraph each was written on (`gold_passage`; hub download)",
              hub=HubSource("rajpurkar/squad", None, "validation", "squad")),
        # WebQuestions
        _spec("webquestions", "train", "webquestions/train.jsonl", "WebQuestions train (GenRead copy)"),
        _spec("webquestions", "dev", "webquestions/dev.jsonl", "WebQuestions dev carved from train (GenRead)"),
        _spec("webquestions", "test", "webquestions/test.jsonl", "WebQuestions test",
              hub=HubSource("stanfordnlp/web_questions", None, "test", "web_questions")),
        # PopQA
        _spec("popqa", "test", "popqa/test.jsonl", "1,000-question PopQA subsample (FlashRAG format)"),
        _spec("popqa", "test_activerag500", "popqa/test_activerag500.jsonl",
              "ActiveRAG's 500-question sample with its recorded top-5 passages (`retrieved`)", ordered=True),
        _spec("popqa", "test_full", None, "all 14k PopQA questions (hub download)",
              hub=HubSource("akariasai/PopQA", None, "test", "popqa")),
    ]
}


@dataclass(frozen=True)
class DatasetDefaults:
    """What a command uses when the user names no split or metric: the one place for per-dataset defaults.

    eval_split: the evaluation split (the papers' evaluation set where the dataset has no `dev`).
    train_split: the split compile draws its training (and held-out validation) questions from; always one
        that is on disk, so a default compile never waits for the hub.
    exclude_eval: the training pool drops the questions of `eval_split` (when `train_split` overlaps it),
        so a default compile never trains on the questions a default evaluation scores.
    disjoint: the (filtered) training pool shares no question with `eval_split`.
    metric: the headline metric (compile's default): accuracy on yes/no for StrategyQA, EM otherwise.
    eval_metrics: evaluate's default metric list.
    paper_split: the split the papers evaluate on when it is not `eval_split` (`--preset paper`).
    answer_mode: the answer mode the papers use (`--preset paper` sets the knob on methods that have it).
    """

    eval_split: str
    train_split: str
    metric: str = "em"
    eval_metrics: str = "em,f1"
    exclude_eval: bool = False
    disjoint: bool = True
    paper_split: str | None = None
    answer_mode: str | None = None


DEFAULTS: dict[str, DatasetDefaults] = {
    "hotpotqa": DatasetDefaults("dev", "train", paper_split="dev_first500"),  # BlendFilter's, DSPy's first 500
    "2wikimultihopqa": DatasetDefaults("dev_first500", "dev_activerag500", exclude_eval=True),
    "strategyqa": DatasetDefaults("train_first500", "train", metric="acc", eval_metrics="acc", exclude_eval=True,
                                  answer_mode="yes_no"),
    "nq_open": DatasetDefaults("dev", "efficientqa_dev"),
    "triviaqa": DatasetDefaults("dev", "dpr_dev_from_train"),
    "squad_open": DatasetDefaults("dev", "dev", disjoint=False),  # no other SQuAD split on disk
    "webquestions": DatasetDefaults("test", "train"),
    "popqa": DatasetDefaults("test", "test_activerag500", exclude_eval=True),
}

# A user's own question file (`--data`): no split; EM-scored.
FILE_DEFAULTS = DatasetDefaults(eval_split="", train_split="", metric="em", eval_metrics="em,f1")


def dataset_defaults(dataset: str | None) -> DatasetDefaults:
    """The defaults of a registered dataset (`DataError` for an unknown name); `FILE_DEFAULTS` for None."""
    if dataset is None:
        return FILE_DEFAULTS
    if dataset not in DATASETS:
        get_spec(dataset, "")
    return DEFAULTS[dataset]


def default_split(dataset: str) -> str:
    """The evaluation split to use when the user names none (StrategyQA has no dev set)."""
    return dataset_defaults(dataset).eval_split


def default_train_split(dataset: str) -> str:
    """The split compile trains on when the user names none (always on disk)."""
    return dataset_defaults(dataset).train_split


def default_metric(dataset: str | None) -> str:
    """The headline metric name for a dataset: "acc" for StrategyQA, "em" otherwise (and for a user's file)."""
    return dataset_defaults(dataset).metric


def get_spec(dataset: str, split: str) -> SplitSpec:
    """The split's spec, or a `DataError` listing the valid names."""
    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)} "
                        f"(or pass your own file with --data)")
    spec = SPLITS.get((dataset, split))
    if spec is None:
        valid = [name for (owner, name) in SPLITS if owner == dataset]
        raise DataError(f"unknown split {split!r} of {dataset}; choose one of: {', '.join(valid)}")
    return spec


def local_path(spec: SplitSpec, root: Path | None = None) -> Path | None:
    if spec.file is None:
        return None
    if root is None:
        from ragzoo.paths import data_root

        root = data_root()
    return Path(root) / spec.file


def split_size(spec: SplitSpec, path: Path) -> int:
    """Number of examples, counted from raw bytes (no JSON parsing)."""
    needle = spec.source_contains.encode() if spec.source_contains else None
    count = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip() and (needle is None or needle in raw):
                count += 1
                if spec.take is not None and count >= spec.take:
                    break
    return count


def available(root: Path | None = None) -> list[dict]:
    """Every registered split: dataset, split, size (None when not on disk), where it loads from
    ("local", "hub" or "missing"), the file, whether it is an ordered paper split, and a description."""
    rows = []
    for spec in SPLITS.values():
        path = local_path(spec, root)
        if path is not None and path.is_file():
            where, size = "local", split_size(spec, path)
        else:
            where, size = ("hub" if spec.hub else "missing"), None
        rows.append({
            "dataset": spec.dataset, "split": spec.split, "size": size, "source": where,
            "file": str(path) if path is not None else None,
            "hub": f"{spec.hub.path}" + (f" ({spec.hub.name})" if spec.hub and spec.hub.name else "")
            if spec.hub else None,
            "ordered": spec.ordered, "description": spec.description,
        })
    return rows
