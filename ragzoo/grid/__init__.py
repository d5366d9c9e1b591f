"""Grids of runs: methods (with knobs) x datasets/splits x optimizers x LMs, each cell an ordinary compile +
evaluate run directory; priced before running, resumable, shareable between workers through an Optuna
storage, tabulated as "ours [95% CI] | paper | delta". Bundled grids (one per main results table of each paper)
live in `ragzoo/grid/grids/*.toml`; `ragzoo reproduce --list` lists them."""

from ragzoo.grid.spec import Cell, Grid, bundled_grids, load_grid, parse_grid

__all__ = ["Cell", "Grid", "bundled_grids", "load_grid", "parse_grid"]
