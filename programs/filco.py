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
- `on_empty`, when the filter keeps nothing at all. Default "none": the generator answers from what the
  filter kept, i.e. an EMPTY context, as the paper's own analysis describes STRINC producing an empty
  context (§5.2, Fig. 7); the official code's fallback to the full passage (`get_inputs.py`) builds silver
  TRAINING inputs, and its test-time path (`replace_context.py`) has none. With a full-passage fallback at
  the paper's k = 1 the filter's verdict could not matter (kept or dropped, the generator would see the same
  passage) and PSG would be FULL plus a wasted call. "passage" keeps that fallback as an explicit knob:
  answer from the full retrieved passages. The fallback is per question, not per passage: falling back per
  passage at top-k would re-admit the negative passages the filter rejected.
- granularity "passage" is the PSG/PSGS baseline: a bool keep/drop per passage, same empty rule.
- `context` selects the row of Fig. 4 / Table 4: "filtered" (FILCO, and PSG/PSGS with granularity
  "passage"), "full" (FULL: the generator sees the k retrieved passages, no filter call: 1 LM call) or
  "silver" (SILVER, the upper bound: the ORACLE selection of `measure` replaces the filter at test time, no
  filter call; it needs the gold answers, passed as `forward(question, answers=[...])`; CXMI needs a
  log-probability scorer, so SILVER takes "strinc" or "lexical").
- Staged compilation (`compile_stages`): compiling FILCO first compiles the filter alone on oracle-labelled
  examples (this program's measure, threshold, k and granularity) against the agreement metric, then the
  program end to end (the generator; the filter keeps its staged demos). The manifest records each stage.
- `measure`, `threshold` (LEXICAL λ = 0.5, strict >) and `cxmi_threshold` (0.0 on the log-ratio = 1.0 on the
  paper's ratio) do not change the filtered `forward`: they define the silver labels and the filter metric
  (and SILVER's selection). Default "auto" = the paper's per-dataset choice (§4.2, `PAPER_MEASURE`): STRINC
  for NQ and TQA, CXMI for HotpotQA, ELI5 and FEVER, LEXICAL for WoW, STRINC for a dataset the paper did not
  use (or when the compile does not name one). CXMI needs log-probabilities of the gold answer under the
  generator: a `logprob_fn` passed to the compile (`stage_resources={"logprob_fn": ...}`), else the compile
  LM's own server when it is OpenAI-compatible (`--api-base`) and echoes prompt log-probabilities on
  /completions (vLLM does; `filco_oracle.logprob_scorer_for` probes it with one request). A hosted chat API
  cannot score a given answer, nor can the dry-run LM: then the knob `cxmi_fallback` (default "lexical")
  labels the filter instead, or "none" skips the filter stage. Either way the stage's manifest record says
  which measure trained the filter (`measure`; `asked` and `fallback` with the reason when it fell back;
  `cxmi_source` and `logprob_requests` when CXMI was computed) and `ragzoo compile` prints a fallback or a
  skip, so the measure never changes silently. LEXICAL as the default fallback: HotpotQA's answers include
  yes/no, which STRINC can never find in a sentence, and it is the paper's other measure that scores
  overlap rather than containment (Table 5 puts both within 2.6 points of CXMI on HotpotQA). SILVER
  resolves "auto" to STRINC (CXMI at test time needs the scorer too).
- The generator is a plain `Predict` (M_gen decodes the answer directly, no chain of thought). FULL's
  generator (`context="full"`) has its own signature, `AnswerFromRetrievedContext`, that says its context is
  the retrieved passages as retrieved: the paper's FULL trains and tests M_gen on `P ⊕ q`, so telling it the
  context was filtered (as FILCO's generator is told) would describe a filter that never ran.
- Instructions are our own words (the paper prints no prompt; the official code's templates are not kept in
  the repository). What each says, beside what the paper's model does:
  - `FilterSentences` <- M_ctx, fine-tuned to generate the silver sentence(s) from q ⊕ P: ours shows one
    passage's numbered sentences and asks for the index of the one that states the answer or the fact it
    follows from (several only when needed together, none when nothing helps).
  - `FilterPassage` <- PSG, the passage-level keep/drop decision: ours asks whether the passage helps.
  - `AnswerFromFilteredContext` <- M_gen on t ⊕ q: ours says the context is what a filter kept, maybe empty.
  - `AnswerFromRetrievedContext` <- FULL's M_gen on P ⊕ q: ours says the context is the retrieved passages.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as a degradation in the trace): a
  `filter` reply that cannot be read for a passage keeps that whole passage (the FULL context for it:
  nothing was filtered out); `selected` records all its sentence indices (or True). The generator's
  unreadable reply fails the question.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.knobs import Range
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, Stage, StageSkipped, TopK, degrade, passages_as_context
from ragzoo.programs.filco_oracle import (CXMI_THRESHOLD, LEXICAL_THRESHOLD, CountingScorer, Granularity,
                                         LabelledExamples, LogProbFn, Measure, build_filter_trainset,
                                         filter_agreement_metric, logprob_scorer_for, oracle_select,
                                         split_sentences)
from ragzoo.signatures.filco import (AnswerFromFilteredContext, AnswerFromRetrievedContext, FilterPassage,
                                     FilterSentences, format_sentences)


# §4.2: the measure the main results use per task (the paper's six datasets under ragzoo's names)
PAPER_MEASURE = {"nq_open": "strinc", "nq": "strinc", "triviaqa": "strinc", "tqa": "strinc", "hotpotqa": "cxmi",
                 "eli5": "cxmi", "fever": "cxmi", "wow": "lexical"}


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
        on_empty: when the filter keeps nothing at all: "none" answers from that empty context (the
            paper's prediction path), "passage" falls back to the full retrieved passages.
        measure: oracle measure for the filter's silver labels and metric: "strinc" (answer string
            included), "lexical" (unigram F1 > threshold) or "cxmi" (needs log-probabilities).
        threshold: LEXICAL's F1 threshold λ (strictly greater keeps a sentence).
        cxmi_threshold: CXMI's threshold on the log-ratio (0.0 = the paper's ratio 1.0).
        cxmi_fallback: the measure that labels the filter's training passages when CXMI is asked for (or is
            the paper's choice for the dataset) and the compile's LM cannot give log-probabilities of a given
            answer: "lexical", "strinc", or "none" (no filter stage; the manifest says why).
        context: which context the generator sees: "filtered" (FILCO / PSG), "full" (the FULL baseline, no
            filter call) or "silver" (the oracle selection at test time, the SILVER upper bound; needs
            forward(question, answers=...)).
    """

    def __init__(self, retriever, k: TopK = 1, granularity: Granularity = "sentence",
                 on_empty: Literal["none", "passage"] = "none", measure: Literal[Measure, "auto"] = "auto",
                 threshold: Annotated[float, Range(0.0, 1.0)] = LEXICAL_THRESHOLD,
                 cxmi_threshold: float = CXMI_THRESHOLD,
                 context: Literal["filtered", "full", "silver"] = "filtered",
                 cxmi_fallback: Literal["lexical", "strinc", "none"] = "lexical"):
        super().__init__(retriever)
        if context == "silver" and measure == "cxmi":
            raise ConfigError("filco context='silver' selects with the oracle at test time; CXMI needs a "
                              "log-probability scorer there: use measure='strinc' or 'lexical'")
        self.k, self.granularity, self.on_empty, self.context = k, granularity, on_empty, context
        self.measure, self.threshold, self.cxmi_threshold = measure, threshold, cxmi_threshold
        self.cxmi_fallback = cxmi_fallback
        self.filter = dspy.Predict(FilterSentences if granularity == "sentence" else FilterPassage)
        # FULL's generator sees the passages unfiltered and is told so (issue 22 item 10)
        self.generate = dspy.Predict(AnswerFromRetrievedContext if context == "full" else AnswerFromFilteredContext)

    @property
    def oracle_inputs(self) -> tuple[str, ...]:
        """Gold fields an evaluation passes at test time: SILVER selects with the oracle (an upper bound)."""
        return ("answers",) if self.context == "silver" else ()

    STAGES = {"retrieval": (), "filter": ("filter",), "generator": ("generate",)}

    def forward(self, question: str, answers: list[str] | str | None = None) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        if self.context == "full":
            result = self.generate(context=passages_as_context(passages), question=question)
            return dspy.Prediction(answer=result.answer, passages=passages, context=passages_as_context(passages),
                                   stages={"retrieval": {"passages": passages},
                                           "generator": {"context": passages_as_context(passages)}},
                                   selected=None, sentences=[], retrieved=passages, fallback=None,
                                   ignored_indices=[], kept_ids=[passage.pid for passage in passages])
        if self.context == "silver" and not answers:
            raise ConfigError("filco context='silver' needs the gold answers: call program(question=..., "
                              "answers=[...])")
        kept, context, selected, sentences_per_passage, ignored = [], [], [], [], []
        for passage in passages:
            if self.context == "silver":
                indices = self._silver(question, passage, answers, sentences_per_passage)
                selected.append(indices if self.granularity == "sentence" else bool(indices))
                if indices:
                    kept.append(passage)
                    context.append(passage.long_text if self.granularity == "passage" else _kept_text(
                        passage, " ".join(sentences_per_passage[-1][index] for index in indices)))
                continue
            if self.granularity == "passage":
                keep = bool(degrade(lambda: self.filter(question=question, passage=passage.long_text).keep, True,
                                    "filter", f"kept passage {passage.pid} whole (unfiltered)"))
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
            chosen = degrade(lambda: self.filter(question=question, title=passage.title,
                                                 sentences=format_sentences(sentences)).selected,
                             list(range(len(sentences))), "filter", f"kept passage {passage.pid} whole (unfiltered)")
            indices = sorted({index for index in chosen if 0 <= index < len(sentences)})
            ignored.extend(index for index in chosen if not 0 <= index < len(sentences))
            selected.append(indices)
            if indices:
                kept.append(passage)
                context.append(_kept_text(passage, " ".join(sentences[index] for index in indices)))

        fallback = None
        if not kept:
            fallback = self.on_empty
            kept, context = (passages, passages_as_context(passages)) if self.on_empty == "passage" else ([], [])

        result = self.generate(context=context, question=question)
        stages = {"retrieval": {"passages": passages},
                  "filter": {"passages": passages, "kept": kept, "fallback": fallback},
                  "generator": {"context": context}}
        return dspy.Prediction(answer=result.answer, passages=kept, context=context, selected=selected, stages=stages,
                               sentences=sentences_per_passage, retrieved=passages, fallback=fallback,
                               ignored_indices=ignored, kept_ids=[passage.pid for passage in kept])

    def _silver(self, question: str, passage, answers, sentences_per_passage: list) -> list[int]:
        """The oracle's selection in one passage (SILVER): sentence indices, or [0] / [] for a whole passage."""
        measure = "strinc" if self.measure == "auto" else self.measure
        threshold = {"lexical": self.threshold}.get(measure)
        if self.granularity == "passage":
            return oracle_select([passage.long_text], question=question, answers=answers, measure=measure,
                                 threshold=threshold)
        sentences = split_sentences(passage.text)
        sentences_per_passage.append(sentences)
        return oracle_select(sentences, question=question, answers=answers, measure=measure, threshold=threshold)

    def compile_stages(self) -> list[Stage]:
        """Stage 1 of compiling FILCO: the filter alone, on oracle labels of this program's measure, against
        the agreement metric (the paper trains M_ctx on silver labels before M_gen). CXMI labels are scored
        with the compile LM's server when it returns prompt log-probabilities, else with `cxmi_fallback`;
        the stage's manifest record names the measure that labelled the examples."""
        if self.context != "filtered":
            return []
        labels = f"oracle {self.measure} labels, one per retrieved passage (top-{self.k})"
        if self.measure == "auto":
            labels += (" (auto = the paper's choice per dataset: strinc for nq/tqa and unnamed datasets, cxmi for "
                       "hotpotqa/eli5/fever, lexical for wow)")
        if self.measure in ("auto", "cxmi"):
            labels += (f"; CXMI from the LM server's prompt log-probabilities, else {self.cxmi_fallback} "
                       f"(cxmi_fallback)")
        return [Stage(name="filter", predictors=("filter",), build_trainset=self._stage_labels,
                      metric=filter_agreement_metric, labels=labels, uses=("dataset", "logprob_fn", "lm"))]

    def _stage_labels(self, examples, **given) -> LabelledExamples:
        """`filter_trainset` for the stage, which is skipped (and says why) when no label keeps anything: every demo
        would teach the filter to keep nothing (LEXICAL's unigram F1 > 0.5 against HotpotQA's short answers, the
        fallback of its CXMI on a server without log-probabilities, selects no sentence of 50 questions' top 5)."""
        labelled = self.filter_trainset(examples, **given)
        kept = sum(1 for label in labelled if label.get("selected", label.get("keep")))
        labelled.record["labels_keeping_something"] = kept
        if labelled and not kept:
            measure = str(labelled.record.get("measure", "?"))
            instead = ("try --knob measure=strinc" if measure != "strinc" else
                       "retrieve more passages (--knob k) or from a corpus that holds the answers")
            raise StageSkipped(f"all {len(labelled)} {measure.upper()} labels keep nothing: no retrieved "
                               f"{self.granularity} passes the measure for these questions; {instead}",
                               record={**labelled.record, "examples": len(labelled)})
        return labelled

    def resolved_measure(self, dataset: str | None = None) -> str:
        """The oracle measure: the knob, or for "auto" the paper's choice for `dataset` (STRINC if unknown)."""
        if self.measure != "auto":
            return self.measure
        return PAPER_MEASURE.get((dataset or "").lower(), "strinc")

    def filter_trainset(self, examples: Iterable[Any], logprob_fn: LogProbFn | None = None,
                        positives_only: bool = False, dataset: str | None = None,
                        lm: Any = None) -> LabelledExamples:
        """Oracle-labelled examples for `self.filter` (one per retrieved passage), built with this program's
        retriever, k, granularity, measure (for "auto": the paper's choice for `dataset`) and threshold;
        compile the filter on them against `ragzoo.programs.filco_oracle.filter_agreement_metric`.

        CXMI scores with `logprob_fn`, else with the prompt log-probabilities of `lm`'s server (default: the
        configured `dspy.settings.lm`) when it serves them; when neither can, the examples are labelled with
        `cxmi_fallback` (or, for "none", `StageSkipped` says why). `.record` names the measure used, the
        log-probability source or the reason for the fallback, and the scoring requests made."""
        measure = self.resolved_measure(dataset)
        record: dict[str, Any] = {"measure": measure}
        counting = None
        if measure == "cxmi":
            why = f"the paper's choice for {dataset}" if self.measure == "auto" else "measure=cxmi"
            source = "the log-probability scorer passed to the compile"
            if logprob_fn is None:
                logprob_fn, source = logprob_scorer_for(lm if lm is not None else dspy.settings.lm)
            if logprob_fn is None:
                if self.cxmi_fallback == "none":
                    raise StageSkipped(f"CXMI labels ({why}) need log-probabilities of the gold answer: {source}; "
                                       f"set --knob cxmi_fallback=lexical|strinc, or measure=lexical|strinc")
                measure = self.cxmi_fallback
                record = {"measure": measure, "asked": "cxmi",
                          "fallback": f"CXMI labels ({why}) could not be computed: {source}; the filter's labels "
                                      f"are {measure.upper()} ones (cxmi_fallback={measure})"}
            else:
                logprob_fn = counting = CountingScorer(logprob_fn)
                record["cxmi_source"] = source
        threshold = {"lexical": self.threshold, "cxmi": self.cxmi_threshold}.get(measure)
        examples = build_filter_trainset(examples, self.retriever, measure=measure, k=self.k,
                                         granularity=self.granularity, threshold=threshold, logprob_fn=logprob_fn,
                                         positives_only=positives_only)
        if counting is not None:
            record["logprob_requests"] = counting.requests
        return LabelledExamples(examples, record)
