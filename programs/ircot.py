"""IRCoT: interleave retrieval with chain-of-thought steps. RA-ISF's "IRCoT" baseline.

Paper: Trivedi et al. 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning for Knowledge-Intensive
Multi-Step Questions", arXiv 2212.10509; a retrieval baseline of RA-ISF (Liu et al. 2024, arXiv 2403.06840,
Table 1).

Control flow: retrieve k passages for the question; then repeat: one call writes the NEXT sentence of the
chain of thought from the passages gathered so far and the sentences so far; if it says the reasoning has
reached the answer, stop; otherwise that sentence is the next retrieval query, and its k passages join the
gathered set. After the loop a reader call answers from the passages and the whole chain of thought.
LM calls: s reasoning steps + 1 reader; retrievals: 1 + (s - 1) if the chain finished, 1 + s if the step
budget ran out.

Choices where the papers are open:
- Stopping: a typed `done` flag, instead of matching "answer is" in the generated sentence.
- max_steps = 5 reasoning sentences (the original caps at 8 on some datasets); k = 5 per retrieval (the
  original tunes K in {2, 4, 6, 8}).
- The gathered passages are deduplicated, first retrieved first, capped at `max_passages` (15, the
  original's cap).
- The reader is a separate call (the original's "CoT reader" option), so the final answer is a short span.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as a degradation in the trace): a
  reasoning step (`reason`) whose reply cannot be read stops the reasoning, and the reader answers from
  the passages and sentences so far (stop_reason "unreadable_step"). The reader has no fallback: its
  unreadable reply fails the question.
- `answer_mode="yes_no"`: the reader's answer is typed yes/no and read leniently (StrategyQA).

Signatures (`signatures/decomposition.py`; our instruction <- what the paper's call does):
- `reason` (NextReasoningSentence: the next sentence of the reasoning from the passages so far, and whether it
  reaches the answer) <- IRCoT's "reason" step: the CoT prompt continued by one sentence over the collected
  paragraphs, whose sentence is then the "retrieve" step's query.
- `read` (AnswerFromReasoning: a short answer from the passages and the finished reasoning) <- IRCoT's
  reader over the collected paragraphs (its CoT reader option).
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import (PositiveInt, RagProgram, TopK, answer_predictor, dedup_passages, degrade,
                                  passages_as_context)
from ragzoo.signatures.common import AnswerMode
from ragzoo.signatures.decomposition import AnswerFromReasoning, NextReasoningSentence


@register("ircot", paper="IRCoT (Trivedi et al. 2023, arXiv 2212.10509), RA-ISF's baseline",
          short="IRCoT (Trivedi et al. 2023)", calls="s + 1 for s reasoning steps (at most 6)",
          summary="retrieve, then alternate one chain-of-thought sentence and a retrieval with it; read the answer")
class IRCoT(RagProgram):
    """IRCoT: each new reasoning sentence is the next retrieval query.

    Knobs:
        k: passages retrieved per query (the question, then each reasoning sentence).
        max_steps: reasoning sentences at most.
        max_passages: gathered passages kept at most (first retrieved first).
        answer_mode: "short" answers; "yes_no" types the answer as yes or no (StrategyQA).
    """

    def __init__(self, retriever, k: TopK = 5, max_steps: PositiveInt = 5, max_passages: PositiveInt = 15,
                 answer_mode: AnswerMode = "short"):
        super().__init__(retriever)
        self.k, self.max_steps, self.max_passages, self.answer_mode = k, max_steps, max_passages, answer_mode
        self.reason = dspy.Predict(NextReasoningSentence)
        self.read = answer_predictor(AnswerFromReasoning, answer_mode)

    # Stage diagnostics (ragzoo.diagnostics): the reason/retrieve hops, then the reader.
    STAGES = {"hops": ("reason",), "reader": ("read",)}

    def forward(self, question: str) -> dspy.Prediction:
        retrieved, queries = self.retrieve(question, self.k), [question]
        gathered = retrieved[: self.max_passages]
        sentences: list[str] = []
        finished = False
        stop_reason = "max_steps"
        for _ in range(self.max_steps):
            step = degrade(lambda: self.reason(context=passages_as_context(gathered), question=question,
                                               reasoning_so_far=list(sentences)),
                           None, "reason", "stopped reasoning and read the answer")
            if step is None:
                stop_reason = "unreadable_step"
                break
            sentence = str(step.next_sentence or "").strip()
            if sentence:
                sentences.append(sentence)
            if step.done or not sentence:
                finished = True
                break
            found = self.retrieve(sentence, self.k)
            queries.append(sentence)
            retrieved = dedup_passages(retrieved, found)
            gathered = dedup_passages(gathered, found)[: self.max_passages]
        reasoning = " ".join(sentences)
        answer = self.read(context=passages_as_context(gathered), question=question, reasoning=reasoning).answer
        stages = {"hops": {"passages": retrieved, "kept": gathered, "queries": queries,
                           "depth": len(sentences), "decision": "done" if finished else stop_reason},
                  "reader": {}}
        return dspy.Prediction(answer=answer, passages=gathered, reasoning=reasoning, steps=sentences,
                               stop_reason="done" if finished else stop_reason, stages=stages)
