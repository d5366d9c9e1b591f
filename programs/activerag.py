"""ActiveRAG: construct knowledge from the passages, then use it to check and improve the model's own reasoning.

Paper: "ActiveRAG: Revealing the Treasures of Knowledge via Active Learning", Xu et al. (arXiv 2402.13547),
§3 (pipeline), §3.3 (the four knowledge-construction agents), Tables 6–7 (agent and nexus prompts),
Table 2 (the reported system = the Associate agent), Table 3 (the other agents, oracle rerank),
Limitations (3 API calls per question). Official code: OpenMatch/ActiveRAG.

Control flow per question (default, the paper's reported configuration: 3 LM calls, 1 retrieval):
1. retrieve the top-k passages for the question (k = 5: Table 2's main setting; the `fixed` retriever
   replays the top-5 passages recorded in ActiveRAG's data);
2. initial chain of thought from the question ALONE (`initial_cot`: no passages);
3. knowledge construction by one agent over the question and the passages (`<agent>_kc`);
4. cognitive nexus (`<agent>_nexus`): question + passages + the whole initial reply (reasoning and answer)
   + the constructed knowledge -> improved reasoning and the final answer.

Knob `agents`: which agents run, in order. Default ("associate",) = Table 2's "ActiveRAG". Passing all four
(or "all") runs what the official code runs: the initial chain of thought once, then the four knowledge
calls, then the four nexus calls: 9 LM calls. Every agent's answer is returned in `agent_answers`, so an
evaluator can score each agent or the oracle rerank of Table 3 (best agent per question; needs gold answers).

Knob `select`, which agent's answer is THE answer when several run (the paper reports agents separately and
its only non-oracle selection, PPL-rerank, needs log-probabilities of an open model):
- "first" (default): the first agent in `agents` (Associate by default, the paper's best single agent);
- "vote": the most common normalized answer among the agents; ties go to the agent listed first.

Choices where the paper is open:
- The nexus also sees the passages: in the official code the nexus prompt is the second turn of the agent's
  chat, after the knowledge-construction turn that contains them.
- The initial reply given to the nexus is the whole chain of thought ("Reasoning process: ... Answer: ..."),
  as the code fills `{chain_of_thought_reply}`.
- Typed outputs: the nexus returns `enhanced_reasoning` and a short `answer`; the prediction's answer is that
  field. (The paper scores whether a gold alias is contained in the WHOLE final reply; the evaluator's
  metric decides; `reasoning` holds the winning nexus reasoning for a containment metric over both.)
- Calls run sequentially in the code's order (chain of thought, all knowledge calls, all nexus calls); the
  chain of thought and the knowledge calls are independent and could run in parallel.
- Zero-shot in the paper; here each predictor can be compiled like any other.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.metrics.answer import normalize_answer
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, passages_as_context
from ragzoo.signatures.activerag import (AGENTS, KNOWLEDGE_SIGNATURES, NEXUS_SIGNATURES, Agent,
                                         InitialChainOfThought, initial_reply)

# What the `agents` knob lists: agent names, or "all" alone for the four in the paper's order.
AgentChoice = Literal[Agent, "all"]


def resolve_agents(agents: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    """The agents to run for a (type-checked) `agents` knob: "all" means the four in the paper's order;
    empty, "all" beside other names, and repeats are refused."""
    names = (agents,) if isinstance(agents, str) else tuple(agents)
    if names == ("all",):
        return AGENTS
    if not names or "all" in names:
        raise ConfigError(f"activerag knob agents={','.join(names)!r}: name some of {', '.join(AGENTS)}, "
                          f"or 'all' alone")
    if len(set(names)) != len(names):
        raise ConfigError(f"activerag knob agents lists an agent twice: {', '.join(names)}")
    return names


def pick_winner(agents: tuple[str, ...], answers: dict[str, str], select: str) -> str:
    """The agent whose answer is returned: the first listed, or the majority of normalized answers with
    ties broken by listing order."""
    if select == "first" or len(agents) == 1:
        return agents[0]
    counts = Counter(normalize_answer(answers[agent]) for agent in agents)
    return max(agents, key=lambda agent: (counts[normalize_answer(answers[agent])], -agents.index(agent)))


@register("activerag", paper="ActiveRAG: Revealing the Treasures of Knowledge via Active Learning (arXiv 2402.13547)",
          short="ActiveRAG (Xu et al. 2024)", calls="3 (1 + 2 per agent; 9 with all four)",
          summary="initial chain of thought, knowledge construction by an agent, cognitive nexus answers")
class ActiveRag(RagProgram):
    """Initial chain of thought + knowledge construction + cognitive nexus (3 LM calls per agent setting).

    Knobs:
        k: passages retrieved for the question (Table 2's main setting: 5).
        agents: knowledge-construction agents to run, in order; "all" runs the four, as the official code
            does (associate = the paper's reported "ActiveRAG").
        select: which agent's answer is returned when several run: "first" listed, or "vote" (most common
            normalized answer; ties to the first listed).
    """

    def __init__(self, retriever, k: TopK = 5, agents: tuple[AgentChoice, ...] = ("associate",),
                 select: Literal["first", "vote"] = "first"):
        super().__init__(retriever)
        self.k, self.agents, self.select = k, resolve_agents(agents), select
        self.initial_cot = dspy.Predict(InitialChainOfThought)
        for agent in self.agents:
            setattr(self, f"{agent}_kc", dspy.Predict(KNOWLEDGE_SIGNATURES[agent]))
        for agent in self.agents:
            setattr(self, f"{agent}_nexus", dspy.Predict(NEXUS_SIGNATURES[agent]))

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        context = passages_as_context(passages)
        initial = self.initial_cot(question=question)
        reply = initial_reply(initial.reasoning, initial.answer)
        knowledge = {agent: getattr(self, f"{agent}_kc")(question=question, passages=context).knowledge
                     for agent in self.agents}
        nexus = {agent: getattr(self, f"{agent}_nexus")(question=question, passages=context,
                                                        initial_reasoning=reply, knowledge=knowledge[agent])
                 for agent in self.agents}
        answers = {agent: result.answer for agent, result in nexus.items()}
        winner = pick_winner(self.agents, answers, self.select)
        return dspy.Prediction(answer=answers[winner], passages=passages, reasoning=nexus[winner].enhanced_reasoning,
                               winner=winner, agent_answers=answers,
                               agent_reasoning={agent: result.enhanced_reasoning for agent, result in nexus.items()},
                               knowledge=knowledge, initial_reasoning=initial.reasoning,
                               initial_answer=initial.answer)
