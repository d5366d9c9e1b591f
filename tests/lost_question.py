"""A question that ends with no record (an internal error raised past `runs.run_example`, as a killed worker's
question), for the tests of what a run, a grid and MLflow say of it."""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def first_question_lost(monkeypatch) -> Iterator[list]:
    """Within the block, the first question `evaluate` runs raises "an internal error"; yields the positions lost."""
    from ragzoo import runs

    real, lost = runs.run_example, []

    def loses_one(program, example, position, *args, **kwargs):
        if not lost:
            lost.append(position)
            raise RuntimeError("an internal error")
        return real(program, example, position, *args, **kwargs)

    monkeypatch.setattr(runs, "run_example", loses_one)
    try:
        yield lost
    finally:
        monkeypatch.setattr(runs, "run_example", real)
