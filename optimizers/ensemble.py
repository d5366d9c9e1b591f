"""An ensemble of compiled variants of one method, answering by majority vote.

DSPy's `Ensemble` teleprompter returns a program class defined inside `compile`, which cannot be rebuilt when
an artifact is loaded; this module-level class does the same job (every member answers, the most frequent
normalised answer wins, ties go to the earliest member) and saves and loads like any DSPy program: its state
is the members' states, `programs[i].<predictor>`.
"""

from __future__ import annotations

from collections import Counter

import dspy


def _normalise(answer) -> str:
    from dspy.evaluate.metrics import normalize_text

    return normalize_text(str(answer)) if answer is not None else ""


class EnsembleProgram(dspy.Module):
    """Run every member and return the prediction of the member whose answer has the most votes."""

    def __init__(self, programs: list[dspy.Module]):
        super().__init__()
        if not programs:
            raise ValueError("an ensemble needs at least one program")
        self.programs = list(programs)
        for program in self.programs:
            # DSPy hides the predictors of a sub-module marked compiled (named_parameters skips it), so its
            # demos would be neither optimized further nor saved: the ensemble is the compiled unit.
            program._compiled = False

    @property
    def retriever(self):
        return getattr(self.programs[0], "retriever", None)

    def forward(self, **inputs) -> dspy.Prediction:
        predictions = [program(**inputs) for program in self.programs]
        votes = Counter(_normalise(p.get("answer")) for p in predictions)
        winner = max(votes.items(), key=lambda item: item[1])[0] if votes else ""
        best_count = votes[winner]
        # max() keeps the first of equal counts in insertion order = member order
        chosen = next(p for p in predictions if votes[_normalise(p.get("answer"))] == best_count)
        result = dspy.Prediction(**dict(chosen.items()))
        result["votes"] = [p.get("answer") for p in predictions]
        return result
