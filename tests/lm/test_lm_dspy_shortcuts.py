"""The CPU shortcuts `make_lm` installs in DSPy leave what is sent unchanged: the requests the stub server receives
are the same with and without them (the ChatAdapter, JSONAdapter and ragzoo's lenient adapter; a list of passages,
a typed field, instructions changed in place), and each shortcut does what it is for: a system message is built
once per signature and adapter class, the model's route is resolved once per model, a plain-text request is
planned once per model, options and shape, a list of plain strings is put in a prompt without a pydantic
TypeAdapter."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.adapters import utils
from dspy.adapters.base import Adapter
from dspy.adapters.chat_adapter import ChatAdapter
from dspy.adapters.json_adapter import JSONAdapter
from dspy.clients import backend_selection, capabilities
from dspy.clients.engines import lm15_engine

from ragzoo.adapters import LenientChatAdapter
from ragzoo.lm import _memoize_backend_resolution, _memoize_request_plans, _memoize_system_messages, \
    _plain_text_serialization, make_lm
from ragzoo.stubserver import StubLMServer, adapter_responder


class Sourced(dspy.Signature):
    """Answer the question from the passages; "quote" nothing."""

    passages: list[str] = dspy.InputField(desc="retrieved passages")
    question: str = dspy.InputField()
    year: int = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words")
    confident: bool = dspy.OutputField()


INPUTS = [{"passages": ["Paris | capital of France", "Lyon | \"second\" city\nof France", "Überall ∑ 😀"],
           "question": "Capital of France?", "year": 1999},
          {"passages": ("a tuple", "of passages"), "question": "q2", "year": 0},
          {"passages": [], "question": "empty context", "year": -1}]


def _sent_requests(adapter) -> list[dict]:
    bodies = []

    def responder(messages, body):
        bodies.append(body)
        return adapter_responder(messages, body)

    with StubLMServer(responder) as server:
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        predict = dspy.Predict(Sourced)
        with dspy.context(lm=lm, adapter=adapter):
            for inputs in INPUTS:
                predict(**inputs)
            renamed = dspy.Predict(Sourced.with_instructions("Answer in French."))
            renamed(**INPUTS[0])
    return [{key: body[key] for key in ("messages", "model", "temperature")} for body in bodies]


def _without_shortcuts(monkeypatch) -> None:
    """DSPy's own functions back in place (each shortcut keeps the function it wraps as `__wrapped__`)."""
    for owner, name in ((utils, "serialize_for_json"), (Adapter, "format_system_message"),
                        (backend_selection, "LM15Engine"), (capabilities, "resolve"), (lm15_engine._Routing, "plan")):
        current = getattr(owner, name)
        monkeypatch.setattr(owner, name, getattr(current, "__wrapped__", current))
    for install in (_plain_text_serialization, _memoize_system_messages, _memoize_backend_resolution,
                    _memoize_request_plans):
        monkeypatch.setattr(f"ragzoo.lm.{install.__name__}", lambda: False)


@pytest.mark.parametrize("adapter", [ChatAdapter(), JSONAdapter(), LenientChatAdapter()],
                         ids=["chat", "json", "lenient"])
def test_the_requests_sent_are_the_same_with_and_without_the_shortcuts(adapter, monkeypatch):
    fast = _sent_requests(adapter)
    assert getattr(Adapter.format_system_message, "_ragzoo_memo", False)
    assert getattr(lm15_engine._Routing.plan, "_ragzoo_memo", False)
    with monkeypatch.context() as plain:
        _without_shortcuts(plain)
        assert not getattr(Adapter.format_system_message, "_ragzoo_memo", False)
        assert not getattr(lm15_engine._Routing.plan, "_ragzoo_memo", False)
        slow = _sent_requests(adapter)
    assert len(fast) == len(INPUTS) + 1
    assert json.dumps(fast, ensure_ascii=False) == json.dumps(slow, ensure_ascii=False)
    assert "Answer in French." in fast[-1]["messages"][0]["content"]


def test_a_system_message_is_built_once_per_signature_and_adapter_class(monkeypatch):
    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)
    assert _memoize_system_messages()
    from dspy.adapters import chat_adapter

    built = []
    real = chat_adapter.get_field_description_string
    monkeypatch.setattr(chat_adapter, "get_field_description_string",  # twice a message: inputs, outputs
                        lambda fields: built.append(list(fields)) or real(fields))

    class Fresh(dspy.Signature):
        """Say hello."""

        name: str = dspy.InputField()
        greeting: str = dspy.OutputField()

    first = ChatAdapter().format(Fresh, demos=[], inputs={"name": "Ada"})
    second = ChatAdapter().format(Fresh, demos=[], inputs={"name": "Bob"})
    assert len(built) == 2 and first[0] == second[0]
    Fresh.instructions = "Say goodbye."  # changed in place: a new system message
    third = ChatAdapter().format(Fresh, demos=[], inputs={"name": "Ada"})
    assert len(built) == 4 and "Say goodbye." in third[0]["content"]
    JSONAdapter().format(Fresh, demos=[], inputs={"name": "Ada"})  # another adapter class: its own message
    assert len(built) == 6


def test_an_adapter_that_formats_the_system_message_its_own_way_is_not_memoised():
    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)
    assert _memoize_system_messages()
    counter = iter(range(100))

    class Counting(ChatAdapter):
        def format_task_description(self, signature):
            return f"call {next(counter)}"

    first = Counting().format(Sourced, demos=[], inputs=INPUTS[0])
    second = Counting().format(Sourced, demos=[], inputs=INPUTS[0])
    assert "call 0" in first[0]["content"] and "call 1" in second[0]["content"]


def test_the_route_of_a_model_is_resolved_once(monkeypatch):
    from dspy.clients.engines.lm15_engine import LM15Engine

    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)
    assert _memoize_backend_resolution()
    built = []
    real_init = LM15Engine.__init__
    monkeypatch.setattr(LM15Engine, "__init__", lambda self, *a, **k: built.append(1) or real_init(self, *a, **k))
    lm = dspy.LM("openai/route-once-model", api_base="http://127.0.0.1:9/v1", api_key="stub")
    first = backend_selection.select_backend(lm, {})
    second = backend_selection.select_backend(lm, {"temperature": 0.5})
    assert len(built) == 1, built  # DSPy built an engine (and its router) per call to resolve the model string
    assert first == second and first.native and first.resolution.model == "route-once-model"
    with monkeypatch.context() as plain:
        plain.setattr(backend_selection, "LM15Engine", backend_selection.LM15Engine.__wrapped__)
        assert backend_selection.select_backend(lm, {}) == first
    other = dspy.LM("openai/another-model", api_base="http://127.0.0.1:9/v1", api_key="stub")
    assert backend_selection.select_backend(other, {}).resolution.model == "another-model"
    assert len(built) == 3  # the first, DSPy's own (without the memo), another model's
    assert capabilities.resolve(lm) == first.resolution and capabilities.resolve(other).model == "another-model"
    assert len(built) == 3  # the reply's pricing resolved the model string again for every call


def test_a_call_against_the_stub_builds_one_engine(monkeypatch):
    from dspy.clients.engines.lm15_engine import LM15Engine

    built = []
    real_init = LM15Engine.__init__
    monkeypatch.setattr(LM15Engine, "__init__", lambda self, *a, **k: built.append(1) or real_init(self, *a, **k))
    with StubLMServer() as server:
        lm = make_lm("openai/stub-one-engine", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        with dspy.context(lm=lm):
            for question in ("a", "b", "c"):
                dspy.Predict("question -> answer")(question=question)
    assert len(built) == 2, built  # the LM's own engine, and one resolution; DSPy built 2 more for every call


def test_a_list_of_plain_strings_is_formatted_without_a_type_adapter(monkeypatch):
    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)
    assert _plain_text_serialization()
    built = []
    real = utils.TypeAdapter

    class Counted(real):
        def __init__(self, *args, **kwargs):
            built.append(args[0] if args else None)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(utils, "TypeAdapter", Counted)
    original = utils.serialize_for_json.__wrapped__

    class Tagged(str):
        pass

    for value in (["a", "b\n\"c\"", "é😀"], ("x", "y"), [], ()):
        assert utils.serialize_for_json(value) == original(value) and type(utils.serialize_for_json(value)) is list
    assert built.count(list) == 2 and built.count(tuple) == 2  # only the calls of DSPy's own function above
    built.clear()
    for value in (["a", 1], [Tagged("t")], [["nested"]], ("a", None)):
        assert utils.serialize_for_json(value) == original(value)
    assert len(built) == 8  # anything but exact strings takes DSPy's path


def _planned_builds(monkeypatch) -> list[bool]:
    from dspy._vendor.lm15.providers.base import BaseProviderLM

    builds = []
    real = BaseProviderLM._build

    def counted(self, request, stream, *, policy=None, planning=False):
        builds.append(planning)
        return real(self, request, stream, policy=policy, planning=planning)

    monkeypatch.setattr(BaseProviderLM, "_build", counted)
    return builds


def test_a_plain_text_request_is_planned_once_per_model_options_and_shape(monkeypatch):
    builds = _planned_builds(monkeypatch)
    with StubLMServer() as server:
        lm = make_lm("openai/stub-plans", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        predict = dspy.Predict(Sourced)
        with dspy.context(lm=lm):
            for inputs in INPUTS:
                predict(**inputs)
            assert builds.count(True) == 1 and builds.count(False) == 3  # DSPy built every request twice
            predict(**INPUTS[0], config={"temperature": 0.7})  # other options: planned again
            assert builds.count(True) == 2
            with dspy.context(adapter=JSONAdapter()):  # other words (no response format for this model): kept
                predict(**INPUTS[0])
            assert builds.count(True) == 2
            with pytest.raises(Exception, match="not valid Unicode"):  # no UTF-8 form: still refused, unsent
                predict(question="q", passages=["lone \ud800 surrogate"], year=1)
    assert builds.count(True) == 2 and builds.count(False) == 5
