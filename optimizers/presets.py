"""Optimizer presets: a name -> a DSPy 3.4 teleprompter with settings that suit the papers' few-shot setups.

The papers prompt with 3 demonstrations, so every demo-based preset caps the demos per predictor at 3.
`mipro` is MIPROv2 with `auto="light"`; `mipro:medium` and `mipro:heavy` pick the other budgets (as do
`gepa:medium`, `gepa:heavy`). Settings can be overridden per call (`settings={...}` / `--optimizer-setting`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragzoo.errors import ConfigError

THREE_SHOT = 3


@dataclass(frozen=True)
class OptimizerPreset:
    name: str
    teleprompter: str  # class name in dspy.teleprompt ("" = no optimization)
    summary: str
    settings: dict[str, Any] = field(default_factory=dict)  # constructor keyword arguments
    uses_valset: bool = False  # takes the dev split as its own validation set during compile
    uses_metric: bool = True
    variants: tuple[str, ...] = ()  # accepted suffixes after ":" (mipro:light, ...)
    variant_setting: str = ""  # which setting the suffix sets

    def with_variant(self, variant: str | None) -> dict[str, Any]:
        settings = dict(self.settings)
        if variant:
            if variant not in self.variants:
                raise ConfigError(f"optimizer {self.name!r} has no variant {variant!r}; "
                                  f"use one of {', '.join(f'{self.name}:{v}' for v in self.variants) or 'none'}")
            settings[self.variant_setting] = variant
        return settings


PRESETS: dict[str, OptimizerPreset] = {
    preset.name: preset
    for preset in [
        OptimizerPreset("none", "", "no optimization: the program as written, zero-shot", uses_metric=False),
        OptimizerPreset("labeled", "LabeledFewShot", "3 training examples as demos per predictor (no LM calls)",
                        {"k": THREE_SHOT}, uses_metric=False),
        OptimizerPreset("bootstrap", "BootstrapFewShot",
                        "BootstrapFewShot: run the program on training examples, keep up to 3 traces that "
                        "pass the metric as demos (the papers' 3-shot)",
                        {"max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT, "max_rounds": 1}),
        OptimizerPreset("bootstrap-rs", "BootstrapFewShotWithRandomSearch",
                        "bootstrap several demo sets (zero-shot, labeled, unshuffled, random) and keep the best "
                        "on the dev split",
                        {"max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT,
                         "num_candidate_programs": 6}, uses_valset=True),
        OptimizerPreset("optuna", "BootstrapFewShotWithOptuna",
                        "bootstrap demo candidates, pick per-predictor demos with Optuna on the dev split",
                        {"max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT,
                         "num_candidate_programs": 6}, uses_valset=True),
        OptimizerPreset("mipro", "MIPROv2",
                        "MIPROv2: propose instructions and demo sets, Bayesian search on the dev split "
                        "(mipro:light / mipro:medium / mipro:heavy)",
                        {"auto": "light", "max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT},
                        uses_valset=True, variants=("light", "medium", "heavy"), variant_setting="auto"),
        OptimizerPreset("gepa", "GEPA",
                        "GEPA: reflective instruction evolution with the task LM as reflection LM "
                        "(gepa:light / gepa:medium / gepa:heavy)",
                        {"auto": "light"}, uses_valset=True, variants=("light", "medium", "heavy"),
                        variant_setting="auto"),
        OptimizerPreset("simba", "SIMBA",
                        "SIMBA: stochastic mini-batch ascent adding demos and self-reflective rules",
                        {"max_demos": THREE_SHOT, "max_steps": 4, "num_candidates": 4, "bsize": 16}),
        OptimizerPreset("knn", "KNNFewShot",
                        "KNNFewShot: at answer time, bootstrap demos from the 3 training questions nearest to the "
                        "question (MiniLM embeddings)",
                        {"k": THREE_SHOT, "max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT}),
        OptimizerPreset("ensemble", "Ensemble",
                        "bootstrap-rs, then a majority-vote ensemble of its 3 best candidate programs",
                        {"size": 3, "max_bootstrapped_demos": THREE_SHOT, "max_labeled_demos": THREE_SHOT,
                         "num_candidate_programs": 6}, uses_valset=True),
    ]
}


def split_name(name: str) -> tuple[str, str | None]:
    base, _, variant = name.strip().partition(":")
    return base, (variant or None)


def get_preset(name: str) -> tuple[OptimizerPreset, dict[str, Any]]:
    """(preset, its settings with the variant applied) for `bootstrap`, `mipro:medium`, ..."""
    base, variant = split_name(name)
    if base not in PRESETS:
        raise ConfigError(f"unknown optimizer {name!r}; valid optimizers: {', '.join(names())}")
    preset = PRESETS[base]
    return preset, preset.with_variant(variant)


def names() -> list[str]:
    listed = []
    for preset in PRESETS.values():
        listed.append(preset.name)
        listed.extend(f"{preset.name}:{variant}" for variant in preset.variants)
    return listed
