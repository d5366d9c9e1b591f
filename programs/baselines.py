"""Single-call baselines of the papers' tables: answer without retrieval (`direct`, `cot`) and answer over
the top-k passages for the question (`rag`, `cot_rag`).

Papers: Direct prompting (Brown et al. 2020, arXiv:2005.14165) and chain-of-thought prompting (Wei et al.
2022, arXiv:2201.11903), run with and without retrieval as in BlendFilter (Wang et al. 2024,
arXiv:2402.11129, Sec. 4.1.3: "Direct", "CoT", "Direct +R", "CoT +R"); `rag` is also the "Vanilla RAG" /
"RAG" baseline of ActiveRAG, RA-ISF and FILCO (the passages placed before the question, one call).

Choices where the papers are open:
- k = 5, BlendFilter's setting for all methods (its baselines included).
- The passages are the top-k for the question, in retrieval order, formatted "Title | text".
- `cot` (no retrieval) is one signature with a `reasoning` output before the answer
  (`ragzoo.signatures.common.ReasonThenAnswer`), the signature ActiveRAG's first step and Guideline's first
  call use too: ActiveRAG's Table 8 has one chain-of-thought prompt for the three (issue 22, item 6), so its
  CoT row sends exactly what its own first step sends. Mapping, our instruction <- the paper's CoT prompt:
  answer from your own knowledge, `reasoning` = the recalled facts and inferences in order, `answer` = where
  they lead <- step-by-step reasoning, then the answer, in a reasoning/answer format.
  `cot_rag` is DSPy's `ChainOfThought` over `AnswerWithContext` (a `reasoning` field before the answer).
  The papers' few-shot demos are what a DSPy optimizer compiles, not hand-written prompt text.
- `rag`'s answering signature (`AnswerWithContext`) is also the answering call of `self_rerank` and
  `self_refine` (ActiveRAG's Table 8 gives theirs as "same as Vanilla RAG"). Mapping, our instruction <- the
  paper's Vanilla RAG prompt: answer using the passages in the context, falling back on what you know <- the
  passages, then a request to answer the question based on them.
- `answer_mode="yes_no"` types the answer as Literal["yes", "no"] (StrategyQA), read leniently ("Yes", "No."
  count; `ragzoo.programs.base.YesNoPredict`); default "short".
- One class per pair: `chain_of_thought` is fixed per method id, so `direct`/`cot` and `rag`/`cot_rag`
  share one control flow and differ only in the predictor.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, answer_predictor, passages_as_context
from ragzoo.signatures.common import AnswerMode, AnswerQuestion, AnswerWithContext, ReasonThenAnswer




@register("direct", paper="Direct prompting (Brown et al. 2020), BlendFilter's 'Direct' baseline", calls="1",
          short="Direct prompting (Brown et al. 2020)",
          summary="answer from the LM's own knowledge, no retrieval", uses_retrieval=False, chain_of_thought=False)
@register("cot", paper="Chain-of-thought prompting (Wei et al. 2022), BlendFilter's 'CoT' baseline", calls="1",
          short="Chain of thought (Wei et al. 2022)",
          summary="reason step by step, then answer; no retrieval", uses_retrieval=False, chain_of_thought=True)
class ClosedBookQA(RagProgram):
    """Answer the question without retrieval (1 LM call, 0 retrievals).

    Knobs:
        answer_mode: "short" answers in a few words; "yes_no" types the answer as yes or no (StrategyQA).
        chain_of_thought: reason step by step before answering (fixed by the id: direct=false, cot=true).
    """

    STAGES = {"reader": ("generate_answer",)}

    def __init__(self, chain_of_thought: bool = False, answer_mode: AnswerMode = "short", retriever=None):
        super().__init__(retriever)
        # reasoning is an output of ReasonThenAnswer itself, so no ChainOfThought wrapper adds a second one
        self.generate_answer = answer_predictor(ReasonThenAnswer if chain_of_thought else AnswerQuestion,
                                                answer_mode)

    def forward(self, question: str) -> dspy.Prediction:
        result = self.generate_answer(question=question)
        return dspy.Prediction(answer=result.answer, passages=[], reasoning=result.get("reasoning"),
                               stages={"reader": {"passages": []}})


@register("rag", paper="Retrieve-then-read (Lewis et al. 2020), BlendFilter's 'Direct +R' baseline", calls="1",
          short="Retrieve-then-read (Lewis et al. 2020)",
          summary="retrieve k passages for the question, answer over them", chain_of_thought=False)
@register("cot_rag", paper="Chain-of-thought over retrieved passages, BlendFilter's 'CoT +R' baseline", calls="1",
          short="Chain of thought over retrieved passages",
          summary="retrieve k passages for the question, reason step by step over them, answer",
          chain_of_thought=True)
class RetrieveThenAnswer(RagProgram):
    """Retrieve the top-k passages for the question and answer over them (1 LM call, 1 retrieval).

    Knobs:
        k: passages retrieved for the question (BlendFilter's setting for every method).
        answer_mode: "short" answers in a few words; "yes_no" types the answer as yes or no (StrategyQA).
        chain_of_thought: reason step by step before answering (fixed by the id: rag=false, cot_rag=true).
    """

    STAGES = {"retrieval": (), "reader": ("generate_answer",)}

    def __init__(self, retriever, k: TopK = 5, chain_of_thought: bool = False, answer_mode: AnswerMode = "short"):
        super().__init__(retriever)
        self.k = k
        self.generate_answer = answer_predictor(AnswerWithContext, answer_mode, chain_of_thought)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        result = self.generate_answer(context=passages_as_context(passages), question=question)
        return dspy.Prediction(answer=result.answer, passages=passages, reasoning=result.get("reasoning"),
                               stages={"retrieval": {"passages": passages}, "reader": {}})
