"""BlendFilter: query generation blending + LLM knowledge filtering.

Paper: Wang, Zhao, Gao, "BlendFilter: Advancing Retrieval-Augmented Large Language Models via Query
Generation Blending and Knowledge Filtering", arXiv 2402.11129 (v1). Algorithm 1, Eq. 1-9, prompts of
Appendix B. Notes: `seeds/notes/blendfilter.md`.

Control flow (`forward`), one question q:

1. D_q = R(q, k). It serves both as the external-augmentation knowledge (K_ex = K_q, Eq. 1) and as the
   q set of Eq. 5, so it is retrieved once.
2. External augmentation (Eq. 1-2): a_ex = CoT(knowledge=D_q, q), the whole reasoning text including
   "So the answer is X."; q_ex = a_ex ‖ q.
3. Internal augmentation (Eq. 3-4): a_in = "write a passage that answers q"; q_in = a_in ‖ q.
4. D_ex = R(q_ex, k), D_in = R(q_in, k) (Eq. 5).
5. Knowledge filtering (Eq. 7): each set separately, judged against the ORIGINAL q (never q_ex/q_in).
   Appendix B chains three calls per set for HotPotQA/2Wiki (topic -> relevance analysis -> ids) and two
   for StrategyQA (analysis -> ids); the same predictors serve all three sets.
6. Union (Eq. 8), deduplicated by passage id, in the order q, q_ex, q_in (within a set: retrieval order).
7. Answer (Eq. 9): CoT over the kept knowledge, then a short-answer (or yes/no) extraction call.

LM calls per question (sequence of predictor names, `lm.call_names`), k = 5:

| configuration                         | LM calls                                | retrievals |
|---------------------------------------|-----------------------------------------|------------|
| default (HotPotQA / 2Wiki)            | 1 + 1 + 3 sets x 3 + 2 = 13             | 3          |
| answer_mode="yes_no" (StrategyQA)     | 1 + 1 + 3 sets x 2 + 2 = 10             | 3          |
| original_query=False     (w/o q)      | 1 + 1 + 2 x 3 + 2 = 10                  | 3          |
| augmentations=internal   (w/o q_ex)   | 1 + 2 x 3 + 2 = 9                       | 2          |
| augmentations=external   (w/o q_in)   | 1 + 2 x 3 + 2 = 9                       | 2          |
| augmentations=() (no blending)        | 3 + 2 = 5                               | 1          |
| filter=False             (Eq. 6)      | 1 + 1 + 2 = 4                           | 3          |
| filter_mode="union"      (Remark 2)   | 1 + 1 + 3 + 2 = 7                       | 3          |
| filter_stages="ids"                   | 1 + 1 + 3 x 1 + 2 = 7                   | 3          |
| reuse_topic=True                      | 1 + 1 + (1 + 3 x 2) + 2 = 11            | 3          |

Default sequence: external_cot, write_passage, (filter_topic, filter_analysis, filter_ids) x 3,
answer_cot, extract_answer.

Paper experiments -> knobs (each ablation is one flag):
- Tables 2-4 (main results): defaults; StrategyQA columns: answer_mode="yes_no" (filter_stages "auto"
  then follows the StrategyQA prompts: 2 filter calls per set).
- Table 5 (BM25): not a program knob, a retriever spec (`bm25:<corpus>`).
- Table 6 "w/o q" / "w/o q_ex" / "w/o q_in": original_query=False / augmentations=("internal",) /
  augmentations=("external",). Without q, D_q is still retrieved because external augmentation needs it;
  it just is not a knowledge set.
- Fig. 4 (sensitivity to K): k.
- Remark 2 (filter each set, then union, vs union then filter): filter_mode="per_set" | "union".
- Eq. 6 (blending without filtering; no table in the paper): filter=False.
- Fig. 5 (multiple answer sampling): sampling=True runs the answer step (answer CoT + extraction) once per
  top_p in (0, 0.5, 1) (top_p 0 = the greedy call; 0.5 and 1 sample at temperature 1, each a distinct
  request through `rollout_id`): 13 + 4 = 17 calls (StrategyQA 14). The
  prediction's `answer` is the top_p = 0 one (the single-answer setting) and `candidates` holds all three
  in top_p order (0, 0.5, 1: greedy first); the run record keeps them, and the paper's best-of-3 score
  ("if one of the answers is correct, its EM will be 1, and the F1 score is the highest one of the three")
  is `--metric oracle_em,oracle_f1` (`ragzoo.metrics.oracle`). Only the answer step is sampled: the paper
  says "multiple answer sampling", and the retrieval and filtering upstream are shared. Without sampling,
  `candidates` is the one answer.

Instructions are our own words, each saying what the call must produce and why, from Sec. 3 (the filter
removes retrieved knowledge unrelated to q because it misleads the answer; only what it keeps is answered
from); Appendix B's prompts are not in the repository. Our instruction <- what the paper's call does:
- KnowledgeCoT (external_cot, answer_cot): step-by-step reasoning over the knowledge, ending "So the answer
  is X." <- the 3-shot CoT call over knowledge (Eq. 1 and Eq. 9).
- WritePassage: a short passage from the model's own knowledge <- the zero-shot "write a passage" call (Eq. 3).
- FilterTopic: name the subject area, told it is passed on so the screener can set its background on it
  aside <- filter call 1 (HotPotQA/2Wiki): complete the question's general topic.
- TopicRelevanceAnalysis: screening notes, pass or drop per passage id with the reason, told that only
  what passes reaches the answer, that an unrelated passage misleads it, and that background on the topic
  is not evidence <- filter call 2: with the model's knowledge about the topic set aside, check the question
  against each of the five passages, step by step, and show the relevant ones.
- RelevanceAnalysis: the same notes without a topic, dropping every passage acceptable <- the StrategyQA
  filter call 1 (no topic call; "no relevant one" possible).
- SelectRelevantIds: the decision the notes reach, as the ids that passed, told that exactly those are
  answered from <- the last filter call: given the previous analysis as context, output only the ids.
- SelectRelevantIdsDirect (filter_stages="ids", ours): screen and output the ids in one call <- no single
  paper call (the paper chains 2-3).
- ExtractShortAnswer / ExtractYesNo: the answer the reasoning arrives at, in a few words / yes or no <- the
  answer-extraction call after the final CoT (Appendix B).

Choices where the paper is open (each documented; the ones that matter are knobs):
- Knowledge format: "knowledge <i> : Title | text", one per line, ids 0..n-1 (the filter prompt's own
  labelling); the same string feeds the CoT calls. Empty knowledge is written "(none)".
- q_ex / q_in: generated text, one space, then q (the paper: a ‖ q, generation first).
- The topic call depends only on q, yet the paper's structure (13 calls) repeats it per set; we keep
  that by default and `reuse_topic=True` computes it once.
- Filter ids: the output is typed `list[int]`. Ids outside 0..n-1 are dropped (not clamped: clamping would
  keep a passage the model never named) and reported in `invalid_ids`; duplicates are dropped; kept
  passages stay in retrieval order, not the order the model listed them in.
- A retrieval that returns no passage gets no filter calls (nothing to judge).
- If the filter keeps nothing from any set (not discussed in the paper): by default the answer CoT runs
  with empty knowledge, i.e. from the model's own knowledge (`if_nothing_kept="no_knowledge"`);
  `if_nothing_kept="unfiltered"` falls back to the unfiltered union instead. `filter_empty` records it.
- External CoT and answer CoT share one signature but are separate predictors, so an optimizer can give
  them different demos; the paper uses the same 3-shot prompt for both (compile 3 demos to match).
- filter_mode="union": one filter chain over the deduplicated union (ids index the union).
- The CoT calls are `dspy.Predict` with an explicit `reasoning` output rather than `dspy.ChainOfThought`:
  the paper's a_ex IS the reasoning text (ending in "So the answer is X."), and the answer is extracted by
  a separate call (Appendix B), so no answer field belongs in the CoT signature.
- yes/no mode types the final answer `Literal["yes", "no"]` (the prompt lists the two values) and reads it
  leniently (`ragzoo.programs.base.YesNoPredict`): "Yes" or "No." — the casing and punctuation the paper's
  own StrategyQA prompt asks for ("either Yes or No") — become "yes"/"no" instead of failing to parse and
  losing the whole 10-call question; an answer that reads as neither still raises AdapterParseError.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, each recorded as a degradation in the
  trace): a filter call (`filter_topic`, `filter_analysis`, `filter_ids`) unreadable -> that set is kept
  unfiltered (all its ids); `external_cot` unreadable -> no external augmentation (q_ex is q itself, so
  D_ex is retrieved with q); `write_passage` unreadable -> no internal augmentation (q_in is q);
  `extract_answer` unreadable -> the answer is read from `answer_cot`'s reasoning ("So the answer is X.",
  else the whole reasoning). `answer_cot` is the answer call: its unreadable reply fails the question.
  Any other parse failure raises (DSPy's AdapterParseError).
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, YesNoPredict, dedup_passages, degrade
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.blendfilter import (
    ExtractShortAnswer,
    ExtractYesNo,
    FilterTopic,
    KnowledgeCoT,
    RelevanceAnalysis,
    SelectRelevantIds,
    SelectRelevantIdsDirect,
    TopicRelevanceAnalysis,
    WritePassage,
)

QUERY_ORDER = ("q", "q_ex", "q_in")
AUGMENTATIONS = {"external": "q_ex", "internal": "q_in"}
Augmentation = Literal["external", "internal"]
SAMPLING_TOP_P = (0.0, 0.5, 1.0)  # Fig. 5


def format_knowledge(passages: list[Passage]) -> str:
    """`knowledge 0 : Title | text` per line; ids index `passages`."""
    if not passages:
        return "(none)"
    return "\n".join(f"knowledge {i} : {p.long_text}" for i, p in enumerate(passages))


def blend(generated: str, question: str) -> str:
    """a ‖ q: the generated text first, then the original question (Eq. 2 and 4)."""
    return f"{generated.strip()} {question}".strip()


def answer_from_reasoning(reasoning: str, answer_mode: str = "short") -> str:
    """The answer a CoT reasoning states ("... So the answer is X."), else the whole reasoning; for yes/no,
    read as yes/no where it reads as one."""
    import re

    from ragzoo.programs.base import read_yes_no

    text = (reasoning or "").strip()
    # the reasoning's last statement of its answer: an earlier "the answer is ..." may be one it then rejects
    stated = [match.end() for match in re.finditer(r"the answer is[:\s]*", text, flags=re.I)]
    answer = re.sub(r"\s*\.?\s*$", "", text[stated[-1]:]) if stated else text
    if answer_mode == "yes_no":
        return read_yes_no(answer) or answer
    return answer


def clean_ids(ids: list[int] | None, n: int) -> tuple[list[int], list[int]]:
    """Split model-returned ids into (valid ids in retrieval order, without duplicates; invalid ids)."""
    ids = list(ids or [])
    valid = sorted({i for i in ids if 0 <= i < n})
    invalid = [i for i in ids if not 0 <= i < n]
    return valid, invalid


@register("blendfilter", paper="BlendFilter (Wang et al. 2024, arXiv 2402.11129)", calls="13 (StrategyQA 10)",
          short="BlendFilter (Wang et al. 2024)",
          summary="blend q with external (CoT) and internal (passage) augmentations, retrieve with each, "
                  "LLM-filter each set against q, answer from the union")
class BlendFilter(RagProgram):
    """BlendFilter: query generation blending and LLM knowledge filtering (arXiv 2402.11129).

    Knobs:
        k: passages retrieved per query (Fig. 4 varies it).
        augmentations: which blended queries to add: "external" (q_ex, CoT over the passages of q) and/or
            "internal" (q_in, a passage the model writes); empty = no blending (Table 6 ablations).
        original_query: keep the passages of q itself as a knowledge set (false = Table 6 "w/o q").
        filter: LLM knowledge filtering (false = Eq. 6, blending without filtering).
        filter_mode: "per_set" filters each knowledge set, then unites them; "union" filters the union
            once (Remark 2).
        filter_stages: filter calls per set: "auto" follows Appendix B (topic, analysis, ids; analysis,
            ids for yes/no), or force "topic", "analysis" or "ids" (ids only: one call).
        reuse_topic: compute the filter's topic once per question instead of once per set.
        answer_mode: "short" answers in a few words; "yes_no" types the answer as yes or no (StrategyQA).
        if_nothing_kept: when the filter keeps nothing: "no_knowledge" answers from the model's own
            knowledge, "unfiltered" answers from the unfiltered union.
        sampling: Fig. 5's multiple answer sampling: the answer step (CoT + extraction) runs once per
            top_p in (0, 0.5, 1); `candidates` holds the three (greedy first), `answer` the top_p = 0
            one; score best-of-3 with --metric oracle_em,oracle_f1.
    """

    def __init__(
        self,
        retriever=None,
        k: TopK = 5,
        augmentations: tuple[Augmentation, ...] = ("external", "internal"),
        original_query: bool = True,
        filter: bool = True,  # noqa: A002 - the knob's name on the command line (filter=false)
        filter_mode: Literal["per_set", "union"] = "per_set",
        filter_stages: Literal["auto", "topic", "analysis", "ids"] = "auto",
        reuse_topic: bool = False,
        answer_mode: Literal["short", "yes_no"] = "short",
        if_nothing_kept: Literal["no_knowledge", "unfiltered"] = "no_knowledge",
        sampling: bool = False,
    ):
        super().__init__(retriever)
        # Single knobs are type-checked by RagProgram; what remains are rules over several values.
        augmentations = tuple(augmentations)
        if len(set(augmentations)) != len(augmentations):
            raise ConfigError(f"BlendFilter knob augmentations={','.join(augmentations)}: lists an augmentation "
                              f"twice")
        if not augmentations and not original_query:
            raise ConfigError("BlendFilter knobs augmentations=() and original_query=false leave no query to "
                              "retrieve with; keep at least one")

        self.k = k
        self.augmentations = tuple(a for a in AUGMENTATIONS if a in augmentations)
        self.original_query = original_query
        # The knowledge sets, in the union order q, q_ex, q_in.
        used = {"q": self.original_query, **{AUGMENTATIONS[a]: a in augmentations for a in AUGMENTATIONS}}
        self.queries = tuple(name for name in QUERY_ORDER if used[name])
        self.filter = filter
        self.filter_mode = filter_mode
        # "auto" follows Appendix B: topic+analysis+ids for short answers, analysis+ids for yes/no.
        self.filter_stages = ({"short": "topic", "yes_no": "analysis"}[answer_mode]
                              if filter_stages == "auto" else filter_stages)
        if reuse_topic and (not filter or self.filter_stages != "topic"):
            # the topic stage runs only in the short-answer chain: asked for elsewhere, the knob would do nothing
            raise ConfigError(f"BlendFilter knob reuse_topic=true needs the filter's topic stage (filter_stages=topic, "
                              f"or auto with answer_mode=short); here the filter runs "
                              f"{'no stage' if not filter else repr(self.filter_stages)}")
        self.reuse_topic = reuse_topic
        self.answer_mode = answer_mode
        self.if_nothing_kept = if_nothing_kept
        self.sampling = sampling

        if "q_ex" in self.queries:
            self.external_cot = dspy.Predict(KnowledgeCoT)
        if "q_in" in self.queries:
            self.write_passage = dspy.Predict(WritePassage)
        if self.filter:
            if self.filter_stages == "topic":
                self.filter_topic = dspy.Predict(FilterTopic)
                self.filter_analysis = dspy.Predict(TopicRelevanceAnalysis)
            elif self.filter_stages == "analysis":
                self.filter_analysis = dspy.Predict(RelevanceAnalysis)
            self.filter_ids = dspy.Predict(SelectRelevantIds if self.filter_stages != "ids"
                                           else SelectRelevantIdsDirect)
        self.answer_cot = dspy.Predict(KnowledgeCoT)
        self.extract_answer = (YesNoPredict(ExtractYesNo) if answer_mode == "yes_no"
                               else dspy.Predict(ExtractShortAnswer))

    # Stage diagnostics (ragzoo.diagnostics): the three query retrievals of Sec. 3.1, the filter, the answer.
    STAGES = {"original": (), "external_cot": ("external_cot",), "internal_knowledge": ("write_passage",),
              "filter": ("filter_topic", "filter_analysis", "filter_ids"),
              "reader": ("answer_cot", "extract_answer")}

    def forward(self, question: str) -> dspy.Prediction:
        q = question
        blended = {"q": q}
        retrieved: dict[str, list[Passage]] = {}
        external_reasoning = internal_passage = None

        # Query generation blending (Algorithm 1, lines 1-4).
        if "q" in self.queries or "q_ex" in self.queries:
            docs_q = self.retrieve(q, self.k)
            if "q" in self.queries:
                retrieved["q"] = docs_q
        if "q_ex" in self.queries:
            external_reasoning = degrade(
                lambda: self.external_cot(knowledge=format_knowledge(docs_q), question=q).reasoning, "",
                "external_cot", "dropped the external augmentation: D_ex retrieved with q")
            blended["q_ex"] = blend(external_reasoning, q)
        if "q_in" in self.queries:
            internal_passage = degrade(lambda: self.write_passage(question=q).passage, "", "write_passage",
                                       "dropped the internal augmentation: D_in retrieved with q")
            blended["q_in"] = blend(internal_passage, q)
        for name in ("q_ex", "q_in"):
            if name in self.queries:
                retrieved[name] = self.retrieve(blended[name], self.k)

        # Knowledge filtering (lines 5-6), always against the original question.
        sets = [(name, retrieved[name]) for name in self.queries]
        kept_ids: dict[str, list[int]] = {}
        invalid_ids: dict[str, list[int]] = {}
        topic_cache: dict[str, str] = {}
        if not self.filter:
            knowledge = dedup_passages(*(docs for _, docs in sets))
        elif self.filter_mode == "per_set":
            for name, docs in sets:
                kept_ids[name], invalid_ids[name] = self._filter(q, docs, topic_cache)
            knowledge = dedup_passages(*([docs[i] for i in kept_ids[name]] for name, docs in sets))
        else:
            union = dedup_passages(*(docs for _, docs in sets))
            kept_ids["union"], invalid_ids["union"] = self._filter(q, union, topic_cache)
            knowledge = [union[i] for i in kept_ids["union"]]

        # the filter kept nothing of what was retrieved (nothing retrieved is not the filter's doing)
        filter_empty = self.filter and not knowledge and any(docs for _, docs in sets)
        if filter_empty and self.if_nothing_kept == "unfiltered":
            knowledge = dedup_passages(*(docs for _, docs in sets))

        # Answer generation (line 7): CoT over the kept knowledge, then a short answer.
        answers, reasonings = [], []
        for top_p in (SAMPLING_TOP_P if self.sampling else (None,)):
            # top_p = 0 is the greedy answer; the others sample (temperature 1, so top_p governs)
            config = {} if not top_p else {"config": {"temperature": 1.0, "top_p": top_p, "rollout_id": len(answers)}}
            reasonings.append(self.answer_cot(knowledge=format_knowledge(knowledge), question=q, **config).reasoning)
            answers.append(degrade(
                lambda: self.extract_answer(context=reasonings[-1], question=q, **config).answer,
                where="extract_answer", what="used answer_cot's answer (its reasoning's final answer)",
                otherwise=lambda: answer_from_reasoning(reasonings[-1], self.answer_mode)))
        answer, reasoning = answers[0], reasonings[0]
        stages = {"original": {"passages": docs_q}} if "q" in self.queries or "q_ex" in self.queries else {}
        for name, stage in (("q_ex", "external_cot"), ("q_in", "internal_knowledge")):
            if name in self.queries:
                stages[stage] = {"query": blended[name], "passages": retrieved[name]}
        if self.filter:
            stages["filter"] = {"passages": dedup_passages(*(docs for _, docs in sets)), "kept": knowledge,
                                "empty": bool(filter_empty),
                                "context_chars": sum(len(p.long_text) for p in knowledge)}
        stages["reader"] = {"answers": answers}
        return dspy.Prediction(
            answer=answer,
            stages=stages,
            candidates=answers,
            passages=knowledge,
            reasoning=reasoning,
            external_reasoning=external_reasoning,
            internal_passage=internal_passage,
            queries=blended,
            retrieved=retrieved,
            kept_ids=kept_ids,
            invalid_ids=invalid_ids,
            topic=topic_cache.get("topic"),
            filter_empty=filter_empty,
        )

    def _filter(self, question: str, docs: list[Passage], topic_cache: dict[str, str]) -> tuple[list[int],
                                                                                                list[int]]:
        """One filter chain over one set of passages (Eq. 7): the ids kept, and the invalid ids returned.
        A filter call whose reply cannot be read keeps the set unfiltered."""
        if not docs:
            return [], []
        from ragzoo.adapters import UnreadableOutput
        from ragzoo.tracing import record_degradation

        try:
            return self._filter_chain(question, docs, topic_cache)
        except UnreadableOutput as error:
            record_degradation(error.predictor, f"kept the set of {len(docs)} passages unfiltered")
            return list(range(len(docs))), []

    def _filter_chain(self, question: str, docs: list[Passage], topic_cache: dict[str, str]) -> tuple[list[int],
                                                                                                      list[int]]:
        knowledge = format_knowledge(docs)
        if self.filter_stages == "ids":
            ids = self.filter_ids(question=question, knowledge=knowledge).relevant_ids
            return clean_ids(ids, len(docs))
        if self.filter_stages == "topic":
            if "topic" not in topic_cache or not self.reuse_topic:
                topic_cache["topic"] = self.filter_topic(question=question).topic
            analysis = self.filter_analysis(topic=topic_cache["topic"], question=question,
                                            knowledge=knowledge).relevance_analysis
        else:
            analysis = self.filter_analysis(question=question, knowledge=knowledge).relevance_analysis
        ids = self.filter_ids(context=analysis, question=question, knowledge=knowledge).relevant_ids
        return clean_ids(ids, len(docs))
