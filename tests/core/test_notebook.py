"""notebooks/explore.ipynb runs top to bottom offline and shows what it explains; the notebook itself reads as a
tutorial, so the checks live here."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore.ipynb"


def test_explore_notebook_executes_and_shows_each_step(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    text = "".join(out.get("text", "") for out in outputs)
    assert not [out for out in outputs if out.get("output_type") == "error"]
    assert "warning" not in text.lower()  # a tutorial shows no warnings
    assert "blendfilter  LM calls=13  retrievals=3" in text
    assert "demos: 3" in text and "same answer after loading: True | demos kept: 3" in text
    assert "compiled   n=6" in text and "['config.json', 'predictions.jsonl', 'summary.json']" in text
    # the scripted LM ignores demos: the paired comparison must find exactly no difference
    assert "A − B = +0.000 [95% CI +0.000, +0.000]" in text and "exact: p = 1.0000" in text
    assert any("image/png" in out.get("data", {}) for out in outputs)  # the report's plot
    table = "".join(out.get("data", {}).get("text/markdown", "") for out in outputs)
    assert "| BlendFilter | n/a (dry-run) |" in table and "13.00" in table
    assert "total" in text and "150" in text  # the grid's dry-run price: 3 methods x 10 questions, 150 calls
    assert not any(cell.cell_type == "code" and "assert " in cell.source for cell in notebook.cells)
    # issue 21: evaluated on questions the compile never saw; no stray statement or value in the output
    assert text.count("seen while compiling=0") == 2 and "seen while compiling=" in text
    results = [out for out in outputs if out.get("output_type") == "execute_result"]
    assert all("text/plain" not in out.get("data", {}) or out["data"].get("image/png") or out["data"].get(
        "text/markdown") for out in results), results  # no bare `0` (a command's exit code) shown
    assert not any(line.strip().startswith("demos = result") for cell in notebook.cells
                   for line in cell.source.splitlines())
