"""Knob validation in one place: every knob of every method is checked once, from the constructor's type
hints, whether the program is built through the registry or by calling its class; the registry's
`resolve_knobs`, `get`, `tag` and `origin`."""

from __future__ import annotations

import json
import typing
from collections import Counter

import dspy
import pytest

from ragzoo import programs
from ragzoo.cli import main
from ragzoo.errors import ConfigError
from ragzoo.programs import base
from ragzoo.programs.baselines import RetrieveThenAnswer
from ragzoo.programs.raisf import RAISF

RETRIEVAL_METHODS = sorted(m for m, info in programs.methods().items() if info.uses_retrieval)
ALL_METHODS = sorted(programs.methods())


def build_directly(method_id: str, retriever, **knobs):
    """The class of `method_id` called as a user would, without the registry."""
    info = programs.info(method_id)
    arguments = {**info.fixed_knobs, **knobs}
    return info.cls(retriever=retriever, **arguments) if info.uses_retrieval else info.cls(**arguments)


# --- the bugs of the issue: bad knobs accepted silently by direct construction ----------------------------

@pytest.mark.parametrize("knob, value, allowed", [
    ("relevance", "sometimes", "one of 'per_passage', 'joint'"),
    ("at_depth_limit", "bogus", "one of 'decompose', 'unknown', 'passages', 'direct'"),
    ("max_depth", True, "an integer with max_depth >= 0"),
    ("max_depth", -1, "an integer with max_depth >= 0"),
    ("use_relevance", "no", "a boolean"),
])
def test_raisf_direct_construction_rejects_bad_knobs_in_one_line(static_retriever, knob, value, allowed):
    with pytest.raises(ConfigError) as error:
        RAISF(static_retriever, **{knob: value})
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"RAISF knob {knob}={value!r}: expected ")  # class, knob, value ...
    assert allowed in message  # ... and what is allowed


@pytest.mark.parametrize("method_id", RETRIEVAL_METHODS)
@pytest.mark.parametrize("k", [0, -1, 1000, True, 2.5, "5"])
def test_bad_k_is_rejected_at_construction_for_every_retrieval_method(static_retriever, method_id, k):
    with pytest.raises(ConfigError, match=r"knob k=.*: expected an integer with 1 <= k <= 100"):
        build_directly(method_id, static_retriever, k=k)
    if not isinstance(k, str):  # the registry reads "5" as 5: strings are CLI input there
        with pytest.raises(ConfigError, match=r"knob k="):
            programs.get(method_id, retriever=static_retriever, k=k)


@pytest.mark.parametrize("method_id", RETRIEVAL_METHODS)
def test_k_bounds_are_inclusive(static_retriever, method_id):
    assert build_directly(method_id, static_retriever, k=1).k == 1
    assert programs.get(method_id, retriever=static_retriever, k="100").k == 100


@pytest.mark.parametrize("method_id", ALL_METHODS)
def test_every_literal_and_bool_knob_is_checked_from_its_type_hint(static_retriever, method_id):
    """Whatever the method: a value outside a Literal's choices, a string for a bool and a bool for an int
    are refused when the class is called directly."""
    info = programs.info(method_id)
    checked = 0
    for name, annotation in info.knob_types().items():
        origin = typing.get_origin(annotation)
        item = typing.get_args(annotation)[0] if origin in (tuple, list) else None
        if origin is typing.Literal:
            bad = "no-such-choice"
        elif item is not None and typing.get_origin(item) is typing.Literal:
            bad = ("no-such-choice",)
        elif annotation is bool:
            bad = "yes"
        elif annotation is int:
            bad = True
        elif annotation is float:
            bad = float("nan")
        else:
            continue
        with pytest.raises(ConfigError, match=rf"^{info.cls.__name__} knob {name}"):
            build_directly(method_id, static_retriever, **{name: bad})
        checked += 1
    assert checked == len(info.knobs)  # every knob has a type the validator understands


def test_each_knob_is_validated_exactly_once_per_build(static_retriever, monkeypatch):
    seen: list[str] = []
    real_check = base.check

    def counting(name, value, annotation, owner=None):
        seen.append(name)
        return real_check(name, value, annotation, owner)

    monkeypatch.setattr(base, "check", counting)
    programs.get("iter_retgen", retriever=static_retriever, T="2", k="4")
    assert Counter(seen) == {"T": 1, "k": 1, "answer_mode": 1}

    class Wider(RetrieveThenAnswer):  # a subclass calling super().__init__ is not re-checked by the parent
        def __init__(self, retriever, k: base.TopK = 7, note: str = ""):
            super().__init__(retriever, k=k)

    seen.clear()
    assert Wider(static_retriever).k == 7
    assert Counter(seen) == {"k": 1, "note": 1}
    with pytest.raises(ConfigError, match="^Wider knob k=0"):
        Wider(static_retriever, k=0)


def test_rules_over_several_knobs_stay_with_the_method(static_retriever):
    with pytest.raises(ConfigError, match="leave no query"):
        programs.get("blendfilter", retriever=static_retriever, augmentations="", original_query="false")
    with pytest.raises(ConfigError, match="pf_concat only"):
        programs.get("concat", retriever=static_retriever, skip_distill_if_unanimous="true")
    with pytest.raises(ConfigError, match="'all' alone"):
        programs.get("activerag", retriever=static_retriever, agents="all,associate")


# --- registry API ---------------------------------------------------------------------------------------

def test_resolve_knobs_gives_every_knob_typed_and_validated():
    resolved = programs.resolve_knobs("raisf", {"k": "3", "relevance": "joint", "use_relevance": "off"})
    assert resolved["k"] == 3 and resolved["relevance"] == "joint" and resolved["use_relevance"] is False
    assert set(resolved) == set(programs.info("raisf").knobs) and resolved["max_depth"] == 3
    assert programs.resolve_knobs("activerag", {"agents": ["logician"]})["agents"] == ("logician",)
    for bad in ({"relevance": "sometimes"}, {"max_depth": "-1"}, {"k": "1000"}, {"depth": 2}, {"mode": "x"}):
        with pytest.raises(ConfigError):
            programs.resolve_knobs("raisf", bad)
    with pytest.raises(ConfigError, match="^raisf knob relevance='sometimes'"):
        programs.resolve_knobs("raisf", {"relevance": "sometimes"})


@pytest.mark.parametrize("method_id", ALL_METHODS)
def test_get_takes_resolved_knobs_and_tags_its_origin(static_retriever, method_id):
    resolved = programs.resolve_knobs(method_id, {})
    program = programs.get(method_id, retriever=static_retriever, **resolved)
    found = programs.origin(program)
    assert found["method"] == method_id and set(found["knobs"]) == set(resolved)
    assert json.loads(json.dumps(found)) == found  # JSON-ready
    # Rebuilding from the JSON form (lists for tuples) gives the same program and the same origin.
    again = programs.get(method_id, retriever=static_retriever, **found["knobs"])
    assert programs.origin(again) == found
    assert [n for n, _ in again.named_predictors()] == [n for n, _ in program.named_predictors()]


def test_origin_records_the_overridden_knobs_and_hides_from_dspy(static_retriever):
    program = programs.get("blendfilter", retriever=static_retriever, k="3", augmentations="internal")
    found = programs.origin(program)
    assert found["knobs"]["k"] == 3 and found["knobs"]["augmentations"] == ["internal"]
    assert "_ragzoo_origin" not in json.dumps(program.dump_state())
    assert all("_ragzoo_origin" not in name for name, _ in program.named_parameters())


def test_origin_looks_through_ensembles_and_knn_wrappers(static_retriever):
    first = programs.get("rag", retriever=static_retriever, k="2")

    class Ensemble(dspy.Module):
        def __init__(self, members):
            super().__init__()
            self.programs = members

    class KNN(dspy.Module):
        def __init__(self, program):
            super().__init__()
            self.program = program

    expected = {"method": "rag", "knobs": {"k": 2, "answer_mode": "short"}}
    assert programs.origin(first) == expected
    assert programs.origin(Ensemble([first, programs.get("rag", retriever=static_retriever)])) == expected
    assert programs.origin(KNN(first)) == expected
    assert programs.origin(RetrieveThenAnswer(static_retriever)) is None  # built without the registry
    assert programs.origin(Ensemble([])) is None and programs.origin(object()) is None


def test_tag_sets_the_origin_of_any_program(static_retriever):
    program = RetrieveThenAnswer(static_retriever, k=4)
    programs.tag(program, "rag", {"k": 4, "answer_mode": "short"})
    assert programs.origin(program) == {"method": "rag", "knobs": {"k": 4, "answer_mode": "short"}}
    programs.tag(program, "activerag", {"agents": ("associate", "logician")})
    assert programs.origin(program)["knobs"] == {"agents": ["associate", "logician"]}


# --- the CLI --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("knob, fragment", [
    ("relevance=sometimes", "relevance='sometimes': expected one of 'per_passage', 'joint'"),
    ("max_depth=true", "max_depth='true': expected an integer"),
    ("k=0", "k=0: expected an integer with 1 <= k <= 100"),
    ("k=1000", "k=1000: expected an integer with 1 <= k <= 100"),
])
def test_ask_with_a_bad_knob_exits_2_with_one_line(capsys, knob, fragment):
    assert main(["ask", "--method", "raisf", "--lm", "dry-run", "--knob", knob, "Who wrote Hamlet?"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "raisf knob" in err and fragment in err


@pytest.mark.parametrize("method_id", ["rag", "iter_retgen", "multihop", "self_ask", "filco", "activerag"])
@pytest.mark.parametrize("k", ["0", "-1", "1000"])
def test_ask_refuses_a_bad_k_before_any_retrieval_for_every_method(capsys, method_id, k):
    """These methods used to take any k and fail (or not) at the first retrieval, with a retriever error."""
    assert main(["ask", "--method", method_id, "--lm", "dry-run", "--knob", f"k={k}", "Who wrote Hamlet?"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and f"{method_id} knob k={k}: expected" in err and "1 <= k <= 100" in err
    assert captured.out == ""
