"""Knob values: CLI parsing, `parse` (form only), `check` (the one validator), `coerce`, `describe`."""

from typing import Annotated, Literal, Optional

import pytest

from ragzoo.errors import ConfigError
from ragzoo.knobs import Range, as_json, check, coerce, describe, parse, parse_knob_args


def test_parse_knob_args():
    assert parse_knob_args(["k=5", " filter = off "]) == {"k": "5", "filter": "off"}
    with pytest.raises(ConfigError, match="name=value"):
        parse_knob_args(["k5"])


@pytest.mark.parametrize("value, annotation, expected", [
    ("5", int, 5), (3, int, 3), ("0.5", float, 0.5), ("true", bool, True), ("off", bool, False),
    ("union", Literal["per_set", "union"], "union"), ("external,internal", tuple[str, ...], ("external", "internal")),
    ("none", Optional[int], None), ("7", Optional[int], 7), ("abc", str, "abc"),
])
def test_coerce_accepts(value, annotation, expected):
    assert coerce("x", value, annotation) == expected


@pytest.mark.parametrize("value, annotation", [
    ("five", int), ("1.5", int), (True, int), ("maybe", bool), ("both", Literal["per_set", "union"]), ("x", float),
])
def test_coerce_rejects_with_the_knob_name(value, annotation):
    with pytest.raises(ConfigError, match="knob x="):
        coerce("x", value, annotation)


# --- parse (form only), check (the one validator), describe --------------------------------------------

K = Annotated[int, Range(1, 100)]


@pytest.mark.parametrize("value, annotation", [
    (5, K), (True, bool), (0.5, float), ("union", Literal["per_set", "union"]), (("a", "b"), tuple[str, ...]),
    (None, Optional[int]), ("abc", str),
])
def test_parse_leaves_typed_values_alone(value, annotation):
    """Already-resolved knobs go through `parse` unchanged (no second, different coercion)."""
    assert parse("x", value, annotation) == value
    assert type(parse("x", value, annotation)) is type(value)


def test_parse_reads_forms_but_does_not_validate():
    assert parse("k", "1000", K) == 1000  # out of range, but that is `check`'s call
    assert parse("mode", "both", Literal["per_set", "union"]) == "both"
    assert parse("agents", ["a", "b"], tuple[str, ...]) == ("a", "b")  # a manifest's JSON list
    assert parse("n", 3.0, int) == 3 and parse("t", 1, float) == 1.0 and type(parse("t", 1, float)) is float
    assert parse("level", "2", Literal[1, 2]) == 2
    with pytest.raises(ConfigError, match="knob k='five': expected an integer"):
        parse("k", "five", K)


@pytest.mark.parametrize("value, annotation, fragment", [
    (0, K, "knob k=0: expected an integer with 1 <= k <= 100"),
    (101, K, "with 1 <= k <= 100"),
    (True, K, "knob k=True: expected an integer"),
    (3.0, int, "expected an integer"),
    (float("nan"), float, "expected a finite number"),
    (float("inf"), Annotated[float, Range(0.0, 1.0)], "0.0 <= k <= 1.0"),
    (1, bool, "expected a boolean"),
    (True, Literal[1, 2], "expected one of 1, 2"),
    ("5", K, "expected an integer"),
    (("a", "z"), tuple[Literal["a", "b"], ...], "knob k: unknown k item 'z'; expected one of 'a', 'b'"),
    ("a", tuple[str, ...], "expected a comma-separated list"),
])
def test_check_rejects_with_one_line_naming_knob_value_and_rule(value, annotation, fragment):
    with pytest.raises(ConfigError) as error:
        check("k", value, annotation, owner=None)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_check_names_the_owner_and_accepts_fitting_values():
    with pytest.raises(ConfigError, match=r"^RAISF knob relevance='x': expected one of 'a', 'b'$"):
        check("relevance", "x", Literal["a", "b"], owner="RAISF")
    with pytest.raises(ConfigError, match="unknown agent 'critic'"):
        check("agents", ("critic",), tuple[Literal["associate"], ...], owner="ActiveRag")
    assert check("k", 100, K) == 100 and check("k", 1, K) == 1
    assert check("t", 1, float) == 1 and check("x", None, Optional[int]) is None
    assert check("a", ["a"], tuple[Literal["a"], ...]) == ["a"]


def test_describe_and_as_json():
    assert describe(K, "k") == "an integer with 1 <= k <= 100"
    assert describe(Annotated[int, Range(0)], "max_depth") == "an integer with max_depth >= 0"
    assert describe(Optional[int]) == "an integer or none"
    assert as_json({"agents": ("a", "b"), "k": 5, "nested": (("x",),)}) == {"agents": ["a", "b"], "k": 5,
                                                                            "nested": [["x"]]}
