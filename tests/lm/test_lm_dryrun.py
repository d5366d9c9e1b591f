"""The dry-run LM: type-valid placeholders through DSPy's adapters, token counts, cost estimates."""

from __future__ import annotations

import enum
from typing import Literal, Optional

import dspy
import pydantic
import pytest

from ragzoo.engines import approx_tokens
from ragzoo.engines import (DEFAULT_TEXT, PLACEHOLDER_TEXT, placeholder_from_schema, placeholder_outputs,
                            placeholder_value, with_dry_run)
from ragzoo.lm import make_lm
from ragzoo.tracing import trace_example


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(pydantic.BaseModel):
    label: str
    weight: float
    note: str = "optional"


class Outer(pydantic.BaseModel):
    name: str
    count: int
    inner: Inner
    tags: list[str]
    maybe: Optional[Inner] = None


class EveryType(dspy.Signature):
    """Exercise every output type the dry-run LM must answer."""

    question: str = dspy.InputField()
    text: str = dspy.OutputField()
    flag: bool = dspy.OutputField()
    number: int = dspy.OutputField()
    ratio: float = dspy.OutputField()
    ids: list[int] = dspy.OutputField()
    names: list[str] = dspy.OutputField()
    pair: tuple[str, int] = dspy.OutputField()
    mapping: dict[str, int] = dspy.OutputField()
    choice: Literal["yes", "no"] = dspy.OutputField()
    maybe: Optional[int] = dspy.OutputField()
    color: Color = dspy.OutputField()
    record: Outer = dspy.OutputField()
    answer: str = dspy.OutputField()


def _check_every_type(prediction):
    assert isinstance(prediction.text, str) and prediction.text
    assert prediction.flag is True
    assert isinstance(prediction.number, int) and not isinstance(prediction.number, bool)
    assert isinstance(prediction.ratio, float)
    assert isinstance(prediction.ids, list) and all(isinstance(i, int) for i in prediction.ids) and prediction.ids
    assert isinstance(prediction.names, list) and all(isinstance(n, str) for n in prediction.names)
    assert isinstance(prediction.pair, tuple) and isinstance(prediction.pair[0], str) and isinstance(prediction.pair[1], int)
    assert isinstance(prediction.mapping, dict) and all(isinstance(v, int) for v in prediction.mapping.values())
    assert prediction.choice == "yes"
    assert isinstance(prediction.maybe, int)
    assert prediction.color is Color.RED
    assert isinstance(prediction.record, Outer) and isinstance(prediction.record.inner, Inner)
    assert prediction.answer == PLACEHOLDER_TEXT["answer"]


@pytest.mark.parametrize("module", [dspy.Predict, dspy.ChainOfThought])
@pytest.mark.parametrize("adapter", [dspy.ChatAdapter, dspy.JSONAdapter])
def test_every_type_is_valid_through_real_adapters(module, adapter):
    lm = make_lm("dry-run")
    with dspy.context(lm=lm, adapter=adapter()):
        prediction = module(EveryType)(question="What is it?")
    _check_every_type(prediction)
    if module is dspy.ChainOfThought:
        assert prediction.reasoning == PLACEHOLDER_TEXT["reasoning"]
    assert len(lm.history) == 1  # parsed on the first try: no JSONAdapter fallback call


class WithOverrides(dspy.Signature):
    """Overrides of the placeholder."""

    question: str = dspy.InputField()
    relevant: bool = with_dry_run(dspy.OutputField(desc="is it relevant"), False)
    picked: list[int] = with_dry_run(dspy.OutputField(desc="picked ids"), [2, 3])
    label: Literal["a", "b", "c"] = with_dry_run(dspy.OutputField(), "c")


def test_dry_run_override_survives_dspy_and_is_used():
    assert WithOverrides.output_fields["relevant"].json_schema_extra["dry_run"] is False
    assert WithOverrides.output_fields["relevant"].json_schema_extra["desc"] == "is it relevant"
    with dspy.context(lm=make_lm("dry-run")):
        prediction = dspy.ChainOfThought(WithOverrides)(question="q")
    assert prediction.relevant is False and prediction.picked == [2, 3] and prediction.label == "c"


def test_plain_dspy_output_field_drops_json_schema_extra_so_the_helper_is_needed():
    # Documents the DSPy 3.4.1 behaviour that ragzoo.engines.with_dry_run works around.
    field = dspy.OutputField(json_schema_extra={"dry_run": True})
    assert "dry_run" not in field.json_schema_extra


def test_placeholder_values_for_python_types():
    assert placeholder_value(Optional[list[tuple[int, ...]]], "x") == [(1,)]
    assert placeholder_value(Literal[3, 4]) == 3
    assert placeholder_value(int | None) == 1
    assert placeholder_value(dict) == {DEFAULT_TEXT: DEFAULT_TEXT} or isinstance(placeholder_value(dict), dict)
    outer = placeholder_value(Outer)
    assert outer.maybe is None and outer.note if hasattr(outer, "note") else True
    assert placeholder_outputs(WithOverrides) == {"relevant": False, "picked": [2, 3], "label": "c"}


def test_placeholder_from_json_schema():
    schema = Outer.model_json_schema()
    value = placeholder_from_schema(schema, "record")
    Outer.model_validate(value)
    assert placeholder_from_schema({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}) \
        == [DEFAULT_TEXT, 1]
    assert placeholder_from_schema({"anyOf": [{"type": "null"}, {"type": "boolean"}]}) is True
    assert placeholder_from_schema({"enum": ["x", "y"]}) == "x"


def test_placeholder_text_lengths_are_realistic():
    assert 45 <= approx_tokens(PLACEHOLDER_TEXT["reasoning"]) <= 75
    assert approx_tokens(PLACEHOLDER_TEXT["answer"]) <= 4
    assert 30 <= approx_tokens(PLACEHOLDER_TEXT["passage"]) <= 55
    assert approx_tokens(DEFAULT_TEXT) <= 12


class TwoStep(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> answer")
        self.check = dspy.Predict("question, answer -> ok: bool")

    def forward(self, question):
        draft = self.draft(question=question)
        return self.check(question=question, answer=draft.answer)


@pytest.mark.parametrize("priced", ["openai/gpt-4o-mini", "openai/gpt-4o"])
def test_tokens_and_cost_match_litellm_price_table(priced):
    import litellm

    lm = make_lm(f"dry-run:{priced}")
    with dspy.context(lm=lm), trace_example() as trace:
        TwoStep()(question="Who wrote Hamlet?")
    assert [call.signature for call in trace.lm_calls] == ["draft", "check"]
    for call, entry in zip(trace.lm_calls, lm.history):
        prompt = "\n\n".join(m["content"] for m in entry["messages"])
        assert call.prompt_tokens == approx_tokens(prompt)
        assert call.completion_tokens == approx_tokens(entry["outputs"][0])
        prompt_cost, completion_cost = litellm.cost_per_token(model=priced, prompt_tokens=call.prompt_tokens,
                                                              completion_tokens=call.completion_tokens)
        assert call.cost == pytest.approx(prompt_cost + completion_cost)
        assert call.cost > 0 and call.model == f"dry-run/{priced}" and call.cached is False
    # The reasoning placeholder dominates the draft call's completion.
    assert trace.lm_calls[0].completion_tokens > 50 > trace.lm_calls[1].completion_tokens
    totals = lm.usage.to_dict()
    assert totals["lm_calls"] == 2 and totals["cost"] == pytest.approx(trace.cost)
    assert totals["by_signature"]["check"]["calls"] == 1
