"""Signatures of ReAct (Yao et al. 2022, arXiv 2210.03629) as BlendFilter runs it as a baseline: one step of
the thought / action / observation loop, and the answer forced when the step budget runs out.

Instructions are our own words. The action is typed (`search` or `finish`) with one argument, instead of
parsing "Search[...]" / "Finish[...]" from free text.
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"


class ReActStep(dspy.Signature):
    """Work toward the answer to the question one step at a time. The trajectory lists your earlier
    thoughts, the searches you ran and what each search returned. Think about what is still missing, then
    either search a Wikipedia index for it or finish with the answer."""

    question: str = dspy.InputField()
    trajectory: list[str] = dspy.InputField(desc="earlier steps: thought, action and observation, in order")
    thought: str = dspy.OutputField(desc="what is known so far and what to do next")
    # Dry run takes the longest path (search until the step budget), so its call count is the upper bound.
    action: Literal["search", "finish"] = with_dry_run(
        dspy.OutputField(desc="search: look something up; finish: give the final answer"), "search")
    argument: str = with_dry_run(
        dspy.OutputField(desc="for search, a short keyword query; for finish, " + SHORT_ANSWER), "search query")


class ReActFinish(dspy.Signature):
    """The search budget is spent. From the trajectory of thoughts, searches and observations, give the
    answer to the question."""

    question: str = dspy.InputField()
    trajectory: list[str] = dspy.InputField(desc="the steps taken: thought, action and observation")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
