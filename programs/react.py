"""ReAct with a retriever as its only tool: BlendFilter's "ReAct" baseline.

Paper: Yao et al. 2022, "ReAct: Synergizing Reasoning and Acting in Language Models", arXiv 2210.03629; run as
a baseline of BlendFilter (Wang et al. 2024, arXiv 2402.11129, §4.1.3, Tables 2-5): "a loop of reasoning,
action and observation; the action either issues a search or finishes with the answer".

Control flow: at each step one call sees the question and the trajectory so far and returns a thought, an
action (`search` or `finish`) and its argument. `search` retrieves the top-k passages for the argument; the
passages become the step's observation. `finish` ends the loop with the argument as the answer. After
`max_steps` steps without `finish`, one more call answers from the trajectory.

LM calls: n + 1 steps for n searches before finishing (n < max_steps); max_steps + 1 when the budget runs
out (the final call). Retrievals: n (at most max_steps).

Choices where the papers are open:
- The action is typed (Literal["search", "finish"] plus a string argument) instead of parsing
  "Search[...]" / "Finish[...]"; the Wikipedia "Lookup" action of the original is not offered (a passage
  retriever has no page to look into).
- Observation = the k passages "Title | text", joined; k = 5 (BlendFilter's setting for every method).
- max_steps = 5 (the original paper's HotpotQA runs allow up to 7; BlendFilter does not say).
- An empty search argument searches with the question itself.
- `answer_mode="yes_no"`: the final answer is read as yes/no ("Yes", "No." count); anything else is kept
  verbatim (and scores 0), since the finish argument is shared with factoid questions.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as a degradation in the trace): a
  `step` whose reply cannot be read ends the loop, and the `finish` call answers from what was observed so
  far (stop_reason "unreadable_step"). The `finish` call has no fallback: its unreadable reply fails the
  question.
- Not `dspy.ReAct`: its tool-calling signature and extract step are generic; here every call is typed and
  named so the trajectory, calls and retrievals are the ones BlendFilter describes.

Signatures (`signatures/react.py`, instructions in our own words; our instruction <- what the paper's call does):
- `step` (ReActStep: take one step toward the answer, a thought about what is still missing, then search for
  it or finish) <- ReAct's few-shot prompt that continues the interleaved Thought / Action / Observation
  trajectory, with Search[entity] / Lookup[keyword] / Finish[answer] actions (Lookup dropped, see above).
- `finish` (ReActFinish: the budget is spent, answer from what was gathered) <- no call of ReAct's own: the
  original ends such a trajectory without an answer (or backs off to CoT-SC in its ReAct -> CoT-SC variant);
  here one call answers from the trajectory, so every question gets an answer.
"""

from __future__ import annotations

import dspy

from ragzoo.programs import register
from ragzoo.programs.base import (PositiveInt, RagProgram, TopK, dedup_passages, degrade, passages_as_context,
                                  read_yes_no)
from ragzoo.signatures.common import AnswerMode
from ragzoo.signatures.react import ReActFinish, ReActStep


@register("react", paper="ReAct (Yao et al. 2022, arXiv 2210.03629), BlendFilter's ReAct baseline",
          short="ReAct (Yao et al. 2022)", calls="n + 1 for n searches (at most max_steps + 1 = 6)",
          summary="thought / search / observation loop until a finish action, then the answer")
class ReAct(RagProgram):
    """ReAct: think, search or finish, observe the passages, repeat.

    Knobs:
        k: passages per search (the observation).
        max_steps: steps at most; after them the answer is forced from the trajectory.
        answer_mode: "short" answers; "yes_no" reads the final answer as yes or no (StrategyQA).
    """

    def __init__(self, retriever, k: TopK = 5, max_steps: PositiveInt = 5, answer_mode: AnswerMode = "short"):
        super().__init__(retriever)
        self.k, self.max_steps, self.answer_mode = k, max_steps, answer_mode
        self.step = dspy.Predict(ReActStep)
        self.finish = dspy.Predict(ReActFinish)

    # Stage diagnostics (ragzoo.diagnostics): the think/search steps, then the forced answer when no finish came.
    STAGES = {"hops": ("step",), "finish": ("finish",)}

    def forward(self, question: str) -> dspy.Prediction:
        trajectory: list[str] = []
        gathered: list = []
        searches: list[str] = []
        answer = None
        stop_reason = "max_steps"
        for _ in range(self.max_steps):
            step = degrade(lambda: self.step(question=question, trajectory=trajectory), None, "step",
                           "finished with what was observed")
            if step is None:
                stop_reason = "unreadable_step"
                break
            argument = str(step.argument or "").strip()
            if step.action == "finish":
                trajectory.append(f"Thought: {step.thought}\nAction: finish[{argument}]")
                answer = argument
                break
            query = argument or question
            found = self.retrieve(query, self.k)
            searches.append(query)
            gathered = dedup_passages(gathered, found)
            observation = " ".join(passages_as_context(found)) or "(nothing found)"
            trajectory.append(f"Thought: {step.thought}\nAction: search[{query}]\nObservation: {observation}")
        stop_reason = "finish" if answer is not None else stop_reason
        if answer is None:
            answer = self.finish(question=question, trajectory=trajectory).answer
        if self.answer_mode == "yes_no":
            answer = read_yes_no(answer) or answer
        stages = {"hops": {"passages": gathered, "queries": searches, "depth": len(searches),
                           "decision": stop_reason}}
        if stop_reason != "finish":
            stages["finish"] = {}
        return dspy.Prediction(answer=answer, passages=gathered, trajectory=trajectory, searches=searches,
                               stop_reason=stop_reason, stages=stages)
