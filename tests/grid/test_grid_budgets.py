"""Grid budgets: `--price`, `--price-per-hour` and `--max-calls` as in `evaluate` (one argument definition),
budgets handed to cells without rounding, an unpriced LM refused once (not once per cell), and a budget whose
cap is never passed."""

from __future__ import annotations

import json
from pathlib import Path

from ragzoo.cli import main
from tests.grid.conftest import stub_lms, write_tiny


def _run_configs(out: Path) -> list[dict]:
    return [json.loads((cell / "run" / "config.json").read_text()) for cell in sorted((out / "cells").iterdir())
            if (cell / "run" / "config.json").is_file()]


def test_grid_takes_evaluates_price_flags_and_hands_a_tiny_budget_to_cells_unrounded(tmp_path, stub_server,
                                                                                     grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    # 1e-7 USD used to reach each cell as --max-cost 0.000000 (refused there); the stub model has no price
    code = main(["sweep", str(grid), "--out", str(out), "--quiet", "--methods", "direct", "--max-cost", "0.0000001",
                 "--price", "0.15,0.60", "--price-per-hour", "0"])
    err = capsys.readouterr().err
    assert code == 3, err
    (config,) = _run_configs(out)
    assert config["max_cost"] == 1e-7 and config["price"] == "0.15,0.60" and config["price_per_hour"] == 0.0
    # a first call costs more than 1e-7 USD: it is refused before it is sent, the cap is never passed
    assert stub_server.requests == 0, err


def test_grid_max_calls_is_a_total_over_the_grid_counted_from_disk(tmp_path, stub_server, grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=3, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet"]
    assert main([*argv, "--max-calls", "4"]) == 3
    assert stub_server.requests == 4  # direct and rag make one call per question: 3 + 1, then the grid stops
    assert "--max-calls" in capsys.readouterr().err
    assert main([*argv, "--max-calls", "5"]) == 3
    assert stub_server.requests == 5  # counted from what the cells on disk used: one more
    assert main(argv) == 0
    assert stub_server.requests == 6


def test_grid_max_cost_on_an_unpriced_lm_is_refused_once_naming_price(tmp_path, stub_server, grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    code = main(["sweep", str(grid), "--out", str(out), "--quiet", "--max-cost", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "--price" in line]
    assert len(lines) == 1 and lines[0].startswith("ragzoo sweep: error:") and "--price-per-hour" in lines[0], err
    assert stub_server.requests == 0 and not (out / "cells").exists()


def test_grid_budget_flags_are_evaluates_own_definitions(capsys):
    for command in (["sweep", "x.toml"], ["reproduce", "x"], ["evaluate"]):
        try:
            main([*command, "--help"])
        except SystemExit:
            pass
    helps = capsys.readouterr().out
    sweep_help, reproduce_help, evaluate_help = helps.split("usage: ragzoo")[1:]
    for flag in ("--price IN,OUT", "--price-per-hour USD", "--max-calls MAX_CALLS", "--max-cost MAX_COST"):
        assert flag in sweep_help and flag in reproduce_help and flag in evaluate_help, flag


def test_a_question_cut_by_max_calls_replays_its_paid_calls_from_the_cache_for_free(tmp_path, stub_server, grid_env,
                                                                                     capsys):
    run = tmp_path / "run"
    argv = ["evaluate", "--method", "self_refine", "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "2",
            "--lm", "openai/stub", "--api-base", f"{stub_server.base_url}/v1", "--out", str(run)]  # cache on
    assert main([*argv, "--max-calls", "3"]) == 3  # two calls a question: the second is cut after its first call
    assert stub_server.requests == 3
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 1
    # its first call is in DSPy's cache: replayed, it spends none of the budget; one call finishes the question
    # (the budget counts the folder's earlier runs: 3 spent, so --max-calls 4 leaves that one call)
    assert main([*argv, "--resume", "--max-calls", "4"]) == 0, capsys.readouterr().err
    assert stub_server.requests == 4
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 2


def test_max_cost_is_never_passed_by_the_last_call(tmp_path, stub_server, grid_env, capsys):
    run = tmp_path / "run"
    code = main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "--split", "dev_first500", "-n", "50",
                 "--lm", "openai/stub", "--api-base", f"{stub_server.base_url}/v1", "--no-cache", "--out", str(run),
                 "--max-cost", "0.0002", "--price", "0.15,0.60"])
    assert code == 3, capsys.readouterr().err
    spent = sum(json.loads(line)["cost"] for line in (run / "predictions.jsonl").read_text().splitlines())
    # a call costs ~$0.00003 here: the budget used to let the call that crossed it go ($0.00023 of 0.0002)
    assert stub_server.requests >= 3 and 0 < spent <= 0.0002


def test_concurrent_async_calls_wait_for_what_is_in_flight_and_never_pass_the_cap(stub_server, grid_env):
    import asyncio

    import dspy

    from ragzoo.lm import make_lm
    from ragzoo.usage import metering

    stub_server.latency = 0.2
    lm = make_lm("openai/stub", api_base=stub_server.base_url + "/v1", cache=False, price="0.15,0.60")
    predict = dspy.Predict("question -> answer")

    async def run():
        with dspy.context(lm=lm), metering() as probe:
            await predict.acall(question="warm")
        with dspy.context(lm=lm), metering(max_cost=3.5 * probe.usage.cost) as meter:
            results = await asyncio.gather(*[predict.acall(question=f"q{i}") for i in range(6)],
                                           return_exceptions=True)
        return probe.usage.cost, meter, results

    one_call, meter, results = asyncio.run(asyncio.wait_for(run(), 30))  # one event loop: waiting must not block it
    assert 1 <= meter.usage.lm_calls <= 3 and meter.budget.spent <= 3.5 * one_call  # all 6 used to be sent
    assert sum(1 for r in results if type(r).__name__ == "BudgetExceeded") == 6 - meter.usage.lm_calls


_CUT = """
[grid]
name = "cut"
n = 3
lms = [{lms}]
scale = 100
main = "iter_retgen"

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]
label = "HotPotQA"

[[methods]]
id = "iter_retgen"
label = "IRG"
"""


def test_the_calls_a_budget_cut_question_paid_count_against_the_grid_s_budget_on_a_rerun(tmp_path, stub_server,
                                                                                        grid_env, capsys):
    """Diff review: the grid counted its cells' records only, not the calls no record holds (a question cut by the
    budget, retried and late calls), so the same --max-calls paid again on a rerun (5 requests under 4)."""
    grid = tmp_path / "cut.toml"
    grid.write_text(_CUT.format(lms=stub_lms(stub_server)), encoding="utf-8")
    argv = ["sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet", "--max-calls", "4"]
    assert main(argv) == 3  # iter_retgen: 3 calls a question; the second question is cut after its first
    assert stub_server.requests == 4
    assert main(argv) == 3
    assert stub_server.requests == 4, capsys.readouterr().err


def test_a_budget_with_a_shared_storage_is_refused_before_anything(tmp_path, capsys):
    """PostgreSQL review: with --storage each worker counted the budget for itself (2 workers, --max-calls 4: 8
    calls; --max-cost 1.0: $1.63)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    for budget in (["--max-calls", "4"], ["--max-cost", "1", "--price", "1,1"]):
        code = main(["sweep", str(grid), "--out", str(tmp_path / "g"), "--storage", f"sqlite:///{tmp_path / 's.db'}",
                     *budget])
        errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # the tiny grid names a
        assert code == 2 and len(errors) == 1 and "with --storage every worker would spend it whole" in errors[0]
    assert not (tmp_path / "g").exists() and not (tmp_path / "s.db").exists()  # method not in ragzoo first


def test_a_resumed_cell_s_earlier_server_time_is_counted_once_against_the_grid_s_budget(tmp_path, stub_server,
                                                                                      grid_env, capsys):
    """Diff review: the grid's spend on disk counted a cell's rented-server time, and the cell's evaluate --resume
    counted it again (only its tokens were added back): $40 of $100 left read as spent."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--methods", "direct"]
    assert main([*argv, "--price-per-hour", "36"]) == 0, capsys.readouterr().err
    (cell,) = (out / "cells").iterdir()
    ledger = cell / "run" / "extra_usage.jsonl"
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [line["why"] for line in lines] == ["server"]
    ledger.write_text(json.dumps({**lines[0], "server_cost": 60.0}) + "\n")  # as if the server ran for an hour
    assert main([*argv, "-n", "4", "--price-per-hour", "36", "--max-cost", "100"]) == 0, capsys.readouterr().err
    assert json.loads((cell / "run" / "summary.json").read_text())["n"] == 4


def test_a_compile_its_budget_stopped_is_continued_never_evaluated_as_whole(tmp_path, stub_server, grid_env, capsys):
    """Grid review: a compile cut by the grid's --max-calls saved what it had (marked stopped); the next sweep took
    that artifact for a finished one and evaluated it, its checkpoint never used. It is continued from the
    checkpoint, its earlier calls counted once in the grid's budget, and only a whole program is evaluated."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--methods", "direct", "--optimizer", "bootstrap"]
    assert main([*argv, "--max-calls", "3"]) == 3
    (cell,) = (out / "cells").iterdir()

    def manifest() -> dict:
        return json.loads((cell / "artifact" / "manifest.json").read_text())

    assert manifest()["stopped"] and (cell / "artifact.checkpoint").is_dir() and not (cell / "run").exists()
    assert main([*argv, "--max-calls", "40"]) == 3  # 37 more: the compile is cut again, still not evaluated
    assert stub_server.requests == 40 and manifest()["stopped"] and not (cell / "run").exists()
    assert manifest()["usage"]["lm_calls"] == 40  # the earlier runs' calls counted in, once
    assert main(argv) == 0, capsys.readouterr().err
    whole = manifest()
    assert not whole.get("stopped") and any("resumed" in note for note in whole["notes"])
    # every compile call paid once, across the three runs, and two evaluated questions
    assert whole["usage"]["lm_calls"] + 2 == stub_server.requests
    assert len((cell / "run" / "predictions.jsonl").read_text().splitlines()) == 2


def test_a_cell_left_at_a_smaller_n_is_partial_against_the_n_the_grid_asks(tmp_path, stub_server, grid_env):
    """Grid review: the table took "asked" from each cell's own run, so after `-n 20` stopped by a budget before it
    reached a cell, that cell still read "10/10", unflagged, and entered the paired tests."""
    from ragzoo.grid import load_grid
    from ragzoo.grid.table import build

    grid_file = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    assert main(["sweep", str(grid_file), "--out", str(out), "--quiet"]) == 0
    assert build(load_grid(grid_file), out)["comparisons"]  # whole at n = 2: rag against direct
    grid = load_grid(grid_file)
    grid.n = 3  # the grid now asks 3 questions of each cell
    table = build(grid, out)
    cells = [row["cells"]["HotPotQA"] for row in table["rows"] if row["method"] != "future_method"]
    assert [(c["n"], c["n_asked"], c["status"]) for c in cells] == [(2, 3, "partial 2/3")] * 2
    assert table["comparisons"] == []  # partial cells are set beside no other row
    grid.n = None  # the whole split (diff review: the run's own n was taken as asked, and the cells read done)
    table = build(grid, out)
    cells = [row["cells"]["HotPotQA"] for row in table["rows"] if row["method"] != "future_method"]
    assert [(c["n"], c["n_asked"], c["status"]) for c in cells] == [(2, 500, "partial 2/500")] * 2
    # a run made over the whole split (no -n) asked what its summary expected, whatever the split holds now
    # (review: the demo slice's whole-split runs read partial once the full data was there)
    for cell_dir in (out / "cells").iterdir():
        for name, change in (("config.json", {"n": None}), ("summary.json", {"n_expected": 2})):
            path = cell_dir / "run" / name
            if path.is_file():
                path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    cells = [row["cells"]["HotPotQA"] for row in build(grid, out)["rows"] if row["method"] != "future_method"]
    assert [(c["n"], c["n_asked"], c["status"]) for c in cells] == [(2, 2, "done")] * 2
