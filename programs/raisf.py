"""RA-ISF: Retrieval Augmented Iterative Self-Feedback.

Paper: Liu, Peng, Zhang, Liu, Yin, Cao, Du, "RA-ISF: Learning to Answer and Understand from Retrieval
Augmentation via Iterative Self-Feedback", arXiv:2403.06840 (ACL Findings 2024). This module is the paper's
Algorithm 1 ("Problem Iterative Solving", Eqs. 2-4) as a DSPy program. The paper fine-tunes three small
models for the gates (M_know, M_rel, M_decom); here they are DSPy predictors that optimizers compile, and
the answering LLM M is three more predictors (direct, from relevant passages, from sub-answers).

    solve(q, depth):
      depth > max_depth                     -> "unknown", no call          (Alg. 1 lines 2-4)
      SelfKnowledge(q) says yes             -> DirectAnswer(q)             (lines 5-7, Eq. 2)
      P = retrieve(q, k); P_rel = [p in P if PassageRelevance(q, p)]       (lines 8-12)
      P_rel not empty                       -> RelevantPassagesAnswer(q, P_rel)   (lines 13-15, Eq. 3)
      subs = Decompose(q); a_i = solve(sub_i, depth + 1)                   (lines 16-19)
      -> SynthesizeAnswer(q, [(sub_i, a_i)])                               (line 20, Eq. 4)

LM calls per (sub-)question: knows 2; relevant passage 2 + k (per-passage judge) or 3 (joint judge);
decomposition 3 + k plus the sub-questions' own calls. The paper's Table 4 averages 4-7 questions and
~3 retrievals per input question, i.e. roughly 20-30 calls at k = 5. `Prediction.n_lm_calls` counts the
predictor calls of one question (a parse retry by DSPy's JSON fallback is a second LM call inside one).

Choices where the paper is open (knobs in brackets):
- k = 5 [k]: the main runs do not state k; every worked example (App. G) and the k sweep centre use 5.
- Depth: root at depth 0, nodes at depths 0..max_depth are processed, D_th = 3 [max_depth]. A node past
  the limit answers "unknown" without any call (Alg. 1 lines 2-4, checked before self-knowledge).
- At the depth limit [at_depth_limit]: "decompose" (default) follows Alg. 1 literally: a node at
  depth == max_depth with no relevant passage still decomposes; its children are past the limit and answer
  "unknown" for free; synthesis then answers from those pairs. "unknown" returns "unknown" at once (the
  prose reading: a question decomposed D_th times is unanswerable); "passages" answers from all k
  retrieved passages unfiltered; "direct" answers without passages.
- Self-knowledge runs at every level (Alg. 1 line 5 is inside the recursive function; Table 13 shows it
  on sub-questions). It is a classifier; the answer is a separate call to the answering model (Alg. 1
  line 6: M_know decides, M answers), although some ChatGPT traces in Table 13 answer inline.
- Relevance is one binary call per passage, judged against the node's own (sub-)question (Alg. 1 and the
  App. A.2 training data) [relevance="per_passage"]. The App. G examples judge all passages at once as
  "relevant and sufficient" [relevance="joint": one call returning passage numbers].
- The answer from relevant passages sees only P_rel (Eq. 3; Alg. 1 line 14 says P, a typo the notes and
  the code confirm). That answer is returned as is, not checked again (the relevance gate is the paper's
  "checkpoint", §5.5). [decompose_if_unknown=True] is our option: if that answer is "unknown", go on to
  decomposition as if no passage were relevant. "Unknown" is ragzoo's one definition of an abstention
  (`ragzoo.metrics.rates.is_unknown`, the one %Unk counts): the word "unknown" or an empty answer; with
  [lenient_unknown=True] also refusal phrasings ("I don't know", "not provided", the official code's "unknow"
  spelling), which the `unknown_lenient` diagnostic counts. RA-ISF keeps no spelling list of its own.
- The retrieval query is the (sub-)question alone (the code prepends an undefined dataset "context").
- Sub-questions are solved independently, in order, each through the full procedure; a later one does not
  see earlier sub-answers (as in the paper). Synthesis sees the node's question and one
  "sub-question -> answer" item per sub-question, including "unknown" answers verbatim.
- Guards (not in the paper): sub-questions are normalised (lower case, punctuation and extra spaces
  dropped); empty ones, repeats within one decomposition and those equal to the node's question or any
  ancestor are skipped (recorded in the node's `skipped`); at most `max_subquestions` (5; the paper's
  examples have 3-4) are kept per decomposition, in the model's order. A sub-question already solved
  elsewhere in the same tree reuses that answer without calls (route "reused"). At most `max_questions`
  (30, ~5x the paper's Table 4 averages) nodes make calls per input question; beyond that a sub-question
  answers "unknown" (route "budget"). Recursion therefore always terminates: depth is bounded and every
  level consumes budget.
- Empty decomposition (nothing left after the guards) [on_empty_decomposition]: Alg. 1 would call
  M(q, {}, {}), which is the question alone, so the default "direct" answers it with DirectAnswer; "passages"
  answers from the k retrieved passages unfiltered; "unknown" gives up. ("passages" answers directly when
  the node retrieved nothing, i.e. with use_relevance=False; the same holds for at_depth_limit.)
- Ablations of Table 2: [use_self_knowledge=False] = No SKM (every node retrieves);
  [use_relevance=False] = No PRM (after self-knowledge says no, decompose without retrieving);
  [use_decomposition=False] = No QDM (no relevant passage -> "unknown").
- Answers are short (entity/date/number/yes-no) because ragzoo scores exact match; the paper's model wrote
  sentences and its "EM" is in effect answer containment.
- answer_mode="yes_no" (StrategyQA, Table 1): the root's final answer is read as yes/no after the fact
  ("Yes", "No.", "yes, because ..." -> "yes"/"no"; anything else is kept verbatim and scores 0), because
  the same answering predictors also answer the factoid sub-questions, which must not be forced to yes/no.
- Staged compilation of the gates (opt-in: [gate_stages=True]): the self-knowledge gate is compiled first on
  App. A.1's labels (the LM's own closed-book answer is right or not: one call per training question), the
  relevance gate on labels from data (the passage contains a gold answer; App. A.2 asks an LLM instead), each
  against its agreement metric; then the program end to end. Decomposition has no automatic label and is
  compiled end to end only. The manifest records each stage.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, each recorded as a degradation in the
  trace, so nothing is hidden): `self_knowledge` unreadable -> "cannot answer" (the node retrieves); a
  relevance judge (`relevance_judge` for one passage, `relevance_joint` for all) unreadable -> keep the
  passage(s) it judged; `decompose` unreadable -> answer from all retrieved passages (route
  "unreadable_decomposition:passages"; directly when nothing was retrieved). The answering calls
  (`direct_answer`, `passages_answer`, `synthesize`) have no fallback: their unreadable reply fails the
  question. Any other unparseable output raises (DSPy's AdapterParseError) and the example scores 0.

Instructions are our own words, each saying what the call must produce and why, from the method's
description (Alg. 1, App. A); the paper's prompts (App. G) are not in the repository. Our instruction <- what
the paper's call does:
- SelfKnowledge: a routing gate predicting whether the LM's closed-book answer would be correct, told where
  True and False send the question and that a wrong True costs more <- M_know asks whether the model can
  solve the problem from its own knowledge, yes/no (App. G), trained on closed-book correctness (App. A.1).
- PassageRelevance: does this one passage help settle the question <- M_rel, one passage: relevant or
  irrelevant (Alg. 1, App. A.2).
- PassagesRelevanceJoint: select the passages the answer will be written from, told that only they reach
  the answer and that none sends the question to decomposition <- App. G's judge of all five passages: are
  they relevant and sufficient; if so which ones, else "No".
- Decompose: simpler questions, told each is solved separately by the same procedure and their answers
  combined, so each names its entities in full <- M_decom: break the question into sub-questions and list
  them (App. A.3, G).
- DirectAnswer, RelevantPassagesAnswer, SynthesizeAnswer <- M's answer from the question alone (Eq. 2), from
  the relevant passages (Eq. 3), from the sub-question/answer pairs (Eq. 4).

The prediction carries `answer`, `passages` (every passage an answer in the tree was written from, in order
of use, deduplicated), `route` (how the root was answered), `tree` (nested dicts: question, depth, route,
answer, retrieved_ids, relevant_ids, children, skipped), `depth_reached`, `relevant_ids`, `n_questions`
(Table 4 "Sub": the question plus sub-questions that made calls), `n_retrievals` and `n_lm_calls`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import dspy

from ragzoo.knobs import Range
from ragzoo.metrics.rates import is_unknown
from ragzoo.programs import register
from ragzoo.programs.base import (PositiveInt, RagProgram, Stage, StageSkipped, TopK, dedup_passages, degrade,
                                  passages_as_context, read_yes_no)
from ragzoo.signatures.common import AnswerMode
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.raisf import (
    Decompose,
    DirectAnswer,
    PassageRelevance,
    PassagesRelevanceJoint,
    RelevantPassagesAnswer,
    SelfKnowledge,
    SynthesizeAnswer,
)

UNKNOWN = "unknown"

Fallback = Literal["direct", "passages", "unknown"]


def normalize_question(text: str) -> str:
    """Lower case, punctuation dropped, spaces collapsed: the key for duplicate sub-questions."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


@dataclass
class _SolveState:
    """Bookkeeping shared by all nodes of one input question's tree."""

    questions: int = 0
    retrievals: int = 0
    lm_calls: int = 0
    depth_reached: int = 0
    solved: dict[str, str] = field(default_factory=dict)
    used_passages: list[Passage] = field(default_factory=list)
    retrieved: list[Passage] = field(default_factory=list)  # every node's retrieval (stage diagnostics)
    relevant: list[Passage] = field(default_factory=list)  # what the relevance gate let through
    gate: list[bool] = field(default_factory=list)  # the self-knowledge gate's decision at each node asked


@register(
    "raisf",
    paper="RA-ISF (Liu et al., ACL Findings 2024, arXiv:2403.06840)",
    short="RA-ISF (Liu et al. 2024)",
    calls="2 .. ~30, recursive",
    summary="recursive self-knowledge -> per-passage relevance -> decomposition, depth limit 3; LM calls: 2 if "
            "the model knows, k+2 with a relevant passage, ~20-30 with decomposition (k=5)",
)
class RAISF(RagProgram):
    """RA-ISF: self-knowledge gate, per-passage relevance, recursive question decomposition.

    Knobs:
        k: passages retrieved per (sub-)question (the paper's worked examples use 5).
        max_depth: deepest level that is processed, the root being 0 (the paper's D_th = 3).
        max_subquestions: sub-questions kept per decomposition, in the model's order.
        max_questions: questions (root and sub-questions) that may make calls, per input question.
        relevance: "per_passage" judges each passage in its own call (Alg. 1); "joint" judges all passages
            in one call that returns their numbers (the App. G examples).
        at_depth_limit: what a node at max_depth with no relevant passage does: "decompose" (Alg. 1 as
            written; its children answer "unknown"), "unknown", "passages" (answer from all retrieved
            passages) or "direct" (answer without passages).
        on_empty_decomposition: what a node does when no usable sub-question is left: "direct", "passages"
            or "unknown".
        decompose_if_unknown: decompose also when the answer from relevant passages is "unknown" (ours).
        lenient_unknown: with decompose_if_unknown, refusal phrasings ("I don't know", "not provided") count
            as "unknown" too (as the `unknown_lenient` diagnostic counts them); off: only "unknown" or empty.
        use_self_knowledge: ask first whether the model knows the answer (false = Table 2's "No SKM").
        use_relevance: retrieve and judge passages (false = Table 2's "No PRM").
        use_decomposition: decompose questions no passage answers (false = Table 2's "No QDM").
        answer_mode: "short" answers; "yes_no" reads the final answer as yes or no (StrategyQA), leniently
            ("Yes", "No." count); sub-questions keep short answers.
        gate_stages: compile the self-knowledge and relevance gates on labels built from the training data
            before the end-to-end compile (App. A's training data; opt-in).
    """

    def __init__(
        self,
        retriever=None,
        k: TopK = 5,
        max_depth: Annotated[int, Range(0)] = 3,
        max_subquestions: PositiveInt = 5,
        max_questions: PositiveInt = 30,
        relevance: Literal["per_passage", "joint"] = "per_passage",
        at_depth_limit: Literal["decompose", "unknown", "passages", "direct"] = "decompose",
        on_empty_decomposition: Fallback = "direct",
        decompose_if_unknown: bool = False,
        lenient_unknown: bool = False,
        use_self_knowledge: bool = True,
        use_relevance: bool = True,
        use_decomposition: bool = True,
        answer_mode: AnswerMode = "short",
        gate_stages: bool = False,
    ):
        super().__init__(retriever)
        self.k = k
        self.max_depth = max_depth
        self.max_subquestions = max_subquestions
        self.max_questions = max_questions
        self.relevance = relevance
        self.at_depth_limit = at_depth_limit
        self.on_empty_decomposition = on_empty_decomposition
        self.decompose_if_unknown = decompose_if_unknown
        self.lenient_unknown = lenient_unknown
        self.use_self_knowledge = use_self_knowledge
        self.use_relevance = use_relevance
        self.use_decomposition = use_decomposition
        self.answer_mode = answer_mode
        self.gate_stages = gate_stages

        # M_know, M_rel, M_decom: the paper's three trained gates.
        self.self_knowledge = dspy.Predict(SelfKnowledge)
        self.relevance_judge = dspy.Predict(PassageRelevance)
        self.relevance_joint = dspy.Predict(PassagesRelevanceJoint)
        self.decompose = dspy.Predict(Decompose)
        # M: the answering model, in its three uses (Eqs. 2, 3, 4).
        self.direct_answer = dspy.Predict(DirectAnswer)
        self.passages_answer = dspy.Predict(RelevantPassagesAnswer)
        self.synthesize = dspy.Predict(SynthesizeAnswer)

    # Stage diagnostics (ragzoo.diagnostics): the three gates over the whole tree, then the answering calls.
    STAGES = {"self_knowledge": ("self_knowledge",), "relevance": ("relevance_judge", "relevance_joint"),
              "decomposition": ("decompose",), "answer": ("direct_answer", "passages_answer", "synthesize")}

    # ----------------------------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        state = _SolveState()
        root = self._solve(question, 0, (), state)
        relevant_ids = list(dict.fromkeys(pid for node in _walk(root) for pid in node["relevant_ids"]))
        answer = root["answer"]
        if self.answer_mode == "yes_no":  # the root's answer only: sub-questions are factoid
            answer = read_yes_no(answer) or answer
        return dspy.Prediction(
            answer=answer,
            passages=dedup_passages(state.used_passages),
            stages=self._stages(root, state),
            route=root["route"],
            tree=root,
            depth_reached=state.depth_reached,
            relevant_ids=relevant_ids,
            n_questions=state.questions,
            n_retrievals=state.retrievals,
            n_lm_calls=state.lm_calls,
        )

    # ----------------------------------------------------------------------------------------------
    # Staged compilation of the gates (opt-in, knob gate_stages).

    def compile_stages(self) -> list[Stage]:
        """With `gate_stages`: the self-knowledge gate on App. A.1 labels (does this LM answer the training
        question correctly without retrieval? one closed-book call per question, scored by exact match),
        then the relevance gate on labels from data (does the passage contain a gold answer?). The
        decomposition gate has no automatic label: it stays with the end-to-end compile."""
        if not self.gate_stages:
            return []
        stages = []
        if self.use_self_knowledge:
            stages.append(Stage(name="self_knowledge", predictors=("self_knowledge",),
                                build_trainset=self.self_knowledge_trainset, metric=self_knowledge_agreement,
                                labels="can_answer = the LM's closed-book answer matches a gold answer (App. A.1)"))
        if self.use_relevance:
            joint = self.relevance == "joint"
            stages.append(Stage(name="relevance", predictors=("relevance_joint" if joint else "relevance_judge",),
                                build_trainset=self.relevance_trainset,
                                metric=joint_relevance_agreement if joint else relevance_agreement,
                                labels=f"relevant = the passage contains a gold answer (top-{self.k} per question)"))
        return stages

    def _stages(self, root: dict, state: _SolveState) -> dict:
        """Each gate's decisions over the tree. The root's self-knowledge "decision" carries its closed-book
        "answer" when it said yes, so the report can score the gate (App. A.1's label: was that answer right)."""
        stages: dict = {}
        if self.use_self_knowledge and state.gate:
            stages["self_knowledge"] = {"decision": state.gate[0], "yes": sum(state.gate), "asked": len(state.gate),
                                        **({"answer": root["answer"]} if root["route"] == "self_knowledge" else {})}
        if self.use_relevance:
            stages["relevance"] = {"passages": dedup_passages(state.retrieved), "kept": dedup_passages(state.relevant)}
        if self.use_decomposition:
            stages["decomposition"] = {"sub_questions": [child["question"] for node in _walk(root)
                                                         for child in node["children"]],
                                       "depth": state.depth_reached}
        stages["answer"] = {"route": root["route"]}
        return stages

    def self_knowledge_trainset(self, examples) -> list[dspy.Example]:
        """One labelled example per training question: `can_answer` is whether `direct_answer` (the LM,
        without retrieval) gets a gold answer exactly right. Makes one LM call per question."""
        from ragzoo.metrics.answer import exact_match
        from ragzoo.metrics.fields import gold_answers

        labelled = []
        for example in examples:
            answer = self.direct_answer(question=example["question"]).answer
            labelled.append(dspy.Example(question=example["question"],
                                         can_answer=bool(exact_match(answer, gold_answers(example))))
                            .with_inputs("question"))
        return labelled

    def relevance_trainset(self, examples) -> list[dspy.Example]:
        """Labelled relevance examples from the top-k passages of each training question: per passage
        (`relevant`), or per question with the 1-based numbers of the relevant passages (joint judge)."""
        from ragzoo.metrics.fields import gold_answers
        from ragzoo.programs.filco_oracle import string_inclusion

        # a passage "holding" yes or no says nothing of its relevance (StrategyQA: 1 of 40 labelled relevant, by the
        # word "no" in "makes no express contractual"), nor can a question without an answer label one: left out
        given = list(examples)
        examples = [example for example in given
                    if {re.sub(r"[^a-z0-9]", "", str(answer).lower()) for answer in gold_answers(example)}
                    - {"yes", "no", "true", "false", ""}]
        if given and not examples:
            raise StageSkipped("every training question is answered yes or no (or not at all), so no passage can be "
                               "labelled relevant by holding its answer; the relevance judge gets no staged demos")
        labelled = []
        for example in examples:
            question, answers = example["question"], gold_answers(example)
            passages = self.retrieve(question, self.k)
            flags = [string_inclusion(passage.long_text, answers) for passage in passages]
            if self.relevance == "joint":
                labelled.append(dspy.Example(question=question, passages=_numbered(passages),
                                             relevant_ids=[i for i, flag in enumerate(flags, 1) if flag])
                                .with_inputs("question", "passages"))
                continue
            labelled.extend(dspy.Example(question=question, passage=passage.long_text, relevant=flag)
                            .with_inputs("question", "passage") for passage, flag in zip(passages, flags))
        return labelled

    # ----------------------------------------------------------------------------------------------
    def _call(self, predictor: dspy.Predict, state: _SolveState, **inputs) -> dspy.Prediction:
        state.lm_calls += 1
        return predictor(**inputs)

    def _solve(self, question: str, depth: int, ancestors: tuple[str, ...], state: _SolveState) -> dict:
        node: dict[str, Any] = {"question": question, "depth": depth, "route": None, "answer": None,
                                "retrieved_ids": [], "relevant_ids": [], "children": [], "skipped": []}
        if depth > self.max_depth:  # Alg. 1 lines 2-4: checked before any call
            return _finish(node, "past_depth_limit", UNKNOWN)
        if state.questions >= self.max_questions:
            return _finish(node, "budget", UNKNOWN)
        state.questions += 1
        state.depth_reached = max(state.depth_reached, depth)

        if self.use_self_knowledge:
            state.gate.append(bool(degrade(
                lambda: self._call(self.self_knowledge, state, question=question).can_answer, False,
                "self_knowledge", "treated as cannot answer: retrieve")))
        if self.use_self_knowledge and state.gate[-1]:
            answer = self._call(self.direct_answer, state, question=question).answer
            return self._solved(node, "self_knowledge", answer, state)

        retrieved: list[Passage] = []
        if self.use_relevance:
            retrieved = self.retrieve(question, self.k)
            state.retrievals += 1
            relevant = self._judge(question, retrieved, state)
            state.retrieved.extend(retrieved)
            state.relevant.extend(relevant)
            node["retrieved_ids"] = [p.pid for p in retrieved]
            node["relevant_ids"] = [p.pid for p in relevant]
            if relevant:
                answer = self._call(self.passages_answer, state, question=question,
                                    passages=passages_as_context(relevant)).answer
                state.used_passages.extend(relevant)
                if not (self.decompose_if_unknown and is_unknown(answer, refusals=self.lenient_unknown)):
                    return self._solved(node, "relevant_passages", answer, state)
                node["unknown_from_passages"] = answer

        if not self.use_decomposition:  # Table 2 "No QDM"
            return self._solved(node, "no_decomposition", UNKNOWN, state)
        if depth >= self.max_depth and self.at_depth_limit != "decompose":
            return self._fallback(node, "depth_limit", self.at_depth_limit, retrieved, state)

        proposed = degrade(lambda: self._call(self.decompose, state, question=question).sub_questions, None,
                           "decompose", "answered from all retrieved passages")
        if proposed is None:
            return self._fallback(node, "unreadable_decomposition", "passages", retrieved, state)
        lineage = (*ancestors, question)
        sub_questions = self._usable_subquestions(proposed, lineage, node)
        if not sub_questions:
            return self._fallback(node, "empty_decomposition", self.on_empty_decomposition, retrieved, state)

        for sub_question in sub_questions:
            key = normalize_question(sub_question)
            if key in state.solved:
                child = _finish({"question": sub_question, "depth": depth + 1, "route": None, "answer": None,
                                 "retrieved_ids": [], "relevant_ids": [], "children": [], "skipped": []},
                                "reused", state.solved[key])
            else:
                child = self._solve(sub_question, depth + 1, lineage, state)
            node["children"].append(child)
        pairs = [f"{child['question']} -> {child['answer']}" for child in node["children"]]
        answer = self._call(self.synthesize, state, question=question, sub_answers=pairs).answer
        return self._solved(node, "decomposition", answer, state)

    def _judge(self, question: str, passages: list[Passage], state: _SolveState) -> list[Passage]:
        """P_rel: the retrieved passages judged relevant to this node's question, in retrieval order."""
        if not passages:
            return []
        if self.relevance == "joint":
            numbered = _numbered(passages)
            ids = degrade(lambda: self._call(self.relevance_joint, state, question=question,
                                             passages=numbered).relevant_ids,
                          list(range(1, len(passages) + 1)), "relevance_joint",
                          f"kept all {len(passages)} passages")
            chosen = {i for i in ids if 1 <= i <= len(passages)}
            return [p for i, p in enumerate(passages, start=1) if i in chosen]
        return [p for p in passages
                if degrade(lambda p=p: self._call(self.relevance_judge, state, question=question,
                                                  passage=p.long_text).relevant,
                           True, "relevance_judge", f"kept passage {p.pid}")]

    def _usable_subquestions(self, proposed: list[str], lineage: tuple[str, ...], node: dict) -> list[str]:
        """Drop empty sub-questions, repeats and any equal to the question or an ancestor; cap the rest."""
        blocked = {normalize_question(q) for q in lineage}
        kept: list[str] = []
        for sub_question in proposed:
            text = sub_question.strip()
            key = normalize_question(text)
            if not key or key in blocked:
                node["skipped"].append(text)
                continue
            blocked.add(key)
            kept.append(text)
        node["skipped"].extend(kept[self.max_subquestions:])
        return kept[: self.max_subquestions]

    def _fallback(self, node: dict, route: str, mode: str, retrieved: list[Passage], state: _SolveState) -> dict:
        """Answer a node that cannot (or may not) be decomposed further."""
        if mode == "passages" and retrieved:
            answer = self._call(self.passages_answer, state, question=node["question"],
                                passages=passages_as_context(retrieved)).answer
            state.used_passages.extend(retrieved)
            return self._solved(node, f"{route}:passages", answer, state)
        if mode in ("passages", "direct"):  # "passages" with nothing retrieved (No PRM) answers directly
            answer = self._call(self.direct_answer, state, question=node["question"]).answer
            return self._solved(node, f"{route}:direct", answer, state)
        return self._solved(node, f"{route}:unknown", UNKNOWN, state)

    @staticmethod
    def _solved(node: dict, route: str, answer: str, state: _SolveState) -> dict:
        state.solved.setdefault(normalize_question(node["question"]), answer)
        return _finish(node, route, answer)


def self_knowledge_agreement(example, pred, trace=None) -> float | bool:
    """The self-knowledge gate agrees with its label (App. A.1: the LM answered correctly without retrieval)."""
    return float(bool(pred.can_answer) == bool(example.can_answer))


def relevance_agreement(example, pred, trace=None) -> float | bool:
    """The per-passage relevance gate agrees with its label (the passage contains a gold answer)."""
    return float(bool(pred.relevant) == bool(example.relevant))


def joint_relevance_agreement(example, pred, trace=None) -> float | bool:
    """The joint relevance gate names exactly the passages that contain a gold answer (1-based numbers)."""
    return float(set(pred.relevant_ids or []) == set(example.relevant_ids or []))


def _numbered(passages: list[Passage]) -> list[str]:
    """How the joint relevance judge sees the passages: "[i] Title | text", numbered from 1."""
    return [f"[{i}] {text}" for i, text in enumerate(passages_as_context(passages), start=1)]


def _finish(node: dict, route: str, answer: str) -> dict:
    node["route"] = route
    node["answer"] = answer
    return node


def _walk(node: dict):
    yield node
    for child in node["children"]:
        yield from _walk(child)
