"""Plain strings go into a prompt without a pydantic TypeAdapter built for each (DSPy's `serialize_for_json` did
that for every input value of every call: ~6% of ragzoo's CPU per LM call); the prompt is the same text."""

from __future__ import annotations

import random

import dspy
import pytest
from dspy.adapters import utils
from dspy.adapters.chat_adapter import ChatAdapter

from ragzoo.lm import _plain_text_serialization, make_lm


@pytest.fixture
def type_adapters(monkeypatch):
    make_lm("openai/stub", api_base="http://127.0.0.1:9/v1", cache=False)  # installs it, as any LM does
    assert _plain_text_serialization()
    built = []
    real = utils.TypeAdapter

    class Counted(real):
        def __init__(self, *args, **kwargs):
            built.append(args[0] if args else None)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(utils, "TypeAdapter", Counted)
    return built


class QA(dspy.Signature):
    """Answer the question from the context."""

    context: list[str] = dspy.InputField()
    question: str = dspy.InputField()
    hint: str = dspy.InputField()
    year: int = dspy.InputField()
    answer: str = dspy.OutputField()


def test_plain_strings_are_formatted_without_a_type_adapter(type_adapters):
    inputs = {"context": ["Paris | capital of France", "Lyon | a city"], "question": "Capital of France?",
              "hint": "Überall ein \"Zitat\" \n\t und {json: 1}", "year": 1999}
    messages = ChatAdapter().format(QA, demos=[], inputs=inputs)
    assert type_adapters == [int]  # the int still goes through DSPy's serialization; no str, no list of them did
    serialize = utils.serialize_for_json
    utils.serialize_for_json = serialize.__wrapped__  # DSPy's function, for the same prompt
    try:
        assert ChatAdapter().format(QA, demos=[], inputs=inputs) == messages
    finally:
        utils.serialize_for_json = serialize


def test_a_string_serializes_as_dspy_serializes_it(type_adapters):
    rng = random.Random(3)
    alphabet = ["a", "Z", " ", "\n", "\"", "\\", "é", "e\u0301", "{", "}", "\u0000", "\ud800", "😀", "\u2028"]
    original = utils.serialize_for_json.__wrapped__
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert utils.serialize_for_json(text) == original(text)

    class Tagged(str):
        pass

    assert utils.serialize_for_json(Tagged("x")) == original(Tagged("x"))  # a subclass takes DSPy's path
    assert utils.serialize_for_json({"a": [1, "b"]}) == original({"a": [1, "b"]})
