from typing import Literal, Optional

import pytest

from ragzoo.errors import ConfigError
from ragzoo.knobs import coerce, parse_knob_args


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
    assert coerce("x", value, annotation, None) == expected


@pytest.mark.parametrize("value, annotation", [
    ("five", int), ("1.5", int), (True, int), ("maybe", bool), ("both", Literal["per_set", "union"]), ("x", float),
])
def test_coerce_rejects_with_the_knob_name(value, annotation):
    with pytest.raises(ConfigError, match="knob x="):
        coerce("x", value, annotation, None)
