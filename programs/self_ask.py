"""Self-Ask with retrieval.

Paper: Press et al. 2022, "Measuring and Narrowing the Compositionality Gap in Language Models",
arXiv:2210.03350 (Self-Ask + search engine); run as in BlendFilter (Wang et al. 2024, arXiv:2402.11129,
Sec. 4.1.3): the model asks a follow-up question, it is answered from retrieval, and this repeats until no
follow-up is needed, then the model answers the original question; the retrieved knowledge is placed
before the original question (Yoran et al. 2023, arXiv:2310.01558).

Program: a "next step" predictor reads the question, the passages found so far and the answered follow-ups,
and returns either `done=True` with the final answer, or `done=False` with the next follow-up question. A
follow-up retrieves k passages and an intermediate-answer predictor answers it from those passages (the
paper lets the search engine answer; with a passage retriever an LM reads them). After `max_steps`
follow-ups without `done`, a final-answer predictor answers from everything gathered.

LM calls: 2n + 1 for n follow-ups (n < max_steps: n+1 steps + n intermediate answers; n = max_steps:
max_steps steps + max_steps intermediate answers + 1 final; 2n + 2 when a step is malformed, see below).
Retrievals: n.

Choices where the papers are open:
- The step decision is typed (done: bool, follow_up: str, answer: str) instead of parsing "Follow up:" /
  "So the final answer is:" from free text.
- max_steps = 4 follow-ups (2WikiMultihopQA's bridge-comparison questions need four); knob `max_steps`.
- k = 5 passages per follow-up (BlendFilter's setting); knob `k`.
- The next-step predictor sees all passages gathered so far, deduplicated, newest follow-up last (Yoran et
  al.'s "retrieved knowledge before the question"); the intermediate answer sees only its follow-up's
  passages.
- `done=True` with an empty answer, or `done=False` with an empty follow-up, also ends the loop and goes
  to the final-answer predictor (`stop_reason` records why the loop ended).
- The prediction's `passages` are all passages gathered (what the final answer saw).
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as degradations in the trace): a
  `next_step` reply that cannot be read ends the loop and goes to the final-answer predictor
  (stop_reason "unreadable_step"); a follow-up's intermediate answer (`answer_follow_up`) that cannot be
  read is "unknown" for it. The final answer call has no fallback: its unreadable reply fails the question.
- No `answer_mode` knob: the step predictor's answer is empty while a follow-up is asked, so it stays a
  string (a yes/no instruction can be compiled in through demos).
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import PositiveInt, RagProgram, TopK, dedup_passages, degrade, passages_as_context
from ragzoo.signatures.common import AnswerWithContext, SelfAskFinalAnswer, SelfAskStep, step_text


@register("self_ask", paper="Self-Ask (Press et al. 2022, arXiv:2210.03350) with retrieval, as in BlendFilter",
          short="Self-Ask (Press et al. 2022)", calls="2n+1 for n follow-ups (at most 9)",
          summary="ask follow-up questions answered from retrieval until done, then answer")
class SelfAsk(RagProgram):
    """Self-Ask: follow-up questions answered from retrieval until the model gives the final answer.

    Knobs:
        max_steps: follow-up questions at most before the final answer is forced (2Wiki needs four).
        k: passages retrieved per follow-up question.
    """

    def __init__(self, retriever, max_steps: PositiveInt = 4, k: TopK = 5):
        super().__init__(retriever)
        self.max_steps = max_steps
        self.k = k
        self.next_step = dspy.Predict(SelfAskStep)
        self.answer_follow_up = dspy.Predict(AnswerWithContext)
        self.final_answer = dspy.Predict(SelfAskFinalAnswer)

    # Stage diagnostics (ragzoo.diagnostics): the follow-up loop (step, retrieval, intermediate answer), then
    # the final answer call when the loop did not end with one.
    STAGES = {"follow_ups": ("next_step", "answer_follow_up"), "final": ("final_answer",)}

    def forward(self, question: str) -> dspy.Prediction:
        context: list = []
        intermediates: list[str] = []
        steps: list[str] = []
        follow_ups: list[str] = []
        stop_reason = "max_steps"
        answer = None
        for _ in range(self.max_steps):
            step = degrade(lambda: self.next_step(context=passages_as_context(context), question=question,
                                                  steps=steps),
                           None, "next_step", "went to the final answer")
            if step is None:
                stop_reason = "unreadable_step"
                break
            if step.done:
                if str(step.answer).strip():
                    answer, stop_reason = str(step.answer).strip(), "done"
                else:
                    stop_reason = "done_without_answer"
                break
            follow_up = str(step.follow_up).strip()
            if not follow_up:
                stop_reason = "no_follow_up"
                break
            found = self.retrieve(follow_up, self.k)
            intermediate = degrade(lambda: self.answer_follow_up(context=passages_as_context(found),
                                                                 question=follow_up).answer,
                                   "unknown", "answer_follow_up", "answered the follow-up with unknown")
            follow_ups.append(follow_up)
            intermediates.append(intermediate)
            steps.append(step_text(follow_up, intermediate))
            context = dedup_passages(context, found)
        stages = {"follow_ups": {"passages": context, "queries": follow_ups, "answers": intermediates,
                                 "depth": len(follow_ups), "decision": stop_reason}}
        if answer is None:
            answer = self.final_answer(context=passages_as_context(context), question=question, steps=steps).answer
            stages["final"] = {}
        return dspy.Prediction(answer=answer, passages=context, steps=steps, follow_ups=follow_ups,
                               stop_reason=stop_reason, stages=stages)
