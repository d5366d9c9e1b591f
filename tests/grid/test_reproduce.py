"""`ragzoo reproduce`: the bundled grids list, and each runs end to end offline against the stub LM server over
loopback (first column, n = 1, uncompiled), its table carrying the paper's numbers."""

import json

import pytest

from ragzoo.cli import main
from ragzoo.grid import bundled_grids, load_grid

GRIDS = sorted(bundled_grids())


def test_list_shows_a_grid_per_paper_and_what_is_not_runnable(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("blendfilter-table2", "postfusion-table2", "filco-table4", "activerag-table2", "raisf-table1"):
        assert name in out
    from ragzoo import programs

    registered = set(programs.methods())
    labels = {m.label: m.id for path in bundled_grids().values() for m in load_grid(path).methods}
    listed = [label.strip() for line in out.splitlines() if "not yet runnable:" in line
              for label in line.split("not yet runnable:")[1].split(", ")]
    assert listed and all(labels[label] not in registered for label in listed)
    assert not [label for label, method in labels.items() if method not in registered and label not in listed]


def test_reproduce_needs_an_lm(capsys):
    assert main(["reproduce", "blendfilter-table2"]) != 0
    assert "--lm" in capsys.readouterr().err


@pytest.mark.parametrize("name", GRIDS)
def test_bundled_grid_runs_end_to_end_on_the_stub_server(name, tmp_path, stub_server, grid_env, capsys):
    grid = load_grid(bundled_grids()[name])
    first = grid.datasets[0].label
    out = tmp_path / name
    code = main(["reproduce", name, "--lm", "openai/stub", "--api-base", f"{stub_server.base_url}/v1", "--n", "1",
                 "--optimizer", "none", "--datasets", first, "--out", str(out), "--quiet", "--no-cache"])
    assert code == 0, capsys.readouterr().err[-3000:]
    table = json.loads((out / "results.json").read_text())
    ran = [row for row in table["rows"] if row["cells"].get(first, {}).get("n") == 1]
    assert ran and stub_server.requests >= len(ran)
    for row in ran:
        entry = row["cells"][first]
        method = next(m for m in grid.methods if m.label == row["label"])
        assert entry["paper"] == method.paper.get(first, {})
        for metric in grid.datasets[0].metrics:
            assert metric in entry["metrics"]  # a real (stub) LM: every metric is scored, with its CI
    md = (out / "results.md").read_text()
    assert grid.paper["table"] in md and "differs:" in md
