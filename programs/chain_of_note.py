"""Chain-of-Note: reading notes on each passage, then the answer. ActiveRAG's "Chain-of-Note" baseline.

Paper: Yu et al. 2023, "Chain-of-Note: Enhancing Robustness in Retrieval-Augmented Language Models",
arXiv 2311.09210; run as a prompt-only baseline by ActiveRAG (Xu et al. 2024, arXiv 2402.13547, Table 2,
prompt in Table 8): read the question and the passages, write reading notes, weigh each passage's relevance,
answer from the relevant passages or, if none is relevant, from the model's own knowledge.

One LM call (notes and answer are two typed outputs of it), one retrieval of k passages (5 or 10 in
ActiveRAG's tables).

Instruction (our words; issue 22, item 13), our instruction <- what the paper's call does:
`read` (`NotesThenAnswer`): the answer may lean on a passage only where it really addresses the question,
so `notes` first gives, per passage in order, what matters in it and whether it addresses the question, and
`answer` comes from the passages so judged, or from general knowledge when none is <- a numbered task list:
read the question and the passages, write reading notes with their key points, discuss their relevance,
answer from the relevant ones or, if none is, without them.

Choices where the papers are open: the original Chain-of-Note fine-tunes a model on notes; ActiveRAG (and
this program) prompts instead. Passages are numbered "[i] Title | text". The notes are returned in the
prediction (`notes`), and the answer is a short span.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, passages_as_context
from ragzoo.signatures.self_refined import NotesThenAnswer


def numbered(passages) -> list[str]:
    return [f"[{i}] {text}" for i, text in enumerate(passages_as_context(passages), start=1)]


@register("chain_of_note", paper="Chain-of-Note (Yu et al. 2023, arXiv 2311.09210), ActiveRAG's baseline",
          short="Chain-of-Note (Yu et al. 2023)", calls="1",
          summary="reading notes on each passage and their relevance, then the answer, in one call")
class ChainOfNote(RagProgram):
    """Chain-of-Note: notes on every retrieved passage, then an answer from the relevant ones (1 call).

    Knobs:
        k: passages retrieved (ActiveRAG reports 5 and 10).
    """

    def __init__(self, retriever, k: TopK = 5):
        super().__init__(retriever)
        self.k = k
        self.read = dspy.Predict(NotesThenAnswer)

    STAGES = {"retrieval": (), "notes_reader": ("read",)}  # stage diagnostics (ragzoo.diagnostics)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        result = self.read(passages=numbered(passages), question=question)
        return dspy.Prediction(answer=result.answer, notes=result.notes, passages=passages,
                               stages={"retrieval": {"passages": passages}, "notes_reader": {}})
