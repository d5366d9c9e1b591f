"""DSPy's multi-hop program (the "multihop" row of the DSPy paper's HotPotQA table).

Paper: Khattab et al. 2023, "DSPy: Compiling Declarative Language Model Calls into Self-Improving
Pipelines", arXiv:2310.03714, Sec. 7 / Table 2 (`BasicMultiHop`): for each of H hops a chain-of-thought
query generator reads the context gathered so far and the question and writes a search query; k passages
are retrieved per hop and appended to the context; a chain-of-thought answer over the whole context ends.

Choices where the paper is open or where we differ:
- hops = 2 and k = 3 passages per hop, the paper's `BasicMultiHop(passages_per_hop=3)` with two hops.
- One query generator serves every hop, as in the paper's program (DSPy's later tutorial uses one per hop);
  hop 1 sees an empty context.
- The context is deduplicated across hops (first occurrence kept, hop order), as DSPy's tutorial version
  does; the paper's listing simply concatenates.
- `answer_mode="yes_no"` types the answer as Literal["yes", "no"] (StrategyQA), read leniently ("Yes", "No."
  count; `ragzoo.programs.base.YesNoPredict`); default "short".
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as a degradation in the trace): a
  hop whose query generation (`generate_query`) cannot be read searches with the question itself. The
  answer call (`generate_answer`) has no fallback: its unreadable reply fails the question.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import (PositiveInt, RagProgram, TopK, answer_predictor, dedup_passages, degrade,
                                  passages_as_context)
from ragzoo.signatures.common import AnswerMode, AnswerWithContext, GenerateSearchQuery


@register("multihop", paper="DSPy multi-hop program (Khattab et al. 2023, arXiv:2310.03714, Table 2)",
          short="DSPy multi-hop (Khattab et al. 2023)", calls="hops + 1 (3)",
          summary="per hop: CoT query over the context so far, retrieve k; CoT answer")
class MultiHop(RagProgram):
    """DSPy's BasicMultiHop: H generated queries, k passages each, deduplicated, then a CoT answer
    (H + 1 calls, H retrievals).

    Knobs:
        hops: generated search queries, one retrieval each (the DSPy paper's program uses 2).
        k: passages retrieved per hop (the paper's passages_per_hop=3).
        answer_mode: "short" answers in a few words; "yes_no" types the answer as yes or no (StrategyQA).
    """

    STAGES = {"hops": ("generate_query",), "reader": ("generate_answer",)}

    def __init__(self, retriever, hops: PositiveInt = 2, k: TopK = 3, answer_mode: AnswerMode = "short"):
        super().__init__(retriever)
        self.hops = hops
        self.k = k
        self.generate_query = dspy.ChainOfThought(GenerateSearchQuery)
        self.generate_answer = answer_predictor(AnswerWithContext, answer_mode, chain_of_thought=True)

    def forward(self, question: str) -> dspy.Prediction:
        context: list = []
        queries: list[str] = []
        for _ in range(self.hops):
            query = degrade(lambda: self.generate_query(context=passages_as_context(context),
                                                        question=question).search_query,
                            question, "generate_query", "searched with the question as this hop's query")
            queries.append(query)
            context = dedup_passages(context, self.retrieve(query, self.k))
        result = self.generate_answer(context=passages_as_context(context), question=question)
        return dspy.Prediction(answer=result.answer, passages=context, reasoning=result.reasoning, queries=queries,
                               stages={"hops": {"passages": context, "queries": queries, "depth": len(queries)},
                                       "reader": {}})
