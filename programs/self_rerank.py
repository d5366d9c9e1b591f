"""Self-Rerank: the LM tags each passage useful/relevant, then answers from the ones it kept. ActiveRAG's
"Self-Rerank" baseline.

Paper: ActiveRAG (Xu et al. 2024, arXiv 2402.13547), Table 2 and Table 8 ("inspired by Self-RAG", Asai et al.
2024, without fine-tuning): prompt 1 labels every passage with two tags and a reason (useful or useless,
relevant or irrelevant); prompt 2 is the vanilla RAG prompt.

Control flow: retrieve k; one call tags the passages (typed: the numbers of the useful passages and of the
relevant ones, plus the reasons); keep the passages tagged BOTH useful and relevant, in retrieval order; one
vanilla-RAG call answers from them: the `rag` method's own signature
(`ragzoo.signatures.common.AnswerWithContext`), so with every passage kept the answering prompt is
exactly `rag`'s. 2 LM calls, 1 retrieval.

Instructions (our words; issue 22, item 13), our instruction <- what the paper's call does:
- `tag` (`TagPassages`): only some passages will be shown to the answer, so judge each on two separate
  counts (on the question's subject = `relevant`; holds what the answer depends on = `useful`), the
  numbers of each kind as typed lists and a reason per passage <- label every passage with a useful/useless
  and a relevant/irrelevant tag and a reason, listing the four combinations, one line per passage.
- `answer` (`AnswerWithContext`, shared with `rag`): answer using the passages in the context, falling back
  on what you know <- the Vanilla RAG prompt with the kept passages.

Choices where the paper is open: which tags survive is not said ("filters out unrelated contents"); `keep`
chooses "useful_and_relevant" (default, the strictest reading) or "useful" or "relevant". When nothing is
kept the answer call sees no passage (the model answers from what it knows). Numbers outside 1..k are
ignored. A `tag` reply that cannot be read (issue 14) keeps every passage, recorded as a degradation in the
trace (`ragzoo.programs.base.degrade`); the answer call has no fallback.
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, degrade, passages_as_context
from ragzoo.programs.chain_of_note import numbered
from ragzoo.signatures.common import AnswerWithContext
from ragzoo.signatures.self_refined import TagPassages


@register("self_rerank", paper="Self-Rerank, ActiveRAG's baseline (Xu et al. 2024, arXiv 2402.13547)",
          short="Self-Rerank (ActiveRAG's baseline)", calls="2",
          summary="tag each passage useful/relevant, answer from the passages that keep both tags")
class SelfRerank(RagProgram):
    """Self-Rerank: tag passages, keep the useful and relevant ones, answer from them (2 calls).

    Knobs:
        k: passages retrieved.
        keep: which tagged passages the answer sees: "useful_and_relevant", "useful" or "relevant".
    """

    def __init__(self, retriever, k: TopK = 5,
                 keep: Literal["useful_and_relevant", "useful", "relevant"] = "useful_and_relevant"):
        super().__init__(retriever)
        self.k, self.keep = k, keep
        self.tag = dspy.Predict(TagPassages)
        self.answer = dspy.Predict(AnswerWithContext)  # Vanilla RAG's answering prompt, as Table 8 says

    STAGES = {"retrieval": (), "tag": ("tag",), "reader": ("answer",)}  # stage diagnostics (ragzoo.diagnostics)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        every = list(range(1, len(passages) + 1))
        tags = degrade(lambda: self.tag(passages=numbered(passages), question=question),
                       dspy.Prediction(useful=every, relevant=every, reasons=None), "tag",
                       "kept every passage untagged")
        useful = {i for i in tags.useful or [] if 1 <= i <= len(passages)}
        relevant = {i for i in tags.relevant or [] if 1 <= i <= len(passages)}
        chosen = {"useful_and_relevant": useful & relevant, "useful": useful, "relevant": relevant}[self.keep]
        kept = [passage for i, passage in enumerate(passages, start=1) if i in chosen]
        result = self.answer(context=passages_as_context(kept), question=question)
        return dspy.Prediction(answer=result.answer, passages=kept, retrieved=passages, reasons=tags.reasons,
                               stages={"retrieval": {"passages": passages},
                                       "tag": {"passages": passages, "kept": kept}, "reader": {}},
                               useful=sorted(useful), relevant=sorted(relevant))
