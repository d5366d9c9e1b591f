"""One parser of `--price IN,OUT` (ragzoo.config.parse_price): a flag, a config file's value and make_lm(price=...)
are read and refused by the same rule, with the same one-line message."""

from __future__ import annotations

import pytest

from ragzoo.config import check_number
from ragzoo.errors import ConfigError
from ragzoo.lm import make_lm, parse_price


@pytest.mark.parametrize("bad", ["inf,1", "1e400,1", "nan,1", "-1,2", "cheap", "1,2,3", True, (1, float("inf"))])
def test_make_lm_refuses_what_the_flag_refuses_with_the_same_line(bad):
    with pytest.raises(ConfigError) as flag:
        check_number("price", bad)
    with pytest.raises(ConfigError) as lm:
        make_lm("openai/x", api_base="http://127.0.0.1:9/v1", price=bad)
    assert str(lm.value) == str(flag.value)


@pytest.mark.parametrize("given, per_token", [
    ("0.15,0.60", (0.15e-6, 0.60e-6)), ("2", (2e-6, 2e-6)), ("1/1M,4/1M", (1e-6, 4e-6)), ((1, 2), (1e-6, 2e-6)),
    ("0,0", (0.0, 0.0)), (None, None), ("", None),
])
def test_a_price_is_read_once_per_million_tokens(given, per_token):
    assert parse_price(given) == (None if per_token is None else pytest.approx(per_token))
    if per_token is not None:
        assert check_number("price", given) == given
