"""Self-Refine: the LM summarizes and analyses the passages, then answers from its summary. ActiveRAG's
"Self-Refine" baseline.

Paper: ActiveRAG (Xu et al. 2024, arXiv 2402.13547), Table 2 and Table 8 ("inspired by Self-RAG", Asai et al.
2024, without fine-tuning): prompt 1 extracts the relevant and useful information from the passages and
writes a summary and analysis; prompt 2 is the vanilla RAG prompt.

Control flow: retrieve k; one call writes the summary; one vanilla-RAG call answers with the summary in
place of the passages: the `rag` method's own signature (`ragzoo.signatures.common.AnswerWithContext`), the
summary in its `context`. 2 LM calls, 1 retrieval.

Instructions (our words; issue 22, item 13), our instruction <- what the paper's call does:
- `summarize` (`SummarizePassages`): the answer will be written from this summary instead of the passages,
  so it must carry every fact the answer depends on and nothing else, then what those facts imply <- the
  question and the passages, then a request to extract the relevant, useful information and write a summary
  and analysis of the passages.
- `answer` (`AnswerWithContext`, shared with `rag`): answer using the passages in the context (here the
  summary), falling back on what you know <- the Vanilla RAG prompt with the summary as its passages.

Choices where the paper is open: that the summary REPLACES the passages in prompt 2 is inferred (the notes
mark it so); `answer_sees="summary_and_passages"` gives the answer call both instead. A `summarize` reply
that cannot be read (issue 14) leaves no summary (`summary` is None): the answer call reads the
unsummarized passages, recorded as a degradation in the trace (`ragzoo.programs.base.degrade`); the answer
call has no fallback.
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, degrade, passages_as_context
from ragzoo.programs.chain_of_note import numbered
from ragzoo.signatures.common import AnswerWithContext
from ragzoo.signatures.self_refined import SummarizePassages


@register("self_refine", paper="Self-Refine, ActiveRAG's baseline (Xu et al. 2024, arXiv 2402.13547)",
          short="Self-Refine (ActiveRAG's baseline)", calls="2",
          summary="summarize and analyse the passages, then answer from the summary")
class SelfRefine(RagProgram):
    """Self-Refine: a summary of the passages replaces them for the answer (2 calls).

    Knobs:
        k: passages retrieved.
        answer_sees: what the answer call reads: "summary" (the paper's reading) or "summary_and_passages".
    """

    def __init__(self, retriever, k: TopK = 5,
                 answer_sees: Literal["summary", "summary_and_passages"] = "summary"):
        super().__init__(retriever)
        self.k, self.answer_sees = k, answer_sees
        self.summarize = dspy.Predict(SummarizePassages)
        self.answer = dspy.Predict(AnswerWithContext)  # Vanilla RAG's answering prompt, as Table 8 says

    # Stage diagnostics (ragzoo.diagnostics): the answer reads the summary's texts, so they decide whether
    # the evidence reached it.
    STAGES = {"retrieval": (), "summarize": ("summarize",), "reader": ("answer",)}

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        summary = degrade(lambda: self.summarize(passages=numbered(passages), question=question).summary, None,
                          "summarize", "answered from the unsummarized passages")
        if summary is None:
            texts = passages_as_context(passages)
        else:
            texts = [summary] + (passages_as_context(passages) if self.answer_sees == "summary_and_passages"
                                 else [])
        result = self.answer(context=texts, question=question)
        return dspy.Prediction(answer=result.answer, summary=summary, passages=passages,
                               stages={"retrieval": {"passages": passages},
                                       "summarize": {"decision": summary is not None, "context": texts},
                                       "reader": {}})
