"""A grid's per-question deadline and per-request timeout (`[grid] deadline / timeout`, `sweep --deadline/--timeout`):
handed to every cell's evaluation (and the timeout to its compile), so a grid at an LM that stops answering records
timeouts after seconds, not after evaluate's 600 s default per question (found by review: a grid had no way to set
either)."""

from __future__ import annotations

import json
import time

from ragzoo.cli import main
from ragzoo.grid.runner import compile_argv, evaluate_argv
from ragzoo.grid.spec import load_grid
from tests.grid.conftest import stub_lms, write_tiny


def test_the_grid_s_deadline_and_timeout_reach_each_cell_s_commands(tmp_path):
    grid_file = write_tiny(tmp_path / "tiny.toml", n=2)
    grid_file.write_text(grid_file.read_text().replace("n = 2\n", "n = 2\ndeadline = 7.5\ntimeout = 30\n", 1))
    grid = load_grid(grid_file)
    assert (grid.deadline, grid.timeout) == (7.5, 30.0)
    cell = grid.cells()[0]
    argv = evaluate_argv(cell, tmp_path / "run", None, 2, False)
    assert argv[argv.index("--deadline") + 1] == "7.5" and argv[argv.index("--timeout") + 1] == "30"
    built = compile_argv(cell, tmp_path / "artifact")
    assert "--deadline" not in built and built[built.index("--timeout") + 1] == "30"
    plain = load_grid(write_tiny(tmp_path / "plain.toml", n=2)).cells()[0]
    assert "--deadline" not in evaluate_argv(plain, tmp_path / "run", None, 2, False)  # evaluate's own default


def test_a_bad_grid_deadline_is_one_line_before_any_cell(tmp_path, capsys):
    grid_file = write_tiny(tmp_path / "tiny.toml", n=2)
    grid_file.write_text(grid_file.read_text().replace("n = 2\n", "n = 2\ndeadline = -1\n", 1))
    assert main(["sweep", str(grid_file), "--out", str(tmp_path / "g"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[grid] deadline -1: expected a finite number with deadline > 0" in err, err


def test_sweep_deadline_records_timeouts_at_a_hung_lm_within_seconds(tmp_path, stub_server, grid_env, capsys,
                                                                   monkeypatch):
    import ragzoo.runs

    monkeypatch.setattr(ragzoo.runs, "LATE_GRACE", 0.2)  # the hung calls never return within the test
    grid_file = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    stub_server.latency = 600.0  # an LM that stopped answering
    out = tmp_path / "g"
    started = time.monotonic()
    main(["sweep", str(grid_file), "--out", str(out), "--quiet", "--methods", "Direct", "--deadline", "1",
          "--timeout", "5"])
    assert time.monotonic() - started < 60, capsys.readouterr().err
    run = next((out / "cells").iterdir()) / "run"
    config = json.loads((run / "config.json").read_text())
    assert (config["deadline"], config["timeout"]) == (1.0, 5.0)
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(record["error"]["kind"] == "timeout" for record in records), records


def test_the_grid_table_says_spent_and_uncached_cost_per_question(tmp_path, stub_server, grid_env, capsys):
    """A row answered from DSPy's cache spent $0 a question; beside it, what the same calls cost uncached, the
    figure rows are compared by (found by review: a plain "$/q" of 0.00000 beside 0.00038 for the same calls)."""
    lms = f'{{ spec = "openai/stub", api_base = "{stub_server.base_url}/v1" }}'  # the cache on
    first = write_tiny(tmp_path / "first.toml", n=2, lms=lms)
    assert main(["sweep", str(first), "--out", str(tmp_path / "g1"), "--quiet", "--methods", "Direct",
                 "--price", "1,2"]) in (0, 4)
    assert main(["sweep", str(first), "--out", str(tmp_path / "g2"), "--quiet", "--methods", "Direct",
                 "--price", "1,2"]) in (0, 4)  # every call of g2 served from the cache g1 filled
    results = json.loads((tmp_path / "g2" / "results.json").read_text())
    entry = next(iter(results["rows"][0]["cells"].values()))
    assert entry["cost_per_question"] == 0 and entry["cost_per_question_uncached"] > 0
    fresh = next(iter(json.loads((tmp_path / "g1" / "results.json").read_text())["rows"][0]["cells"].values()))
    assert abs(entry["cost_per_question_uncached"] - fresh["cost_per_question"]) < 1e-9
    markdown = (tmp_path / "g2" / "results.md").read_text()
    assert "| spent $/q | uncached $/q |" in markdown and f"| 0.00000 | {fresh['cost_per_question']:.5f} |" in markdown
    assert "scored 0 in every mean" in markdown
    header = (tmp_path / "g2" / "results.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("cost_per_question") + 1] == "cost_per_question_uncached"
