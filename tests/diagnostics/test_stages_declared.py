"""Every registered method declares its stages, and every predictor it has belongs to one of them, so LM calls
per stage add up to the question's calls."""

from __future__ import annotations

import pytest

from ragzoo import programs
from ragzoo.diagnostics import predictor_stage
from ragzoo.testing import StaticRetriever, make_passages

VARIANTS = {"activerag": [{"agents": ("anchoring", "associate", "logician", "cognition")}, {"knowledge": "notes"},
                          {"knowledge": "passages"}]}


@pytest.mark.parametrize("method_id", sorted(programs.methods()))
def test_each_predictor_belongs_to_a_declared_stage(method_id):
    for knobs in [{}, *VARIANTS.get(method_id, [])]:
        program = programs.get(method_id, retriever=StaticRetriever(make_passages(3)), **knobs)
        declared = type(program).STAGES
        assert declared, f"{method_id} declares no stages"
        names = [name.removesuffix(".predict") for name, _ in program.named_predictors()]
        unstaged = [name for name in names if predictor_stage(name, declared) is None
                    and not (method_id == "skr" and name == "memory")]  # SKR's memory is never called
        assert not unstaged, f"{method_id} {knobs}: predictors outside every stage: {unstaged}"
