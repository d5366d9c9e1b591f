"""Guideline: a guiding analysis, merged with a chain of thought, checked, answered. ActiveRAG's "Guideline"
baseline (no retrieval).

Paper: ActiveRAG (Xu et al. 2024, arXiv 2402.13547), Table 2 ("w/o RAG" block) and Table 8: prompt 1 asks for a
step-by-step analysis that guides a student without giving the result; prompt 2 gives another analysis of
the question (the CoT baseline's reply) and asks to combine both, verify, and answer.

Control flow: the chain-of-thought call (the CoT baseline, question only), the guiding-analysis call
(question only), and the merging call (question + analysis + the whole CoT reply). 3 LM calls, no retrieval.
The chain-of-thought call is the `cot` method's own signature (`ragzoo.signatures.common.ReasonThenAnswer`),
which is also ActiveRAG's first step: Table 8 has one CoT prompt for the three.

Instructions (our words; issue 22, item 13), our instruction <- what the paper's call does:
- `cot` (`ReasonThenAnswer`, shared with `cot`): answer from your own knowledge, `reasoning` = recalled
  facts and inferences in order, `answer` = where they lead <- the CoT prompt: step-by-step reasoning
  before the answer, in a reasoning/answer format.
- `guide` (`GuidingAnalysis`): map out the route to the answer (facts to recall, order of steps) as guidance
  a learner could follow, stopping before any conclusion <- a professor persona asked for a detailed,
  step-by-step analysis that guides students and withholds the final result.
- `merge` (`MergeReasoning`): produce one reasoning sounder than either input (the guiding analysis; the
  other, concluding, possibly wrong attempt) by keeping the steps that hold up and repairing or dropping the
  rest, and `answer` = its conclusion <- a second turn that shows another analysis, asks to combine it with
  one's own, verify, and give a better reasoning process and the answer.

Choices where the paper is open: that prompt 2's "{chain_of_thought_reply}" comes from a separate CoT call
(3 calls in all) is inferred (the notes mark it so); the two first calls are independent. The CoT reply is
passed whole, reasoning and answer, as ActiveRAG's nexus receives it. A `guide` reply that cannot be read
(issue 14) leaves no guideline: the merging call gets the analysis "(none)" and answers from the CoT reply
alone (`analysis` is None in the prediction), recorded as a degradation in the trace
(`ragzoo.programs.base.degrade`). The merging call has no fallback.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, degrade
from ragzoo.signatures.activerag import initial_reply
from ragzoo.signatures.common import ReasonThenAnswer
from ragzoo.signatures.self_refined import GuidingAnalysis, MergeReasoning


@register("guideline", paper="Guideline, ActiveRAG's baseline (Xu et al. 2024, arXiv 2402.13547)",
          short="Guideline (ActiveRAG's baseline)", calls="3", uses_retrieval=False,
          summary="chain of thought + a guiding analysis, merged and checked into the answer; no retrieval")
class Guideline(RagProgram):
    """Guideline: CoT reply + guiding analysis -> merged, checked reasoning and the answer (3 calls)."""

    def __init__(self, retriever=None):
        super().__init__(retriever)
        self.cot = dspy.Predict(ReasonThenAnswer)  # the CoT row's prompt, as Table 8 shares it
        self.guide = dspy.Predict(GuidingAnalysis)
        self.merge = dspy.Predict(MergeReasoning)

    # Stage diagnostics (ragzoo.diagnostics): the CoT reply, the guiding analysis, their merge (no retrieval).
    STAGES = {"cot": ("cot",), "guide": ("guide",), "merge": ("merge",)}

    def forward(self, question: str) -> dspy.Prediction:
        first = self.cot(question=question)
        analysis = degrade(lambda: self.guide(question=question).analysis, None, "guide",
                           "answered without the guideline")
        result = self.merge(question=question, analysis="(none)" if analysis is None else analysis,
                            other_reasoning=initial_reply(first.reasoning, first.answer))
        return dspy.Prediction(answer=result.answer, reasoning=result.reasoning, analysis=analysis,
                               cot_answer=first.answer, passages=[],
                               stages={"cot": {"answer": first.answer}, "guide": {"decision": analysis is not None},
                                       "merge": {}})
