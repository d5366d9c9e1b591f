"""`artifacts.recorded_adapter` reads only what a manifest really records: a `max_reasks` that is not a count
(a boolean, a string: a hand-edited manifest) is not followed; the program runs with the default re-asks (a
mutant accepting them survived test_evaluate/ask_artifact_adapter.py)."""

from __future__ import annotations

import pytest

from ragzoo.artifacts import recorded_adapter


@pytest.mark.parametrize("reasks", [True, False, "2", 1.5, None, [1]])
def test_a_max_reasks_that_is_not_a_count_is_not_followed(reasks):
    assert recorded_adapter({"adapter": "json", "max_reasks": reasks}) == ("json", None)


def test_what_a_manifest_records_is_followed():
    assert recorded_adapter({"adapter": "chat", "max_reasks": 0}) == ("chat", 0)
    assert recorded_adapter({"adapter": {"name": "xml"}, "max_reasks": 3}) == ("xml", 3)
    assert recorded_adapter({}) == (None, None)
