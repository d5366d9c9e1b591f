"""FILCO: filter the retrieved context, then generate from what is left.

Paper: "Learning to Filter Context for Retrieval-Augmented Generation", Wang, Araki, Jiang, Parvez, Neubig
(arXiv 2311.08377). §2.1 (passages as lists of sentences), §2.2 (oracle measures STRINC / LEXICAL / CXMI,
single best span), §2.3 (the filter M_ctx, trained on q ⊕ P -> t_silver), §2.4 (the generator answers from
t_pred ⊕ q), §4.6 (top-5 passages, passage-level filtering "PSGS" as baseline).

Control flow per question: retrieve the top-k passages; split each into sentences; call the filter once per
passage (it sees the question, the passage title and the numbered sentences) and keep the sentences it
selects; generate the answer from the question and the kept sentences only. LM calls: one filter call per
passage with text + one answer call (2 at the paper's top-1 setting, k + 1 in general); 1 retrieval.

The paper fine-tunes M_ctx on silver labels from an oracle measure. Here the filter is a DSPy predictor,
compiled the way the paper trains it: `filco_oracle.py` beside this module builds oracle-labelled examples
per passage (`self.filter_trainset(examples)`, using this program's retriever, k, measure, granularity and
thresholds) and the metric `ragzoo.programs.filco_oracle.filter_agreement_metric` (F1 between the selected
and the oracle sentence indices). Any DSPy optimizer can compile `program.filter` with them (e.g.
`program.filter = BootstrapFewShot(metric=filter_agreement_metric).compile(program.filter, trainset=...)`,
or `LabeledFewShot` to use the silver labels as demos directly), and the end-to-end metric compiles both.

Choices where the paper is open, or where an LLM predictor replaces a fine-tuned model:
- k = 1: the paper's main experiments filter the top-1 passage; §4.6 (k = 5) is one knob away.
- The filter returns sentence INDICES (`list[int]`), not generated text, so the filtered context is verbatim.
  It runs per passage, mirroring the silver labels (the single best sentence of each passage: at top-1 the
  paper's argmax over all spans, at top-k the official code's best sentence per passage). More than one
  index is allowed and kept; out-of-range indices are dropped and reported in `ignored_indices`.
- Sentences come from a regex splitter (`ragzoo.programs.filco_oracle.split_sentences`; the paper uses spaCy,
  the code NLTK).
  The title is not split: the filter sees it as a separate field and the generator sees each kept passage
  as "Title | kept sentences" (titles carry the entity that sentences refer to by pronoun).
- `on_empty` (the paper is silent about an empty prediction; the official code falls back to the full
  passage when the silver text is empty): "passage" = when nothing is selected in ANY passage, answer from
  the full retrieved passages; "none" = answer with an empty context. The fallback is per question, not per
  passage: falling back per passage at top-k would re-admit the negative passages the filter rejected.
- granularity "passage" is the PSG/PSGS baseline: a bool keep/drop per passage, same fallback rule.
- `measure`, `threshold` (LEXICAL λ = 0.5, strict >) and `cxmi_threshold` (0.0 on the log-ratio = 1.0 on the
  paper's ratio) do not change `forward`: they define the silver labels and the filter metric. Default
  measure "strinc" (the paper's choice for NQ and TQA, and the only one besides LEXICAL that needs no
  log-probabilities); the paper uses CXMI for HotpotQA, ELI5 and FEVER and LEXICAL for WoW.
- The generator is a plain `Predict` (M_gen decodes the answer directly, no chain of thought).
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Literal

import dspy

from ragzoo.knobs import Range
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, passages_as_context
from ragzoo.programs.filco_oracle import (CXMI_THRESHOLD, LEXICAL_THRESHOLD, Granularity, LogProbFn, Measure,
                                         build_filter_trainset, split_sentences)
from ragzoo.signatures.filco import AnswerFromFilteredContext, FilterPassage, FilterSentences, format_sentences


def _kept_text(passage, text: str) -> str:
    return f"{passage.title} | {text}" if passage.title else text


@register("filco", paper="FILCO: Learning to Filter Context for Retrieval-Augmented Generation (arXiv 2311.08377)",
          short="FILCO (Wang et al. 2023)", calls="k + 1 (2 at the paper's k=1)",
          summary="split passages into sentences, an LLM filter keeps the helpful ones (one call per passage), "
                  "answer from those")
class Filco(RagProgram):
    """Filter each retrieved passage down to its helpful sentences, then answer from them.

    Knobs:
        k: passages retrieved and filtered (the paper's main runs use the top 1; §4.6 uses 5).
        granularity: "sentence" keeps selected sentences; "passage" keeps or drops whole passages (the
            paper's PSG baseline).
        on_empty: when the filter keeps nothing at all: "passage" answers from the full passages, "none"
            answers with an empty context.
        measure: oracle measure for the filter's silver labels and metric: "strinc" (answer string
            included), "lexical" (unigram F1 > threshold) or "cxmi" (needs log-probabilities).
        threshold: LEXICAL's F1 threshold λ (strictly greater keeps a sentence).
        cxmi_threshold: CXMI's threshold on the log-ratio (0.0 = the paper's ratio 1.0).
    """

    def __init__(self, retriever, k: TopK = 1, granularity: Granularity = "sentence",
                 on_empty: Literal["passage", "none"] = "passage", measure: Measure = "strinc",
                 threshold: Annotated[float, Range(0.0, 1.0)] = LEXICAL_THRESHOLD,
                 cxmi_threshold: float = CXMI_THRESHOLD):
        super().__init__(retriever)
        self.k, self.granularity, self.on_empty = k, granularity, on_empty
        self.measure, self.threshold, self.cxmi_threshold = measure, threshold, cxmi_threshold
        self.filter = dspy.Predict(FilterSentences if granularity == "sentence" else FilterPassage)
        self.generate = dspy.Predict(AnswerFromFilteredContext)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        kept, context, selected, sentences_per_passage, ignored = [], [], [], [], []
        for passage in passages:
            if self.granularity == "passage":
                keep = bool(self.filter(question=question, passage=passage.long_text).keep)
                selected.append(keep)
                if keep:
                    kept.append(passage)
                    context.append(passage.long_text)
                continue
            sentences = split_sentences(passage.text)
            sentences_per_passage.append(sentences)
            if not sentences:  # nothing to filter: no call, nothing kept
                selected.append([])
                continue
            chosen = self.filter(question=question, title=passage.title, sentences=format_sentences(sentences))
            indices = sorted({index for index in chosen.selected if 0 <= index < len(sentences)})
            ignored.extend(index for index in chosen.selected if not 0 <= index < len(sentences))
            selected.append(indices)
            if indices:
                kept.append(passage)
                context.append(_kept_text(passage, " ".join(sentences[index] for index in indices)))

        fallback = None
        if not kept:
            fallback = self.on_empty
            kept, context = (passages, passages_as_context(passages)) if self.on_empty == "passage" else ([], [])

        result = self.generate(context=context, question=question)
        return dspy.Prediction(answer=result.answer, passages=kept, context=context, selected=selected,
                               sentences=sentences_per_passage, retrieved=passages, fallback=fallback,
                               ignored_indices=ignored, kept_ids=[passage.pid for passage in kept])

    def filter_trainset(self, examples: Iterable[Any], logprob_fn: LogProbFn | None = None,
                        positives_only: bool = False) -> list[dspy.Example]:
        """Oracle-labelled examples for `self.filter` (one per retrieved passage), built with this program's
        retriever, k, granularity, measure and threshold; compile the filter on them against
        `ragzoo.programs.filco_oracle.filter_agreement_metric`. CXMI needs `logprob_fn`."""
        threshold = {"lexical": self.threshold, "cxmi": self.cxmi_threshold}.get(self.measure)
        return build_filter_trainset(examples, self.retriever, measure=self.measure, k=self.k,
                                     granularity=self.granularity, threshold=threshold, logprob_fn=logprob_fn,
                                     positives_only=positives_only)
