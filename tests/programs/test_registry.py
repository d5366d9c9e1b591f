"""The method registry: lookup, unknown ids, knob coercion, fixed knobs, method info."""

from __future__ import annotations

import inspect
import typing

import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.base import RagProgram

BASELINES = {"direct", "cot", "rag", "cot_rag", "iter_retgen", "self_ask", "multihop"}


def test_every_baseline_is_registered_with_paper_and_calls():
    registry = programs.methods()
    assert BASELINES <= set(registry)
    assert list(registry) == sorted(registry)
    for method_id in BASELINES:
        info = registry[method_id]
        assert info.method_id == method_id and info.paper and info.calls and info.summary
    assert not registry["direct"].uses_retrieval and not registry["cot"].uses_retrieval
    assert all(registry[m].uses_retrieval for m in BASELINES - {"direct", "cot"})


def test_knobs_are_constructor_defaults_without_retriever_or_fixed_knobs():
    assert programs.info("rag").knobs == {"k": 5, "answer_mode": "short"}
    assert programs.info("cot").knobs == {"answer_mode": "short"}
    assert programs.info("iter_retgen").knobs == {"T": 3, "k": 5, "answer_mode": "short"}
    assert programs.info("multihop").knobs == {"hops": 2, "k": 3, "answer_mode": "short"}
    assert programs.info("self_ask").knobs == {"max_steps": 4, "k": 5}
    assert programs.info("iter_retgen").knob_types()["T"] is int
    assert programs.info("rag").knob_types()["answer_mode"] == typing.Literal["short", "yes_no"]


def test_unknown_method_lists_the_valid_ids():
    with pytest.raises(ConfigError) as error:
        programs.get("retgen")
    message = str(error.value)
    assert "'retgen'" in message
    assert all(method_id in message for method_id in programs.methods())


def test_string_knobs_are_coerced_to_the_declared_types(static_retriever):
    program = programs.get("iter_retgen", retriever=static_retriever, T="2", k="4", answer_mode="yes_no")
    assert (program.T, program.k) == (2, 4) and type(program.T) is int
    answer = program.generate.predict.signature.output_fields["answer"]
    assert answer.annotation == typing.Literal["yes", "no"]
    assert programs.resolve_knobs("multihop", {"hops": "3"}) == {"hops": 3, "k": 3, "answer_mode": "short"}


@pytest.mark.parametrize("knobs, fragment", [
    ({"T": "three"}, "expected an integer"),
    ({"T": 2.5}, "expected an integer"),
    ({"answer_mode": "maybe"}, "expected one of"),
    ({"iterations": "3"}, "has no knob 'iterations'"),
])
def test_bad_knobs_raise_config_errors(static_retriever, knobs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        programs.get("iter_retgen", retriever=static_retriever, **knobs)


def test_unknown_knob_error_lists_the_methods_knobs(static_retriever):
    with pytest.raises(ConfigError) as error:
        programs.get("multihop", retriever=static_retriever, depth=3)
    assert "hops=2" in str(error.value) and "k=3" in str(error.value)


def test_fixed_knobs_are_set_by_the_id_and_not_overridable(static_retriever):
    assert not hasattr(programs.get("direct").generate_answer, "predict")  # plain Predict
    # cot reasons first through its own signature (ActiveRAG's shared CoT prompt), not a ChainOfThought
    assert list(programs.get("cot").generate_answer.signature.output_fields) == ["reasoning", "answer"]
    assert hasattr(programs.get("cot_rag", retriever=static_retriever).generate_answer, "predict")
    with pytest.raises(ConfigError, match="has no knob 'chain_of_thought'"):
        programs.get("cot", chain_of_thought=False)


def test_retrieval_methods_need_a_retriever_and_closed_book_ones_do_not(static_retriever):
    with pytest.raises(ConfigError, match="needs a retriever"):
        programs.get("rag")
    assert programs.get("direct").retriever is None
    assert programs.get("direct", retriever=static_retriever).retriever is None


def test_register_rejects_a_second_class_under_one_id(monkeypatch):
    monkeypatch.setattr(programs, "_REGISTRY", dict(programs._REGISTRY))

    @programs.register("test_only_method", paper="p", calls="1", uses_retrieval=False, flavour="b")
    class TestOnly(RagProgram):
        """A throwaway method."""

        def __init__(self, flavour: str = "a", n: int = 1):
            super().__init__(None)
            self.flavour, self.n = flavour, n

    info = programs.info("test_only_method")
    assert info.knobs == {"n": 1} and info.summary == "A throwaway method."
    assert programs.get("test_only_method", n="2").flavour == "b"
    with pytest.raises(RuntimeError, match="registered twice"):
        programs.register("test_only_method", paper="p", calls="1")(type("Other", (RagProgram,), {}))


def test_every_registered_method_follows_the_program_contract():
    for method_id, info in programs.methods().items():
        assert issubclass(info.cls, RagProgram), method_id
        assert info.cls.__module__.startswith("ragzoo.programs."), method_id
        assert inspect.getmodule(info.cls).__doc__, f"{method_id}: module docstring (paper, choices) missing"
        hints = typing.get_type_hints(info.cls.__init__)
        for name, default in info.knobs.items():
            assert default is not inspect.Parameter.empty, f"{method_id}: knob {name} has no default"
            assert name in hints, f"{method_id}: knob {name} has no type annotation"
