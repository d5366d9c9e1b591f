"""Optimizers: presets of DSPy 3.4's teleprompters, compilation with usage per stage and budgets (metered by
`ragzoo.usage`), and a knob search. Metrics by name or callable are `ragzoo.metrics.scoring`.

    from ragzoo.optimizers import compile_program, presets
    result = compile_program(program, trainset=train, valset=dev, optimizer="bootstrap", metric="em")
    result.program, result.score, result.stages  # compiled program, dev score, usage per stage

Presets: none, labeled, bootstrap (3 demos, the papers' 3-shot), bootstrap-rs, optuna, mipro (mipro:light /
mipro:medium / mipro:heavy), gepa, simba, knn, ensemble. See `ragzoo optimizers`.
"""

from __future__ import annotations

from ragzoo.optimizers.presets import PRESETS, OptimizerPreset, get_preset, names

__all__ = ["PRESETS", "OptimizerPreset", "compile_program", "get_preset", "names", "presets", "safe_metric",
           "search_knobs"]


def presets() -> dict[str, OptimizerPreset]:
    return dict(PRESETS)


def __getattr__(name: str):
    # DSPy-heavy parts load on first use so listing presets stays fast
    if name in ("compile_program", "CompileResult", "score_program"):
        from ragzoo.optimizers import compiler

        return getattr(compiler, name)
    if name in ("safe_metric", "resolve_metric", "SafeMetric"):
        from ragzoo.metrics import scoring

        return getattr(scoring, name)
    if name in ("search_knobs", "KnobSearchResult"):
        from ragzoo.optimizers import knob_search

        return getattr(knob_search, name)
    raise AttributeError(f"module 'ragzoo.optimizers' has no attribute {name!r}")
