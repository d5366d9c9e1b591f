"""Grid files: parsing, cells, knobs, bundled grids (one per paper, with the paper's numbers and setting)."""

import pytest

from ragzoo.errors import ConfigError
from ragzoo.grid import bundled_grids, load_grid, parse_grid


def test_cells_are_the_product_and_knobs_merge(tmp_path):
    grid = parse_grid({
        "grid": {"name": "g", "lms": ["dry-run", {"spec": "openai/x", "api_base": "http://127.0.0.1:1/v1"}]},
        "compile": {"optimizers": ["none", "labeled"]},
        "datasets": [{"name": "hotpotqa", "split": "dev_first500", "metrics": ["em"], "knobs": {"k": 7}},
                     {"name": "strategyqa", "label": "S", "metrics": ["acc"]}],
        "methods": [{"id": "direct", "dataset_knobs": {"S": {"answer_mode": "yes_no"}}},
                    {"id": "rag", "knobs": {"k": 3}, "columns": ["hotpotqa"]}],
    })
    cells = grid.cells()
    assert len(cells) == 2 * (2 + 1) * 2  # lms x (direct on 2 columns + rag on 1) x optimizers
    assert len({c.key for c in cells}) == len(cells)
    by = {(c.method.id, c.dataset.label, c.optimizer, c.lm.spec): c for c in cells}
    assert by[("rag", "hotpotqa", "none", "dry-run")].knobs == {"k": 7}  # the column's k wins
    assert by[("direct", "hotpotqa", "none", "dry-run")].knobs == {}  # direct has no k: the column's k is not given
    assert by[("direct", "S", "none", "dry-run")].knobs == {"answer_mode": "yes_no"}


def test_bad_grids_are_refused():
    with pytest.raises(ConfigError, match="at least one"):
        parse_grid({"grid": {"name": "x"}, "methods": [{"id": "rag"}]})
    with pytest.raises(ConfigError, match="unique"):
        parse_grid({"datasets": [{"name": "hotpotqa"}], "methods": [{"id": "rag"}, {"id": "rag"}]})
    with pytest.raises(ConfigError, match="main"):
        parse_grid({"grid": {"main": "nope"}, "datasets": [{"name": "hotpotqa"}], "methods": [{"id": "rag"}]})


def test_every_paper_has_a_bundled_grid_with_its_numbers_and_setting():
    from ragzoo import data, programs

    grids = bundled_grids()
    assert {"blendfilter-table2", "postfusion-table2", "filco-table4", "activerag-table2", "raisf-table1"} <= set(grids)
    for name, path in grids.items():
        grid = load_grid(path)
        assert grid.paper["table"].startswith("Table") and grid.paper["setting"] and grid.paper["differences"]
        labels = {d.label for d in grid.datasets}
        for method in grid.methods:
            assert method.paper, f"{name}: {method.label} carries no paper number"
            assert set(method.paper) <= labels, f"{name}: {method.label} has numbers for unknown columns"
        for dataset in grid.datasets:
            assert dataset.split in data.splits(dataset.name), f"{name}: no split {dataset.split} of {dataset.name}"
        # the paper's proposed method is runnable in every grid
        main = next(m for m in grid.methods if grid.main in (m.id, m.label))
        assert main.id in programs.methods()


def test_paper_numbers_are_the_papers():
    """Spot checks against the papers' tables (as recorded in the seed notes)."""
    bf = {m.label: m for m in load_grid(bundled_grids()["blendfilter-table2"]).methods}
    assert bf["BlendFilter"].paper["HotPotQA"] == {"em": 0.508, "f1": 0.624}
    assert bf["ITER-RETGEN"].paper["StrategyQA"] == {"acc": 0.692}
    ar = {m.label: m for m in load_grid(bundled_grids()["activerag-table2"]).methods}
    assert ar["ActiveRAG w. Associate"].paper["WebQ@10"] == {"contains_reply": 61.4}
    ra = {m.label: m for m in load_grid(bundled_grids()["raisf-table1"]).methods}
    assert ra["RA-ISF"].paper["StrategyQA"] == {"acc": 75.9}
