"""Scripted runs for the stage and attribution tests: a program evaluated on hand-made questions whose
correct classification is known, with a scripted LM and a fixed retriever, records kept in memory."""

from __future__ import annotations

import dspy

from ragzoo.retrieval.base import Passage
from ragzoo.runs import evaluate

# Two gold passages (answer "Paris" in one, the other a title-gold only), three distractors.
PARIS = Passage(pid="p1", title="France", text="The capital of France is Paris.")
SEINE = Passage(pid="p2", title="Seine", text="The Seine flows through the city.")
DISTRACTORS = [Passage(pid=f"d{i}", title=f"Other {i}", text=f"nothing useful {i}") for i in range(3)]


def example(question: str = "What is the capital of France?", answer: str = "Paris", titles=None, qid="q1"):
    fields = {"id": qid, "question": question, "answer": answer}
    if titles is not None:
        fields["supporting_titles"] = list(titles)
    return dspy.Example(**fields).with_inputs("question")


def run(program, lm, examples, metric="em") -> list[dict]:
    with dspy.context(lm=lm):
        summary = evaluate(program, list(examples), metric, None, progress=False, abort_failure_rate=None)
    return sorted(summary["records"], key=lambda record: record["id"])
