"""`ragzoo report --plot` (issue 21): runs at (nearly) the same point get point labels that do not overlap."""

from __future__ import annotations

import json
from pathlib import Path

from ragzoo.cli import main


def _run(path: Path, *, knobs: dict, em: list[float]) -> str:
    path.mkdir(parents=True)
    config = {"method": "rag", "knobs": knobs, "metrics": ["em"], "n": len(em), "dataset": "hotpotqa",
              "split": "dev", "lm": {"model": "openai/stub", "dry_run": False}}
    (path / "config.json").write_text(json.dumps(config))
    lines = [{"id": str(i), "question": f"q{i}", "gold": ["a"], "prediction": "a", "metrics": {"em": score},
              "lm_calls": 1, "prompt_tokens": 10, "completion_tokens": 2, "cost": 0.001, "latency": 0.5,
              "error": None} for i, score in enumerate(em)]
    (path / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (path / "summary.json").write_text(json.dumps({"n": len(em), "n_expected": len(em), "complete": True}))
    return str(path)


def test_point_labels_of_runs_on_the_same_spot_do_not_overlap(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    boxes = []
    original = matplotlib.figure.Figure.savefig

    def spy(self, *args, **kwargs):
        renderer = self.canvas.get_renderer()
        for axes in self.axes:
            boxes.extend((text.get_text(), text.get_window_extent(renderer)) for text in axes.texts)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    runs = [_run(tmp_path / f"r{k}", knobs={"k": k}, em=[1.0, 0.0] * 5) for k in (3, 5, 10)]  # one spot, three runs
    assert main(["report", *runs, "--plot", str(tmp_path / "p.png")]) == 0
    assert sorted(label for label, _ in boxes) == ["rag k=10", "rag k=3", "rag k=5"]
    overlapping = [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]
    assert not overlapping
