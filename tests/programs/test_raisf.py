"""RA-ISF (programs/raisf.py): every branch of Algorithm 1 driven by a scripted LM, offline."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.raisf import RAISF, normalize_question
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

K = 5
JUDGES = ["relevance_judge"] * K
ROOT = "Who is the mother of the director of Polish-Russian War?"


class World:
    """A scripted LM as a small world of facts: which questions the model knows, which questions the
    retrieved passages are relevant to (optionally only some passage ids), and how questions decompose."""

    def __init__(self, known=(), grounded=None, decompositions=None, joint=None):
        self.known = set(known)
        self.grounded = dict(grounded or {})  # question -> set of relevant pids (None = all)
        self.decompositions = dict(decompositions or {})
        self.joint = joint

    def _relevant(self, context):
        question, passage = context.inputs["question"], context.inputs["passage"]
        if question not in self.grounded:
            return {"relevant": False}
        pids = self.grounded[question]
        return {"relevant": pids is None or any(passage.startswith(f"Doc {pid} |") for pid in pids)}

    def lm(self, **overrides) -> ScriptedLM:
        script = {
            "self_knowledge": lambda c: {"can_answer": c.inputs["question"] in self.known},
            "direct_answer": lambda c: {"answer": f"direct:{c.inputs['question']}"},
            "relevance_judge": self._relevant,
            "relevance_joint": lambda c: {"relevant_ids": self.joint},
            "passages_answer": lambda c: {"answer": f"rag:{c.inputs['question']}"},
            "decompose": lambda c: {"sub_questions": self.decompositions.get(c.inputs["question"], [])},
            "synthesize": lambda c: {"answer": f"synth:{c.inputs['question']}"},
        }
        script.update(overrides)
        return ScriptedLM(script)


@pytest.fixture
def retriever():
    return StaticRetriever(make_passages(10))


def run(program, lm, question=ROOT):
    with dspy.context(lm=lm):
        return program(question=question)


def per_node(*, decompose=True):
    """Calls of a node that does not know the answer and finds no relevant passage."""
    return ["self_knowledge", *JUDGES] + (["decompose"] if decompose else [])


# --------------------------------------------------------------------------------------------------- routes
def test_self_knowledge_yes_answers_directly_without_retrieval(retriever):
    lm = World(known={ROOT}).lm()
    pred = run(RAISF(retriever), lm)
    assert lm.call_names == ["self_knowledge", "direct_answer"]
    assert retriever.queries == []
    assert lm.calls_to("direct_answer")[0].inputs == {"question": ROOT}
    assert (pred.answer, pred.route, pred.passages) == (f"direct:{ROOT}", "self_knowledge", [])
    assert (pred.n_lm_calls, pred.n_retrievals, pred.n_questions, pred.depth_reached) == (2, 0, 1, 0)


def test_relevant_passages_answer_sees_only_the_relevant_ones(retriever):
    lm = World(grounded={ROOT: {"1", "3"}}).lm()
    pred = run(RAISF(retriever), lm)
    assert lm.call_names == ["self_knowledge", *JUDGES, "passages_answer"]
    assert retriever.queries == [(ROOT, K)]
    retrieved = [p.long_text for p in retriever(ROOT, K)]
    # one judge call per passage, in retrieval order, each seeing the question and that passage only
    judged = [call.inputs for call in lm.calls_to("relevance_judge")]
    assert judged == [{"question": ROOT, "passage": text} for text in retrieved]
    answer_inputs = lm.calls_to("passages_answer")[0].inputs
    assert json.loads(answer_inputs["passages"]) == ["Doc 1 | text of doc 1", "Doc 3 | text of doc 3"]
    assert pred.answer == f"rag:{ROOT}" and pred.route == "relevant_passages"
    assert [p.pid for p in pred.passages] == ["1", "3"] and pred.relevant_ids == ["1", "3"]
    assert pred.tree["retrieved_ids"] == ["0", "1", "2", "3", "4"]
    assert (pred.n_lm_calls, pred.n_retrievals) == (K + 2, 1)


def test_no_relevant_passage_decomposes_solves_each_and_synthesizes(retriever):
    world = World(known={"Who directed it?"}, grounded={"Who is his mother?": {"2"}},
                  decompositions={ROOT: ["Who directed it?", "Who is his mother?"]})
    lm = world.lm()
    pred = run(RAISF(retriever), lm)
    assert lm.call_names == [
        *per_node(),                                                    # root: unknown, nothing relevant
        "self_knowledge", "direct_answer",                              # sub 1: known
        "self_knowledge", *JUDGES, "passages_answer",                   # sub 2: relevant passage
        "synthesize",
    ]
    assert [q for q, _ in retriever.queries] == [ROOT, "Who is his mother?"]
    assert lm.calls_to("decompose")[0].inputs == {"question": ROOT}
    synth = lm.calls_to("synthesize")[0].inputs
    assert synth["question"] == ROOT
    assert json.loads(synth["sub_answers"]) == ["Who directed it? -> direct:Who directed it?",
                                                "Who is his mother? -> rag:Who is his mother?"]
    assert pred.answer == f"synth:{ROOT}" and pred.route == "decomposition"
    assert [child["route"] for child in pred.tree["children"]] == ["self_knowledge", "relevant_passages"]
    assert [p.pid for p in pred.passages] == ["2"] and pred.relevant_ids == ["2"]
    assert (pred.n_questions, pred.n_retrievals, pred.depth_reached, pred.n_lm_calls) == (3, 2, 1, 17)


def chain(n):
    """q0 -> [q1] -> [q2] -> ...: each question decomposes into the next."""
    questions = [f"chain question {i}?" for i in range(n + 1)]
    return questions, {questions[i]: [questions[i + 1]] for i in range(n)}


@pytest.mark.parametrize("answer_depth", [0, 1, 2, 3])
def test_recursion_stops_at_the_depth_where_a_passage_is_relevant(retriever, answer_depth):
    questions, decompositions = chain(5)
    lm = World(grounded={questions[answer_depth]: None}, decompositions=decompositions).lm()
    pred = run(RAISF(retriever), lm, questions[0])
    expected = per_node() * answer_depth + ["self_knowledge", *JUDGES, "passages_answer"] \
        + ["synthesize"] * answer_depth
    assert lm.call_names == expected
    assert [q for q, _ in retriever.queries] == questions[: answer_depth + 1]
    assert pred.depth_reached == answer_depth and pred.n_retrievals == answer_depth + 1
    # each synthesis sees exactly its child's pair, bottom-up
    synth_questions = [call.inputs["question"] for call in lm.calls_to("synthesize")]
    assert synth_questions == list(reversed(questions[:answer_depth]))
    node = pred.tree
    for _ in range(answer_depth):
        node = node["children"][0]
    assert node["route"] == "relevant_passages" and node["depth"] == answer_depth


@pytest.mark.parametrize("max_depth", [0, 1, 2, 3])
def test_depth_limit_children_past_it_answer_unknown_without_calls(retriever, max_depth):
    questions, decompositions = chain(6)
    lm = World(decompositions=decompositions).lm()
    pred = run(RAISF(retriever, max_depth=max_depth), lm, questions[0])
    # Alg. 1 literally: nodes at depths 0..max_depth decompose; the child at max_depth+1 is "unknown"
    assert lm.call_names == per_node() * (max_depth + 1) + ["synthesize"] * (max_depth + 1)
    assert len(retriever.queries) == max_depth + 1 == pred.n_retrievals
    assert pred.depth_reached == max_depth
    deepest = lm.calls_to("synthesize")[0].inputs
    assert deepest["question"] == questions[max_depth]
    assert json.loads(deepest["sub_answers"]) == [f"{questions[max_depth + 1]} -> unknown"]
    node = pred.tree
    for _ in range(max_depth + 1):
        node = node["children"][0]
    assert (node["route"], node["answer"], node["depth"]) == ("past_depth_limit", "unknown", max_depth + 1)


@pytest.mark.parametrize("mode, last_calls, route, answer", [
    ("unknown", [], "depth_limit:unknown", "unknown"),
    ("direct", ["direct_answer"], "depth_limit:direct", "direct:chain question 1?"),
    ("passages", ["passages_answer"], "depth_limit:passages", "rag:chain question 1?"),
])
def test_at_depth_limit_alternatives(retriever, mode, last_calls, route, answer):
    questions, decompositions = chain(4)
    lm = World(decompositions=decompositions).lm()
    pred = run(RAISF(retriever, max_depth=1, at_depth_limit=mode), lm, questions[0])
    assert lm.call_names == per_node() + per_node(decompose=False) + last_calls + ["synthesize"]
    limit_node = pred.tree["children"][0]
    assert (limit_node["route"], limit_node["answer"]) == (route, answer)
    if mode == "passages":  # unfiltered: all k retrieved passages
        assert len(json.loads(lm.calls_to("passages_answer")[0].inputs["passages"])) == K


# ------------------------------------------------------------------------------------- guards and edge cases
@pytest.mark.parametrize("mode, last_calls, answer", [
    ("direct", ["direct_answer"], f"direct:{ROOT}"),
    ("passages", ["passages_answer"], f"rag:{ROOT}"),
    ("unknown", [], "unknown"),
])
def test_empty_decomposition(retriever, mode, last_calls, answer):
    lm = World(decompositions={ROOT: []}).lm()
    pred = run(RAISF(retriever, on_empty_decomposition=mode), lm)
    assert lm.call_names == per_node() + last_calls
    assert pred.answer == answer and pred.route == f"empty_decomposition:{mode}"
    assert "synthesize" not in lm.call_names


def test_duplicate_and_ancestor_subquestions_are_skipped(retriever):
    world = World(known={"Who directed it?", "Who is his mother?"},
                  decompositions={ROOT: ["Who directed it?", "  who directed IT ", ROOT.upper(), "",
                                         "Who is his mother?", "Who directed it"]})
    lm = world.lm()
    pred = run(RAISF(retriever), lm)
    assert lm.call_names == per_node() + ["self_knowledge", "direct_answer"] * 2 + ["synthesize"]
    assert [child["question"] for child in pred.tree["children"]] == ["Who directed it?", "Who is his mother?"]
    assert pred.tree["skipped"] == ["who directed IT", ROOT.upper(), "", "Who directed it"]
    assert len(json.loads(lm.calls_to("synthesize")[0].inputs["sub_answers"])) == 2


def test_subquestion_equal_to_a_grandparent_is_skipped(retriever):
    lm = World(known={"b?"}, decompositions={ROOT: ["a?"], "a?": [ROOT, "b?"]}).lm()
    pred = run(RAISF(retriever), lm)
    node_a = pred.tree["children"][0]
    assert node_a["skipped"] == [ROOT] and [c["question"] for c in node_a["children"]] == ["b?"]
    assert lm.calls_to("self_knowledge")[0].inputs["question"] == ROOT
    assert [c.inputs["question"] for c in lm.calls_to("self_knowledge")] == [ROOT, "a?", "b?"]


def test_subquestion_solved_elsewhere_in_the_tree_is_reused(retriever):
    lm = World(known={"c?"}, decompositions={ROOT: ["a?", "b?"], "a?": ["c?"], "b?": ["c?"]}).lm()
    pred = run(RAISF(retriever), lm)
    assert [c.inputs["question"] for c in lm.calls_to("self_knowledge")] == [ROOT, "a?", "c?", "b?"]
    reused = pred.tree["children"][1]["children"][0]
    assert (reused["route"], reused["answer"]) == ("reused", "direct:c?")
    assert json.loads(lm.calls_to("synthesize")[1].inputs["sub_answers"]) == ["c? -> direct:c?"]


def test_max_subquestions_caps_each_decomposition(retriever):
    subs = [f"sub {i}?" for i in range(7)]
    lm = World(known=set(subs), decompositions={ROOT: subs}).lm()
    pred = run(RAISF(retriever, max_subquestions=3), lm)
    assert [c["question"] for c in pred.tree["children"]] == subs[:3]
    assert pred.tree["skipped"] == subs[3:]
    assert lm.call_names.count("direct_answer") == 3


def test_max_questions_budget_answers_unknown_beyond_it(retriever):
    subs = [f"sub {i}?" for i in range(4)]
    lm = World(known=set(subs), decompositions={ROOT: subs}).lm()
    pred = run(RAISF(retriever, max_questions=3), lm)
    assert [c["route"] for c in pred.tree["children"]] == ["self_knowledge", "self_knowledge", "budget", "budget"]
    assert pred.n_questions == 3 and lm.call_names.count("self_knowledge") == 3


def test_terminates_when_every_gate_says_no_and_decomposition_never_ends(retriever):
    counter = iter(range(10_000))
    fresh = {"decompose": lambda c: {"sub_questions": [f"new {next(counter)}?", f"new {next(counter)}?"]}}
    lm = World().lm(**fresh)
    pred = run(RAISF(retriever), lm)
    assert pred.n_questions == 15  # binary tree over depths 0..3
    assert pred.depth_reached == 3 and len(lm.calls) == pred.n_lm_calls == 15 * (K + 3)
    lm = World().lm(decompose={"sub_questions": ["same?", "same?"]})  # a model that repeats itself
    pred = run(RAISF(retriever), lm)
    assert pred.n_questions == 2 and pred.tree["children"][0]["route"] == "empty_decomposition:direct"


def test_joint_relevance_is_one_call_over_numbered_passages(retriever):
    lm = World(joint=[4, 2, 9, 2]).lm()
    pred = run(RAISF(retriever, relevance="joint"), lm)
    assert lm.call_names == ["self_knowledge", "relevance_joint", "passages_answer"]
    shown = json.loads(lm.calls_to("relevance_joint")[0].inputs["passages"])
    assert shown[0] == "[1] Doc 0 | text of doc 0" and len(shown) == K
    assert [p.pid for p in pred.passages] == ["1", "3"]  # out-of-range 9 ignored, retrieval order kept


def test_answer_from_passages_is_not_rechecked_unless_asked(retriever):
    world = World(grounded={ROOT: None}, known={"a?"}, decompositions={ROOT: ["a?"]})
    unknown = {"passages_answer": {"answer": "Unknown."}}
    lm = world.lm(**unknown)
    assert run(RAISF(retriever), lm).answer == "Unknown."
    lm = world.lm(**unknown)
    pred = run(RAISF(retriever, decompose_if_unknown=True), lm)
    assert lm.call_names == ["self_knowledge", *JUDGES, "passages_answer", "decompose",
                             "self_knowledge", "direct_answer", "synthesize"]
    assert pred.answer == f"synth:{ROOT}" and pred.tree["unknown_from_passages"] == "Unknown."


@pytest.mark.parametrize("knobs, calls, retrievals", [
    ({"use_self_knowledge": False}, [*JUDGES, "decompose", *JUDGES, "passages_answer", "synthesize"], 2),
    ({"use_relevance": False}, ["self_knowledge", "decompose", "self_knowledge", "decompose",
                                "direct_answer", "synthesize"], 0),
    ({"use_decomposition": False}, ["self_knowledge", *JUDGES], 1),
])
def test_table2_ablations(retriever, knobs, calls, retrievals):
    lm = World(grounded={"a?": None}, decompositions={ROOT: ["a?"]}).lm()
    pred = run(RAISF(retriever, **knobs), lm)
    assert lm.call_names == calls and len(retriever.queries) == retrievals
    if knobs == {"use_decomposition": False}:
        assert (pred.answer, pred.route) == ("unknown", "no_decomposition")


def test_unparseable_output_raises(retriever):
    lm = World().lm(self_knowledge="no fields here at all")
    with pytest.raises(dspy.utils.exceptions.AdapterParseError):
        run(RAISF(retriever), lm)


# ------------------------------------------------------------------------------- program surface and state
def test_named_predictors_cover_every_call_site(retriever):
    names = [name for name, _ in RAISF(retriever).named_predictors()]
    assert names == ["self_knowledge", "relevance_judge", "relevance_joint", "decompose",
                     "direct_answer", "passages_answer", "synthesize"]


def test_save_load_json_round_trip(retriever, tmp_path):
    program = RAISF(retriever)
    program.self_knowledge.demos = [dspy.Example(question="Capital of France?", can_answer=True)]
    program.decompose.demos = [dspy.Example(question="q", sub_questions=["a?", "b?"])]
    program.synthesize.signature = program.synthesize.signature.with_instructions("Combine them.")
    path = tmp_path / "raisf.json"
    program.save(str(path))
    loaded = RAISF(retriever)
    loaded.load(str(path))
    assert loaded.dump_state() == program.dump_state()
    world = World(known={"a?"}, decompositions={ROOT: ["a?"]})
    first, second = world.lm(), world.lm()
    assert run(program, first).tree == run(loaded, second).tree
    assert first.call_names == second.call_names
    assert [c.demos for c in first.calls] == [c.demos for c in second.calls]
    assert "Combine them." in second.calls_to("synthesize")[0].system


def test_registry_entry_and_knob_validation(retriever):
    info = programs.info("raisf")
    assert info.cls is RAISF and info.knobs["k"] == 5 and info.knobs["max_depth"] == 3
    program = programs.get("raisf", retriever=retriever, max_depth="2", relevance="joint")
    assert (program.max_depth, program.relevance) == (2, "joint")
    for bad in ({"max_depth": -1}, {"k": 0}, {"max_subquestions": 0}, {"relevance": "sometimes"}):
        with pytest.raises(ConfigError):
            programs.get("raisf", retriever=retriever, **bad)


def test_normalize_question():
    assert normalize_question("  Who  directed IT?! ") == normalize_question("who directed it") == "who directed it"


def test_dry_run_lm_takes_the_central_path(retriever):
    """The real dry-run LM follows the signatures' `dry_run` hints: the model does not know, the passages
    are relevant -> 1 + k + 1 calls and 1 retrieval."""
    from ragzoo.lm import make_lm

    pred = run(RAISF(retriever), lm := make_lm("dry-run"))
    assert pred.route == "relevant_passages" and pred.n_lm_calls == K + 2 == len(lm.history)
    assert len(retriever.queries) == 1


def test_any_placeholders_terminate_even_when_every_bool_is_false(retriever):
    """A stand-in for a dry-run LM whose bool placeholders are all False: decomposition with the hinted
    sub-questions, recursion bounded by the guards."""

    def respond(context):
        values = {}
        for name, info in context.signature.output_fields.items():
            hint = (info.json_schema_extra or {}).get("dry_run", "placeholder")
            values[name] = False if info.annotation is bool else hint
        return values

    lm = ScriptedLM(default=respond)
    pred = run(RAISF(retriever), lm)
    assert pred.route == "decomposition" and pred.n_questions <= 30 and pred.depth_reached <= 3
    assert len(lm.calls) == pred.n_lm_calls
    # issue 12: the bounds above are what the guards guarantee; the exact path is what the program decided.
    # Root -> [sub 1, sub 2]; sub 1 -> [sub 1 (itself: skipped), sub 2] -> sub 2 at depth 2 decomposes into
    # two questions already on its path: empty decomposition, answered directly; the root's sub 2 reuses it.
    assert (pred.n_questions, pred.depth_reached, pred.n_retrievals) == (3, 2, 3)
    first, second = pred.tree["children"]
    assert (first["route"], first["skipped"], [c["route"] for c in first["children"]]) == (
        "decomposition", ["dry-run sub-question 1"], ["empty_decomposition:direct"])
    assert second["route"] == "reused" and len(lm.calls) == 24


# --- issue 12 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [("Yes", "yes"), ("No.", "no"), ("yes, because it is", "yes"),
                                          ("Warsaw", "Warsaw")])
def test_yes_no_mode_reads_the_root_answer_leniently_and_leaves_sub_answers_alone(retriever, raw, expected):
    world = World(known={"a?"}, decompositions={ROOT: ["a?"]})
    lm = world.lm(synthesize={"answer": raw}, direct_answer={"answer": "Krakow"})
    pred = run(RAISF(retriever, answer_mode="yes_no"), lm)
    assert pred.answer == expected and pred.tree["children"][0]["answer"] == "Krakow"
    assert run(RAISF(retriever), world.lm(synthesize={"answer": raw})).answer == raw  # short mode: verbatim


def test_gate_stages_are_opt_in_and_label_from_data(retriever):
    from ragzoo.programs.raisf import relevance_agreement, self_knowledge_agreement

    assert RAISF(retriever).compile_stages() == []
    stages = RAISF(retriever, k=2, gate_stages=True).compile_stages()
    assert [(s.name, s.predictors, s.metric) for s in stages] == [
        ("self_knowledge", ("self_knowledge",), self_knowledge_agreement),
        ("relevance", ("relevance_judge",), relevance_agreement)]
    assert [s.predictors for s in RAISF(retriever, gate_stages=True, relevance="joint").compile_stages()] == [
        ("self_knowledge",), ("relevance_joint",)]
    assert [s.name for s in RAISF(retriever, gate_stages=True, use_self_knowledge=False).compile_stages()] == [
        "relevance"]
    examples = [dspy.Example(question="q1?", answers=["doc 1"]).with_inputs("question"),
                dspy.Example(question="q2?", answers=["Paris"]).with_inputs("question")]
    # the closed-book answer is right for q2 only: App. A.1's label
    lm = ScriptedLM({"DirectAnswer": lambda c: {"answer": "Paris" if c.inputs["question"] == "q2?" else "x"}})
    with dspy.context(lm=lm):
        know = stages[0].build_trainset(examples)
    assert [(e.question, e.can_answer) for e in know] == [("q1?", False), ("q2?", True)]
    assert len(lm.calls) == 2
    relevance = stages[1].build_trainset(examples)  # top-2: docs 0 and 1; "doc 1" is in doc 1 only
    assert [(e.question, e.passage.split(" |")[0], e.relevant) for e in relevance] == [
        ("q1?", "Doc 0", False), ("q1?", "Doc 1", True), ("q2?", "Doc 0", False), ("q2?", "Doc 1", False)]


def test_the_relevance_stage_is_skipped_when_every_answer_is_yes_or_no(retriever):
    """Review: on StrategyQA a passage "held" the gold answer when it had the word "no" in it (1 of 40 labelled
    relevant, for that reason only): such labels teach nothing about relevance."""
    from ragzoo.programs.base import StageSkipped

    (stage,) = RAISF(retriever, k=2, gate_stages=True, use_self_knowledge=False).compile_stages()
    yes_no = [dspy.Example(question="Is q1?", answers=["yes"]).with_inputs("question"),
              dspy.Example(question="Is q2?", answers=["No"]).with_inputs("question")]
    with pytest.raises(StageSkipped, match="yes or no"):
        stage.build_trainset(yes_no)
    punctuated = [dspy.Example(question="Is q4?", answers=["No."]).with_inputs("question"),
                  dspy.Example(question="Is q5?", answers=["True"]).with_inputs("question"),
                  dspy.Example(question="q6?", answers=[]).with_inputs("question")]
    with pytest.raises(StageSkipped, match="yes or no"):
        stage.build_trainset(punctuated)
    mixed = [*yes_no, *punctuated, dspy.Example(question="q3?", answers=["doc 1"]).with_inputs("question")]
    labelled = stage.build_trainset(mixed)  # the yes/no and unanswered questions left out, one at a time
    assert {example.question for example in labelled} == {"q3?"} and len(labelled) == 2


def test_gate_stages_run_through_the_optimizer_before_the_end_to_end_compile(retriever):
    from ragzoo.optimizers import compile_program

    examples = [dspy.Example(question="q1?", answers=["doc 1"]).with_inputs("question")]
    lm = World(grounded={"q1?": None}).lm(
        DirectAnswer={"answer": "x"}, passages_answer={"answer": "doc 1"})
    with dspy.context(lm=lm):
        result = compile_program(RAISF(retriever, k=2, gate_stages=True), trainset=examples,
                                 optimizer="labeled", metric="em")
    assert [stage.stage for stage in result.stages] == ["stage:self_knowledge", "stage:relevance", "compile"]
    assert [record["examples"] for record in result.staged] == [1, 2]
    assert [demo["can_answer"] for demo in result.program.self_knowledge.demos] == [False]
    assert sorted(demo["relevant"] for demo in result.program.relevance_judge.demos) == [False, True]


# --- issue 22 item 9: one definition of an abstention --------------------------------------------------

ANSWER_SHAPES = ["unknown", "Unknown.", "UNKNOWN!", "", "Unknow", "unknow.", "I don't know", "I do not know",
                 "The passages do not mention it.", "not provided", "Paris", "unknown soldier", "A"]


@pytest.mark.parametrize("lenient", [False, True])
@pytest.mark.parametrize("answer", ANSWER_SHAPES)
def test_decompose_if_unknown_acts_exactly_on_what_unk_counts(retriever, answer, lenient):
    """RA-ISF goes on to decomposition after an answer from passages iff the %Unk diagnostic of the same
    reading (`unknown`, or `unknown_lenient` with lenient_unknown) counts that answer as an abstention: no
    spelling of its own (the official code's "unknow" and "I don't know" are refusals, counted leniently)."""
    from ragzoo.metrics import get_metric

    world = World(grounded={ROOT: None}, known={"a?"}, decompositions={ROOT: ["a?"]})
    lm = world.lm(passages_answer={"answer": answer})
    pred = run(RAISF(retriever, decompose_if_unknown=True, lenient_unknown=lenient), lm)
    unk = get_metric("unknown_lenient" if lenient else "unknown")(None, dspy.Prediction(answer=answer))
    assert ("decompose" in lm.call_names) == (unk == 1.0), (answer, lenient)
    assert pred.route == ("decomposition" if unk else "relevant_passages")


def test_strict_reading_keeps_a_refusal_as_the_answer_and_unk_does_not_count_it(retriever):
    world = World(grounded={ROOT: None}, known={"a?"}, decompositions={ROOT: ["a?"]})
    lm = world.lm(passages_answer={"answer": "I don't know"})
    pred = run(RAISF(retriever, decompose_if_unknown=True), lm)
    assert lm.call_names == ["self_knowledge", *JUDGES, "passages_answer"]
    assert pred.answer == "I don't know"
    from ragzoo.metrics import get_metric
    assert get_metric("unknown")(None, pred) == 0.0 and get_metric("unknown_lenient")(None, pred) == 1.0


def test_defaults_are_the_papers_and_the_documented_guards(retriever):
    """k = 5 and D_th = 3 (the paper), at most 5 sub-questions per decomposition and 30 questions per input
    (our guards): a 7-way decomposition keeps its first 5."""
    subs = [f"sub {i}?" for i in range(7)]
    lm = World(known=set(subs), decompositions={ROOT: subs}).lm()
    program = RAISF(retriever)
    pred = run(program, lm)
    assert (program.k, program.max_depth, program.max_subquestions, program.max_questions) == (5, 3, 5, 30)
    assert [c["question"] for c in pred.tree["children"]] == subs[:5] and pred.tree["skipped"] == subs[5:]
    assert retriever.queries == [(ROOT, 5)]


def test_an_answer_from_all_retrieved_passages_reports_them_as_used(retriever):
    # on_empty_decomposition="passages": the node answers from its k unfiltered passages; they are the
    # prediction's passages (none was judged relevant, so only this fallback can have put them there)
    lm = World(decompositions={ROOT: []}).lm()
    pred = run(RAISF(retriever, on_empty_decomposition="passages"), lm)
    assert pred.route == "empty_decomposition:passages"
    assert [p.pid for p in pred.passages] == [str(i) for i in range(K)]


def test_gate_agreement_metrics_score_agreement_and_disagreement():
    from ragzoo.programs.raisf import joint_relevance_agreement, relevance_agreement, self_knowledge_agreement

    ex = dspy.Example
    assert self_knowledge_agreement(ex(can_answer=True), dspy.Prediction(can_answer=True)) == 1.0
    assert self_knowledge_agreement(ex(can_answer=True), dspy.Prediction(can_answer=False)) == 0.0
    assert relevance_agreement(ex(relevant=False), dspy.Prediction(relevant=False)) == 1.0
    assert relevance_agreement(ex(relevant=False), dspy.Prediction(relevant=True)) == 0.0
    assert joint_relevance_agreement(ex(relevant_ids=[1, 2]), dspy.Prediction(relevant_ids=[2, 1])) == 1.0
    assert joint_relevance_agreement(ex(relevant_ids=[1, 2]), dspy.Prediction(relevant_ids=[1])) == 0.0
    assert joint_relevance_agreement(ex(relevant_ids=[]), dspy.Prediction(relevant_ids=None)) == 1.0


@pytest.mark.parametrize("reply", ["No.", "None of the passages is relevant."])
def test_a_joint_judge_that_says_no_in_words_sends_the_question_to_decomposition(retriever, reply):
    """Alg. 1: no relevant passage -> decompose. The paper's joint prompt asks for "No." in that case; the lenient
    reader once read it as unreadable (every passage then kept) or, for "None of the three ...", as id 3."""
    from ragzoo.adapters import make_adapter

    raw = f"[[ ## relevant_ids ## ]]\n{reply}\n\n[[ ## completed ## ]]"
    lm = World(decompositions={ROOT: []}).lm(relevance_joint=raw)
    with dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=0)):
        pred = RAISF(retriever, relevance="joint")(question=ROOT)
    assert lm.call_names[:3] == ["self_knowledge", "relevance_joint", "decompose"]
    assert pred.relevant_ids == []
