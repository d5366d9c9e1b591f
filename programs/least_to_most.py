"""Least-to-most prompting, without retrieval: RA-ISF's "Least-to-most" baseline.

Paper: Zhou et al. 2023, "Least-to-Most Prompting Enables Complex Reasoning in Large Language Models",
arXiv 2205.10625; a no-retrieval baseline of RA-ISF (Liu et al. 2024, arXiv 2403.06840, Tables 1-2).

Control flow: one call reduces the question to simpler sub-questions, ordered easiest first; each
sub-question is then answered in turn, seeing the earlier sub-questions with their answers (the "least to
most" part: later steps build on earlier answers); a last call answers the original question with every
solved pair. LM calls: 1 + n + 1 for n sub-questions; no retrieval.

Choices where the papers are open:
- Both stages are zero-shot typed calls here; the original uses few-shot prompts (demos are what
  compiling adds).
- At most `max_subquestions` (5) sub-questions are solved, in the model's order; empty ones are dropped.
- The original question is always answered by a final call, even when the last sub-question restates it.
- `answer_mode="yes_no"`: the final answer is typed yes/no and read leniently (StrategyQA).
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as degradations in the trace):
  `reduce` unreadable -> no sub-questions, the question is solved directly by the final call; a
  `solve_step` reply that cannot be read skips that sub-question (not in `solved`, later steps do not see
  it; `skipped` lists it). The final answer call has no fallback: its unreadable reply fails the question.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import PositiveInt, RagProgram, answer_predictor, degrade
from ragzoo.signatures.common import AnswerMode
from ragzoo.signatures.decomposition import AnswerWithSolvedSteps, ReduceToSubquestions


def solved_text(question: str, answer: str) -> str:
    return f"Q: {question} A: {answer}"


@register("least_to_most", paper="Least-to-most prompting (Zhou et al. 2023, arXiv 2205.10625), RA-ISF's baseline",
          short="Least-to-most (Zhou et al. 2023)", calls="n + 2 for n sub-questions (at most 7)",
          uses_retrieval=False, summary="reduce to ordered sub-questions, answer each with the earlier answers, "
                                        "then the question; no retrieval")
class LeastToMost(RagProgram):
    """Least-to-most: decompose, solve the sub-questions in order, answer the question.

    Knobs:
        max_subquestions: sub-questions solved at most, in the model's order.
        answer_mode: "short" answers; "yes_no" types the final answer as yes or no (StrategyQA).
    """

    def __init__(self, max_subquestions: PositiveInt = 5, answer_mode: AnswerMode = "short", retriever=None):
        super().__init__(retriever)
        self.max_subquestions, self.answer_mode = max_subquestions, answer_mode
        self.reduce = dspy.Predict(ReduceToSubquestions)
        self.solve_step = dspy.Predict(AnswerWithSolvedSteps)
        self.final_answer = answer_predictor(AnswerWithSolvedSteps, answer_mode)

    # Stage diagnostics (ragzoo.diagnostics): reduce, solve each sub-question, answer (no retrieval).
    STAGES = {"reduce": ("reduce",), "solve": ("solve_step",), "final": ("final_answer",)}

    def forward(self, question: str) -> dspy.Prediction:
        proposed = degrade(lambda: self.reduce(question=question).sub_questions, [], "reduce",
                           "solved the question directly, without sub-questions")
        subs = [str(sub).strip() for sub in proposed or []]
        subs = [sub for sub in subs if sub][: self.max_subquestions]
        solved: list[str] = []
        skipped: list[str] = []
        for sub in subs:
            answer = degrade(lambda sub=sub: self.solve_step(solved=list(solved), question=sub).answer, None,
                             "solve_step", f"skipped the sub-question {sub!r}")
            if answer is None:
                skipped.append(sub)
                continue
            solved.append(solved_text(sub, answer))
        answer = self.final_answer(solved=solved, question=question).answer
        stages = {"reduce": {"sub_questions": subs, "depth": 1 if subs else 0},
                  "solve": {"skipped": len(skipped)}, "final": {}}
        return dspy.Prediction(answer=answer, passages=[], sub_questions=subs, solved=solved, skipped=skipped,
                               stages=stages)
