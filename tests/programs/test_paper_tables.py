"""docs/paper_tables.md cannot drift from the reproduce presets (ragzoo/grid/grids/*.toml) or from the code:

- each preset is named in its paper's section by a `Preset:` line that states its datasets and metrics, as
  the preset has them (the expected line is in the failure message);
- every row of every preset is either in its paper's section, run by the same method id with the same knobs
  on each of its columns (the column's knobs included; a knob a row does not write is the method's default;
  a row's knob span that names no method, "any of the above `--knob gold_passage=true`", applies to the
  section's other rows), or, when ragzoo does not have the method, listed there as not implemented, with
  the reason;
- every `method --knob name=value` the doc writes is a registered method id and a valid knob value.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragzoo import programs
from ragzoo.grid import bundled_grids, load_grid

DOC = Path(__file__).resolve().parents[2] / "docs" / "paper_tables.md"
ARXIV = re.compile(r"arXiv (\d{4}\.\d{4,5})")
GRIDS = sorted(bundled_grids())


def sections() -> dict[str, tuple[str, list[str]]]:
    """arXiv id -> (the section's text, its table rows' cells), for each `## ` section naming a paper."""
    found: dict[str, tuple[str, list[list[str]]]] = {}
    for block in DOC.read_text(encoding="utf-8").split("\n## ")[1:]:
        match = ARXIV.search(block.splitlines()[0])
        if match:
            rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
                    for line in block.splitlines() if line.startswith("| ") and not line.startswith("| paper row")]
            found[match.group(1)] = (block, rows)
    return found


def grid_arxiv(grid) -> str:
    return ARXIV.search(grid.paper["citation"]).group(1)


def preset_line(grid) -> str:
    """`Preset: `ragzoo reproduce NAME` (columns: metrics; ...)`, columns with the same metrics grouped."""
    groups: list[tuple[list[str], tuple]] = []
    for dataset in grid.datasets:
        if groups and groups[-1][1] == tuple(dataset.metrics):
            groups[-1][0].append(dataset.label)
        else:
            groups.append(([dataset.label], tuple(dataset.metrics)))
    columns = "; ".join(f"{', '.join(labels)}: {', '.join(metrics)}" for labels, metrics in groups)
    return f"Preset: `ragzoo reproduce {grid.name}` ({columns})"


def modifiers_in(cell: str) -> list[dict[str, list[str]]]:
    """Knob spans that name no method (`any of the above `--knob gold_passage=true``, `same ids `--knob
    answer_mode=yes_no``): they apply to the section's other rows."""
    found = []
    for span in re.findall(r"`([^`]+)`", cell):
        if span.split()[0] == "--knob":
            found.append({name: value.split("|") for name, value in re.findall(r"--knob\s+(\w+)=(\S+)", span)})
    return found


def runs_in(cell: str) -> list[tuple[str, dict[str, list[str]]]]:
    """Every `method --knob name=a|b ...` span of a row's method column: (method id, {knob: [values]})."""
    runs = []
    for span in re.findall(r"`([^`]+)`", cell):
        words = span.split()
        if not words or words[0] not in programs.methods():
            continue
        knobs = {}
        for name, value in re.findall(r"--knob\s+(\w+)=(\S+)", span):
            knobs[name] = value.split("|")
        runs.append((words[0], knobs))
    return runs


def resolved(method: str, knobs: dict) -> dict:
    return programs.resolve_knobs(method, {name: value if isinstance(value, str) else
                                           (str(value).lower() if isinstance(value, bool) else value)
                                           for name, value in knobs.items()})


def matches(method: str, preset_knobs: dict, row_knobs: dict[str, list[str]]) -> bool:
    """The row runs the preset's configuration: every knob's preset value is one the row allows (a knob
    neither writes is the default on both sides)."""
    wanted = resolved(method, preset_knobs)
    choices = [resolved(method, {name: value for name, value in zip(row_knobs, combo)})
               for combo in _product(list(row_knobs.values()))]
    return any(choice == wanted for choice in choices)


def _product(lists):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for rest in _product(lists[1:]):
            yield (head, *rest)


def test_every_preset_has_its_paper_section_and_a_preset_line_with_its_datasets_and_metrics():
    found = sections()
    for name in GRIDS:
        grid = load_grid(bundled_grids()[name])
        arxiv = grid_arxiv(grid)
        assert arxiv in found, f"docs/paper_tables.md has no section for {grid.paper['citation']} ({name})"
        text = found[arxiv][0]
        assert preset_line(grid) in text.splitlines(), \
            f"section {arxiv} must carry this line, as the preset says:\n{preset_line(grid)}"
    named = re.findall(r"^Preset: `ragzoo reproduce ([\w.-]+)`", DOC.read_text(encoding="utf-8"), re.M)
    assert sorted(named) == GRIDS  # no line names a preset that is gone


@pytest.mark.parametrize("name", GRIDS)
def test_every_preset_row_is_a_doc_row_with_the_same_method_and_knobs_or_listed_as_not_implemented(name):
    grid = load_grid(bundled_grids()[name])
    block, rows = sections()[grid_arxiv(grid)]
    modifiers = [{}] + [m for row in rows if len(row) > 1 for m in modifiers_in(row[1])]
    cells = {}
    for cell in grid.cells():  # each column a method runs on, with the knobs the column adds
        cells.setdefault((cell.method.label, tuple(sorted(map(str, cell.knobs.items())))), (cell.method, cell))
    for method, cell in cells.values():
        if method.id not in programs.methods():
            # not reproducible here: the section says so, with the reason
            word = method.label.split(" (")[0].split()[0]
            listed = [row for row in rows if word in row[0] and len(row) > 1 and "not implemented" in row[1]]
            assert listed, f"{name}: row {method.label!r} ({method.id}) is not listed as not implemented"
            assert re.search(r"not implemented\W+\w+", listed[0][1]), f"{name}: {method.label!r} gives no reason"
            continue
        runs = [knobs for row in rows if len(row) > 1 for run_id, knobs in runs_in(row[1]) if run_id == method.id]
        assert runs, f"{name}: no row of its section runs `{method.id}` ({method.label})"
        assert any(matches(method.id, cell.knobs, {**knobs, **modifier}) for knobs in runs for modifier in modifiers), \
            f"{name}: no row runs `{method.id}` with the knobs {cell.knobs} of its {cell.dataset.label} column " \
            f"({method.label}); rows: {runs}"


def test_every_method_and_knob_the_doc_writes_exists_and_is_valid():
    written = 0
    for _, rows in sections().values():
        for row in rows:
            for method, knobs in runs_in(row[1] if len(row) > 1 else ""):
                for name, values in knobs.items():
                    for value in values:
                        programs.resolve_knobs(method, {name: value})  # raises on an unknown knob or value
                        written += 1
    assert written > 20


def test_the_checks_catch_drift():
    """The matcher is not vacuous: a knob the row does not write is the default, and a different value fails."""
    assert matches("filco", {"k": 5, "context": "full"}, {"k": ["5"], "context": ["full"]})
    assert not matches("filco", {"k": 5, "context": "silver", "measure": "strinc"}, {"k": ["5"], "context": ["silver"]})
    assert matches("rag", {}, {"k": ["5", "10"]}) and not matches("rag", {"k": 3}, {"k": ["5", "10"]})
    assert runs_in("`skr`, compiled: `--optimizer bootstrap` or `labeled`") == [("skr", {})]
