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
4. cognitive nexus (`<agent>_nexus`): question + the whole initial reply (reasoning and answer) + the
   constructed knowledge -> improved reasoning and the final answer. These three inputs are exactly what
   the paper's nexus prompts list (Table 7); the nexus does not see the passages (knob `nexus_passages`).

Knob `agents`: which agents run, in order. Default ("associate",) = Table 2's "ActiveRAG". Passing all four
(or "all") runs what the official code runs: the initial chain of thought once, then the four knowledge
calls, then the four nexus calls: 9 LM calls. Every agent's answer is returned in `agent_answers`, so an
evaluator can score each agent, and in `candidates` (the repository's convention for a method's several
candidate answers: a list of strings, one per agent whose nexus ran, in the order of the `agents` knob),
which the oracle metric of Table 3's "Oracle Rerank" row scores (best agent per question; needs gold
answers). With one agent, or a Table 3 ablation, `candidates` holds that one answer.

Knob `select`, which agent's answer is THE answer when several run (the paper reports agents separately and
its only non-oracle selection, PPL-rerank, needs log-probabilities of an open model):
- "first" (default): the first agent in `agents` (Associate by default, the paper's best single agent);
- "vote": the most common normalized answer among the agents; ties go to the agent listed first.

Knob `knowledge`, Table 3's ablations of what the nexus is given in place of constructed knowledge:
- "agent" (default): each agent's constructed knowledge (calls as above);
- "passages" ("CoT w. Passage"): the raw retrieved passages, no knowledge-construction call: 2 LM calls;
- "notes" ("CoT w. Note"): reading notes on the passages in the style of Chain-of-Note, one call, then the
  nexus: 3 LM calls. Both ablations use one generic nexus (`passages_nexus` / `notes_nexus`), not an
  agent's; `agents` and `select` then do not apply.

Instructions (our words; issue 22, items 6 and 13), our instruction <- what the paper's call does:
- `initial_cot` (`ragzoo.signatures.common.ReasonThenAnswer`, the very signature of the `cot` row and of
  Guideline's first call: Table 8 has one CoT prompt): answer from your own knowledge, `reasoning` = the
  recalled facts and inferences in order, `answer` = where they lead <- the CoT prompt: step-by-step
  reasoning before the answer, in a reasoning/answer format.
- `associate_kc` / `anchoring_kc` / `logician_kc`: what to extract (well-known facts plus the details that
  extend them; what the model likely lacks; premises for the inference) and how to present it <- Table 6: a
  persona, the question and passages, then a task description of what to extract and analyse.
- `cognition_kc`: `knowledge` = a list of corrections, each a plausible mistaken belief about the question
  paired with what the passages state instead and the wrong answer it rules out; the passages are
  authoritative <- Table 6: a paragraph on fact-checking and model "illusions", a persona, the passages,
  then a request to extract what contradicts the model's knowledge, the passages being assumed correct.
- `<agent>_nexus`: first what the outputs must hold (`enhanced_reasoning` = a better version of the first
  attempt: confirmed steps kept, refuted ones replaced, gaps filled; `answer` = its conclusion, whether or
  not it matches the first answer), then what this agent's knowledge is and how to use it <- Table 7: the
  earlier answer, the agent's goal, the knowledge, then a request to verify the reasoning for errors,
  enhance it with the knowledge toward the goal, and answer from it, in a fixed output format.
- `notes_kc`, `passages_nexus`, `notes_nexus` (Table 3's ablations): the paper gives no prompt; ours are the
  nexus above with raw passages or reading notes as the knowledge.

Choices where the paper is open:
- Nexus inputs: the paper's Table 7 lists the question, the initial reply and the constructed knowledge, so
  that is the default. The official code runs the nexus as the second turn of the agent's chat, after the
  knowledge-construction turn that contains the passages; `nexus_passages=True` reproduces that context by
  giving the nexus the passages too.
- The prompts of the Table 3 ablations are not given; ours reuse the nexus's check-and-repair task with the
  passages, or the notes, as the knowledge.
- The initial reply given to the nexus is the whole chain of thought ("Reasoning process: ... Answer: ..."),
  as the code fills `{chain_of_thought_reply}`.
- Typed outputs: the nexus returns `enhanced_reasoning` and a short `answer`; the prediction's answer is that
  field, and `reasoning` holds the winning nexus reasoning. The paper scores whether a gold alias is
  contained in the WHOLE final reply: that is the metric `contains_reply` (reasoning and answer), the first
  metric of `reproduce activerag-table2`; `contains` reads the answer alone.
- Calls run sequentially in the code's order (chain of thought, all knowledge calls, all nexus calls); the
  chain of thought and the knowledge calls are independent and could run in parallel.
- Zero-shot in the paper; here each predictor can be compiled like any other.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, recorded as degradations in the trace):
  `initial_cot` unreadable -> an empty initial chain of thought (the nexus sees "(none)" as the initial
  reply); an agent's knowledge call (`<agent>_kc`, `notes_kc`) unreadable -> the nexus goes on without
  that agent: its nexus call is not made and it is not among `agent_answers` or `candidates`; if that leaves
  no agent, the FIRST listed agent's nexus runs with no constructed knowledge ("(none)") so the question is
  still answered. A nexus call is an answer call: its unreadable reply fails the question.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.metrics.answer import normalize_answer
from ragzoo.metrics.rates import is_unknown
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, degrade, passages_as_context
from ragzoo.signatures.activerag import (AGENTS, KNOWLEDGE_SIGNATURES, NEXUS_SIGNATURES, NEXUS_WITH_PASSAGES,
                                         Agent, InitialChainOfThought, ReadingNotes, initial_reply)

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
    ties broken by listing order. An abstention ("unknown", or nothing) casts no vote, as in Post-Fusion's
    vote: two agents that could not answer do not outvote one that did. When every agent abstains, the first
    listed."""
    if select == "first" or len(agents) == 1:
        return agents[0]
    voters = [agent for agent in agents if not is_unknown(answers[agent])]
    if not voters:
        return agents[0]
    counts = Counter(normalize_answer(answers[agent]) for agent in voters)
    return max(voters, key=lambda agent: (counts[normalize_answer(answers[agent])], -agents.index(agent)))


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
            normalized answer, abstentions casting no vote; ties to the first listed).
        nexus_passages: also give the nexus the retrieved passages (the official code's chat context); the
            paper's nexus prompt (Table 7) has only the question, the initial reply and the knowledge.
        knowledge: what the nexus is given: "agent" (constructed knowledge), "passages" (Table 3's CoT w.
            Passage: raw passages, no construction call) or "notes" (CoT w. Note: reading notes).
    """

    def __init__(self, retriever, k: TopK = 5, agents: tuple[AgentChoice, ...] = ("associate",),
                 select: Literal["first", "vote"] = "first", nexus_passages: bool = False,
                 knowledge: Literal["agent", "passages", "notes"] = "agent"):
        super().__init__(retriever)
        if knowledge != "agent" and (tuple(agents) != ("associate",) or select != "first"):
            # the ablations have one source of knowledge and one nexus: no agents to run or vote among
            raise ConfigError(f"activerag knobs agents and select apply to knowledge=agent only, not "
                              f"knowledge={knowledge} (Table 3's ablations replace the agents)")
        self.k, self.select = k, select
        self.nexus_passages, self.knowledge = nexus_passages, knowledge
        # the ablations replace the agents by one generic source of knowledge
        self.agents = resolve_agents(agents) if knowledge == "agent" else (knowledge,)
        nexus_signatures = NEXUS_WITH_PASSAGES if nexus_passages else NEXUS_SIGNATURES
        self.initial_cot = dspy.Predict(InitialChainOfThought)
        if knowledge == "agent":
            for agent in self.agents:
                setattr(self, f"{agent}_kc", dspy.Predict(KNOWLEDGE_SIGNATURES[agent]))
        elif knowledge == "notes":
            self.notes_kc = dspy.Predict(ReadingNotes)
        for agent in self.agents:
            setattr(self, f"{agent}_nexus", dspy.Predict(nexus_signatures[agent]))

    # Stage diagnostics (ragzoo.diagnostics): retrieval, the initial CoT, the knowledge-constructing agents, the
    # cognitive nexus (one call per agent, then the answer chosen among theirs).
    STAGES = {"retrieval": (), "initial_cot": ("initial_cot",),
              "agents": (*(f"{agent}_kc" for agent in (*AGENTS, "notes")),),
              "nexus": (*(f"{agent}_nexus" for agent in (*AGENTS, "passages", "notes")),)}

    def _construct(self, agent: str, question: str, context: list[str]) -> str:
        if agent == "passages":
            return "\n".join(context) or "(none)"
        return getattr(self, f"{agent}_kc")(question=question, passages=context).knowledge

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        context = passages_as_context(passages)
        initial = degrade(lambda: self.initial_cot(question=question),
                          dspy.Prediction(reasoning="", answer=""), "initial_cot",
                          "went on with an empty initial chain of thought")
        reply = initial_reply(initial.reasoning, initial.answer) if initial.reasoning or initial.answer else "(none)"
        knowledge = {agent: degrade(lambda agent=agent: self._construct(agent, question, context), None,
                                    f"{agent}_kc", f"the nexus went on without the {agent} agent")
                     for agent in self.agents}
        agents = tuple(agent for agent in self.agents if knowledge[agent] is not None)
        if not agents:  # every agent's knowledge was unreadable: the first agent's nexus, without knowledge
            agents = self.agents[:1]
            knowledge[agents[0]] = "(none)"
        knowledge = {agent: knowledge[agent] for agent in agents}
        seen = {"passages": context} if self.nexus_passages else {}
        nexus = {agent: getattr(self, f"{agent}_nexus")(question=question, initial_reasoning=reply,
                                                        knowledge=knowledge[agent], **seen)
                 for agent in agents}
        answers = {agent: result.answer for agent, result in nexus.items()}
        winner = pick_winner(agents, answers, self.select)
        stages = {"retrieval": {"passages": passages}, "initial_cot": {"answer": initial.answer},
                  "agents": {"agents": list(agents), "knowledge_chars": {a: len(str(knowledge[a])) for a in agents}},
                  "nexus": {"answers": [answers[agent] for agent in agents], "decision": winner}}
        return dspy.Prediction(answer=answers[winner], passages=passages, reasoning=nexus[winner].enhanced_reasoning,
                               stages=stages,
                               winner=winner, agent_answers=answers,
                               candidates=[answers[agent] for agent in agents],
                               agent_reasoning={agent: result.enhanced_reasoning for agent, result in nexus.items()},
                               knowledge=knowledge, initial_reasoning=initial.reasoning,
                               initial_answer=initial.answer)
