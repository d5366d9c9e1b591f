"""Signature of SKR's retrieval decision (Wang et al. 2023, "Self-Knowledge Guided Retrieval Augmentation for
Large Language Models", arXiv 2310.05002). The program never sends it to an LM: it is the record type of the
nearest-neighbour memory (its demos), so the memory is saved, loaded and hashed like any predictor's state.
"""

from __future__ import annotations

import dspy


class RetrievalDecision(dspy.Signature):
    """Decide whether answering the question needs retrieved passages, or the model's own knowledge is enough."""

    question: str = dspy.InputField()
    retrieve: bool = dspy.OutputField(desc="true if retrieval helps answer this question")
