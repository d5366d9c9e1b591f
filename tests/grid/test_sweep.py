"""`ragzoo sweep`: cells as ordinary run directories, the table, resume untouched, the dry-run price, a SIGKILL
mid-grid resumed with no example evaluated twice (counted at the stub LM server), two workers sharing one
Optuna storage (each cell done once, the same table as one worker)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ragzoo.cli import main
from tests.grid.conftest import ragzoo_argv, stub_lms, write_tiny


def _predictions(out: Path) -> dict[str, list[str]]:
    return {cell.name: [json.loads(line)["id"] for line in (cell / "run" / "predictions.jsonl").read_text().splitlines()]
            for cell in sorted((out / "cells").iterdir()) if (cell / "run" / "predictions.jsonl").is_file()}


def test_sweep_writes_cells_and_table_and_a_rerun_touches_nothing(tmp_path, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet"]) == 0
    cells = sorted((out / "cells").iterdir())
    assert len(cells) == 2  # react is not a ragzoo method: listed, not run
    for cell in cells:
        summary = json.loads((cell / "run" / "summary.json").read_text())
        assert summary["n"] == 2 and summary["complete"]
    text = capsys.readouterr()
    assert "Future" in text.err and "not yet runnable" in text.err
    md = (out / "results.md").read_text()
    assert "| Future | not yet runnable | 36.0 |" in md and "n/a (dry-run)" in md and "RAG (k=2)" in md
    table = json.loads((out / "results.json").read_text())
    assert [row["row"] for row in table["rows"]] == ["Direct", "RAG", "Future"]
    assert (out / "results.csv").read_text().count("\n") == 1 + 3 * 2
    stamps = {c.name: (c / "run" / "predictions.jsonl").stat().st_mtime_ns for c in cells}
    assert main(["sweep", str(grid), "--out", str(out), "--quiet"]) == 0
    assert stamps == {c.name: (c / "run" / "predictions.jsonl").stat().st_mtime_ns for c in cells}
    # a cell is an ordinary run directory: report reads it
    assert main(["report", str(cells[0] / "run")]) == 0


def test_compiled_cells_evaluate_their_artifact(tmp_path):
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--optimizer", "labeled",
                 "--methods", "rag"]) == 0
    (cell,) = (out / "cells").iterdir()
    manifest = json.loads((cell / "artifact" / "manifest.json").read_text())
    config = json.loads((cell / "run" / "config.json").read_text())
    assert manifest["method"] == "rag" and manifest["optimizer"] == "labeled" and manifest["knobs"]["k"] == 2
    assert config["program"] == str(cell / "artifact")
    table = json.loads((out / "results.json").read_text())
    assert [row["optimizer"] for row in table["rows"]] == ["labeled"]


def test_a_compiled_cell_resumes_from_another_folder_and_an_absolute_out(tmp_path, monkeypatch, capsys):
    """Grid review: a cell's run recorded its program as the path the sweep was given ("rel/cells/.../artifact");
    extending it from another working folder, or with OUT spelt absolute, was refused: --program was "rel/...",
    now "/.../rel/..." (a worker of another folder taking over a cell: the same)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    (tmp_path / "wd").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "wd")
    argv = ["sweep", str(grid), "--quiet", "--optimizer", "labeled", "--methods", "rag"]
    assert main([*argv, "--out", "rel"]) == 0
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main([*argv, "--out", str(tmp_path / "wd" / "rel"), "-n", "3"]) == 0, capsys.readouterr().err
    (cell,) = (tmp_path / "wd" / "rel" / "cells").iterdir()
    assert len((cell / "run" / "predictions.jsonl").read_text().splitlines()) == 3
    # an OUT reached through a symbolic link is recorded as given (earlier runs recorded it so, unresolved: a
    # resolved path made every such run refuse to resume)
    (tmp_path / "link").symlink_to(tmp_path / "wd")
    assert main([*argv, "--out", str(tmp_path / "link" / "viaLink")]) == 0
    (linked,) = (tmp_path / "link" / "viaLink" / "cells").iterdir()
    config = json.loads((linked / "run" / "config.json").read_text())
    assert config["program"] == str(tmp_path / "link" / "viaLink" / "cells" / linked.name / "artifact")


def test_dry_run_prices_cells_and_total_before_running(tmp_path, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=40)
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--dry-run", "--price-as", "openai/gpt-4o-mini", "--price-sample", "2",
                 "--out", str(out), "--optimizer", "none,bootstrap"]) == 0
    text = capsys.readouterr().out
    assert not out.exists()  # priced, nothing run
    lines = [line for line in text.splitlines() if " | hotpotqa/dev_first500 | " in line]
    assert len(lines) == 4  # direct, rag x none, bootstrap
    none_rows = [line for line in lines if "| none |" in line]
    assert all(line.split()[-6] == "40" for line in lines)  # n = 40 per cell
    assert all(float(line.split()[-3]) == 0 for line in none_rows)  # no compile for "none"
    # bootstrap is priced by its dry-run compile (no longer a ~10x "upper bound"), as what would be sent
    assert "bootstrap" in text and "upper bound" not in text and "served from the response cache" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert float(total.split()[-1]) > 0
    assert "evaluation:" in text and "compile:" in text


def test_grid_budget_stops_before_spending_more(tmp_path, stub_server, grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=3, lms=stub_lms(stub_server))
    out = tmp_path / "g"
    # a budget of 0 dollars: nothing may be sent
    code = main(["sweep", str(grid), "--out", str(out), "--quiet", "--max-cost", "0"])
    assert code == 3 and stub_server.requests == 0
    # the budget counts what the grid's cells used: the same command would stop again (review: it said to rerun it)
    assert "raise --max-calls/--max-cost to continue" in capsys.readouterr().err


def test_parallel_cells_share_one_request_limit_per_endpoint(tmp_path, stub_server, grid_env):
    grid = write_tiny(tmp_path / "tiny.toml", n=6, lms=stub_lms(stub_server))
    stub_server.latency = 0.1
    out = tmp_path / "g"
    png = tmp_path / "grid.png"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--parallel", "2", "--threads", "4",
                 "--max-concurrency", "2", "--plot", str(png)]) == 0
    assert stub_server.requests == 2 * 6
    assert png.read_bytes()[:4] == b"\x89PNG"  # metric vs LM calls per dataset, with CIs (stub answers: real metrics)
    assert stub_server.max_in_flight <= 2  # 2 cells x 4 threads, never more than 2 requests at the server


@pytest.mark.slow
def test_sigkill_mid_grid_then_resume_evaluates_no_example_twice(tmp_path, stub_server, grid_env):
    n = 6
    grid = write_tiny(tmp_path / "tiny.toml", n=n, lms=stub_lms(stub_server))
    stub_server.latency = 0.15
    out = tmp_path / "g"
    argv = ragzoo_argv("sweep", str(grid), "--out", str(out), "--quiet")
    process = subprocess.Popen(argv, env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while stub_server.requests < n + 2 and time.monotonic() < deadline:  # inside the second cell
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = stub_server.requests
    written = sum(len(ids) for ids in _predictions(out).values())
    assert 0 < written < 2 * n
    stub_server.latency = 0.0
    assert main(argv[3:]) == 0  # the same command again (in this process: no second interpreter start-up)
    predictions = _predictions(out)
    assert all(sorted(ids) == sorted(set(ids)) and len(ids) == n for ids in predictions.values())
    # direct and rag make one LM call per question: 2n requests in all, plus at most the one that was in flight
    # when the process was killed (sent, never written, so run again)
    assert before - written <= 1  # sent before the kill but never written: at most the one in flight
    assert stub_server.requests - before == 2 * n - written  # the rerun asks exactly the missing examples
    assert 2 * n <= stub_server.requests <= 2 * n + 1


@pytest.mark.slow
def test_two_workers_share_one_storage_each_cell_once_same_table(tmp_path, stub_server, grid_env):
    n = 3
    grid = tmp_path / "wide.toml"
    methods = "\n".join(f'[[methods]]\nid = "{m}"\nlabel = "{m}"\n' for m in ("direct", "cot", "rag", "cot_rag"))
    grid.write_text(f'[grid]\nname = "wide"\nn = {n}\nlms = [{stub_lms(stub_server)}]\n\n'
                    f'[[datasets]]\nname = "hotpotqa"\nsplit = "dev_first500"\nmetrics = ["em", "f1"]\n\n{methods}')
    shared = tmp_path / "two"
    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    argv = ragzoo_argv("sweep", str(grid), "--out", str(shared), "--storage", storage, "--quiet")
    started = time.monotonic()
    workers = [subprocess.Popen(argv, env=grid_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for _ in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err.decode()[-2000:]
    two_workers = time.monotonic() - started
    assert stub_server.requests == 4 * n  # one call per question per cell: no cell, no example, done twice
    import optuna

    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.params["cell"] for t in complete) == sorted(p.name for p in (shared / "cells").iterdir())
    assert len(complete) == 4

    single = tmp_path / "one"
    assert main(["sweep", str(grid), "--out", str(single), "--quiet"]) == 0
    assert stub_server.requests == 2 * 4 * n
    assert (shared / "results.md").read_text() == (single / "results.md").read_text()
    shared_table = json.loads((shared / "results.json").read_text())
    assert shared_table["comparisons"] and all("p_value" in c for c in shared_table["comparisons"])
    print(f"two workers {two_workers:.1f}s")


@pytest.mark.parametrize("storage", [False, True])
def test_questions_an_outage_failed_are_said_and_asked_again_with_retry_failed(tmp_path, grid_env, capsys, storage):
    """Review: a cell whose every question failed (an LM outage) was "done": the sweep exited 0, said nothing, and a
    rerun with the LM back sent no request. Now the sweep says how many failed and exits 4 (as evaluate does);
    the same command keeps them (as evaluate's --resume does), --retry-failed asks them again."""
    from ragzoo.stubserver import StubLMServer

    failing = True
    with StubLMServer(faults=lambda index, body: "400" if failing else None) as server:
        grid = write_tiny(tmp_path / "g.toml", n=2, lms=stub_lms(server))
        out = tmp_path / "out"
        argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--methods", "direct"]
        if storage:  # a shared storage's claims also take the cell again (diff review: they skipped it)
            argv += ["--storage", f"sqlite:///{tmp_path / 'grid.db'}"]
        assert main(argv) == 4
        assert "grid: 2 question(s) failed in 1 cell(s)" in capsys.readouterr().err
        failing = False
        asked = server.requests
        assert main(argv) == 4 and server.requests == asked  # kept as they are without the flag
        capsys.readouterr()
        assert main([*argv, "--retry-failed"]) == 0
        assert server.requests == asked + 2
    assert "failed in" not in capsys.readouterr().err


PAIR = """
[grid]
name = "pair"
n = {n}
main = "Direct"
lms = [{lms}]

[[datasets]]
name = "hotpotqa"
split = "dev_first500"
metrics = ["em"]
label = "HotPotQA"

[[methods]]
id = "direct"
label = "Direct"
paper = {{ HotPotQA = {{ em = 30.4 }} }}

[[methods]]
id = "rag"
label = "RAG"
knobs = {{ k = 2 }}
paper = {{ HotPotQA = {{ em = 41.2 }} }}
"""


def test_a_partial_cell_is_set_beside_neither_the_paper_nor_another_row(tmp_path, stub_server, grid_env):
    """Review: RAG cut at 2 of 6 questions read `100.0 (partial 2/6) | 41.2 | +58.8` and entered the paired test.
    Its mean is shown with its flag; the delta and the test are withheld. A cell run before at a larger -n is
    flagged: its mean is over other questions than the grid's n."""
    from ragzoo.grid import load_grid
    from ragzoo.grid import table as results

    grid_file = tmp_path / "pair.toml"
    grid_file.write_text(PAIR.format(n=3, lms=stub_lms(stub_server)), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sweep", str(grid_file), "--out", str(out), "--quiet"]) == 0
    built = results.build(load_grid(grid_file), out)
    rag = next(row for row in built["rows"] if row["label"] == "RAG")["cells"]["HotPotQA"]
    assert rag["status"] == "done" and rag["metrics"]["em"]["delta"] is not None and built["comparisons"]
    predictions = next((out / "cells").glob("rag__*")) / "run" / "predictions.jsonl"
    predictions.write_text(predictions.read_text().splitlines(keepends=True)[0])  # as if cut after one question
    built = results.build(load_grid(grid_file), out)
    rag = next(row for row in built["rows"] if row["label"] == "RAG")["cells"]["HotPotQA"]
    assert rag["status"] == "partial 1/3" and rag["metrics"]["em"]["delta"] is None
    assert rag["metrics"]["em"]["ours"] is not None and built["comparisons"] == []
    smaller = tmp_path / "smaller.toml"
    smaller.write_text(PAIR.format(n=2, lms=stub_lms(stub_server)), encoding="utf-8")
    built = results.build(load_grid(smaller), out)
    direct = next(row for row in built["rows"] if row["label"] == "Direct")["cells"]["HotPotQA"]
    assert direct["status"] == "3 questions, the grid asks 2"


def test_a_cell_that_lost_a_question_is_a_failed_cell_not_a_budget_stop_of_the_grid(tmp_path, monkeypatch, capsys):
    """Diff review: a question that ended with no record made its evaluate exit 3, which the grid reads as a budget
    stop: "budget reached inside a cell" with no budget given, and the other cells never ran."""
    from tests.lost_question import first_question_lost

    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    with first_question_lost(monkeypatch):
        code = main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "budget" not in err, err
    cells = sorted((tmp_path / "out" / "cells").iterdir())
    assert len(cells) >= 2 and all((cell / "run" / "summary.json").is_file() for cell in cells)
    lost = [json.loads((cell / "run" / "summary.json").read_text())["lost"] for cell in cells]
    assert sum(1 for item in lost if item) == 1


def test_two_out_folders_of_one_grid_in_one_database_are_two_whole_grids(tmp_path, capsys):
    """PostgreSQL review: "alice" and "bob" ran one grid file into two OUT folders with one database; the study was
    the grid's alone, so the workers split its cells and each table was silently partial (exit 0)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    for name in ("alice", "bob"):
        assert main(["sweep", str(grid), "--out", str(tmp_path / name), "--storage", storage, "--quiet"]) == 0
    done = {name: sorted(p.name for p in (tmp_path / name / "cells").iterdir()) for name in ("alice", "bob")}
    assert done["alice"] == done["bob"] and len(done["alice"]) >= 2
    assert (tmp_path / "alice" / "results.md").read_text() == (tmp_path / "bob" / "results.md").read_text()
    # a rerun into alice joins alice's study again: nothing to do
    assert main(["sweep", str(grid), "--out", str(tmp_path / "alice"), "--storage", storage, "--quiet"]) == 0
    import optuna

    assert len([n for n in optuna.get_all_study_names(storage) if n.startswith("ragzoo-grid:")]) == 2


@pytest.mark.parametrize("inside", ["sqlite:///{out}/grid.db", "journal:{out}/grid.log"])
def test_the_readmes_storage_inside_out_works_on_a_new_out(tmp_path, capsys, inside):
    """Grid review: the README's `--storage sqlite:///OUT/grid.db` was opened before OUT was claimed: on a new OUT
    "the folder does not exist", and after `mkdir OUT` the database went in and OUT was refused as not a grid's."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "out"
    storage = inside.format(out=out)
    assert main(["sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet"]) == 0, capsys.readouterr().err
    assert (out / "results.md").is_file() and len(list((out / "cells").iterdir())) >= 2
    assert main(["sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet"]) == 0  # a rerun joins it
    # a storage outside OUT is still refused before OUT is written when it cannot be opened
    assert main(["sweep", str(grid), "--out", str(tmp_path / "other"), "--storage",
                 f"sqlite:///{tmp_path / 'missing' / 'grid.db'}", "--quiet"]) == 2
    assert not (tmp_path / "other").exists()


def test_a_storage_worker_that_resolved_other_cells_is_refused_at_a_shared_out(tmp_path, capsys):
    """PostgreSQL review: two machines whose caches differed resolved `reproduce` with different corpora and ran two
    grids into one OUT (every cell paid twice, grid.json overwritten, exit 0)."""
    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out, storage = tmp_path / "out", f"sqlite:///{tmp_path / 'grid.db'}"
    # a subset (--methods) and the whole grid at once would each claim in a study of its own (diff review: both
    # ran the shared cell, and the subset's grid.json dropped the other rows)
    assert main(["sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet", "--methods", "direct"]) == 0
    capsys.readouterr()
    assert main(["sweep", str(grid), "--out", str(out), "--storage", storage, "--quiet"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "with other cells than this worker's" in errors[0], errors
    assert "is extended without --storage" in errors[0]
    assert main(["sweep", str(grid), "--out", str(out), "--quiet"]) == 0  # the way out the message names


def test_one_storage_worker_does_not_wait_for_its_own_cells_as_other_workers(tmp_path, stub_server, grid_env,
                                                                            capsys):
    """PostgreSQL review: a single worker with --parallel 2 said "waiting for 1 cell(s) other workers are running"
    of its own other cell."""
    stub_server.latency = 0.15
    grid = write_tiny(tmp_path / "tiny.toml", n=1, lms=stub_lms(stub_server))
    code = main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--storage", f"sqlite:///{tmp_path / 's.db'}",
                 "--parallel", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "other workers are running" not in err


def test_a_cell_another_live_process_writes_is_left_to_it_not_failed(tmp_path, capsys):
    """PostgreSQL review: a worker paused past its heartbeat's grace (a VM paused, Ctrl-Z) had its claim taken; the
    taker's evaluate was refused by the run's lock and the cell counted failed (exit 1) while its writer went on."""
    import fcntl
    import os

    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "out"
    argv = ["sweep", str(grid), "--out", str(out), "--methods", "direct"]
    assert main([*argv, "-n", "1"]) == 0
    (cell,) = (out / "cells").iterdir()
    held = os.open(cell / "run", os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its writer, alive
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err
    finally:
        os.close(held)
    assert "is held by another live ragzoo process" in err and "failed" not in err, err
    assert code == 0 and json.loads((cell / "run" / "summary.json").read_text())["n"] == 1


def test_a_metric_that_raised_is_in_the_cell_s_status(tmp_path):
    """Review: a metric that raised scored those questions 0 and the grid's table said nothing of it."""
    from ragzoo.grid import table as results

    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--methods", "rag"]) == 0
    (cell,) = (out / "cells").iterdir()
    path = cell / "run" / "predictions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["metric_errors"] = {"em": "ZeroDivisionError: division by zero"}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    built = results.build(results.grid_of_folder(str(out)), str(out))
    statuses = [entry.get("status") for row in built["rows"] for entry in row["cells"].values() if "n" in entry]
    assert statuses and all("em raised on 1" in status for status in statuses), statuses


def test_a_cell_another_live_process_holds_is_left_to_it_not_compiled_again(tmp_path, capsys):
    """Grid review: two sweeps into one OUT each compiled the same cell (paid twice) and swapped the artifact under
    the other's evaluation: the run folder's lock came after the compile. The cell's folder is held for the whole
    cell; a sweep that finds it held leaves the cell to its holder."""
    import subprocess
    import sys

    grid = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    argv = ["sweep", str(grid), "--out", str(out), "--quiet", "--optimizer", "labeled", "--methods", "rag"]
    assert main([*argv, "-n", "1"]) == 0
    (cell,) = (out / "cells").iterdir()
    (cell / "artifact").rename(tmp_path / "old-artifact")  # as if this cell's compile had not run yet
    capsys.readouterr()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; d = os.open(sys.argv[1], "
                               "os.O_RDONLY); fcntl.flock(d, fcntl.LOCK_EX); print('held', flush=True); "
                               "time.sleep(60)", str(cell)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "is held by another live ragzoo process" in err, err
        assert not (cell / "artifact").exists()  # not compiled here: the holder's to do
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0  # released: this sweep runs it
    assert (cell / "artifact" / "manifest.json").is_file()
    assert len((cell / "run" / "predictions.jsonl").read_text().splitlines()) == 2


def test_a_cell_link_that_leads_out_of_the_grid_is_refused_and_its_target_untouched(tmp_path, capsys):
    """Grid review: a symbolic link at OUT/cells/<key> to a user's folder made the grid write log.txt and run/
    into it. The links ragzoo makes name a sibling cell folder; any other is refused."""
    from ragzoo.grid import load_grid

    grid_file = write_tiny(tmp_path / "tiny.toml", n=2)
    out = tmp_path / "g"
    argv = ["sweep", str(grid_file), "--out", str(out), "--quiet", "--methods", "direct"]
    assert main(argv) == 0
    (cell,) = [c for c in load_grid(grid_file).cells() if c.method.id == "direct"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "NOTES.md").write_text("mine\n")
    import shutil

    shutil.rmtree(out / "cells" / cell.key)
    (out / "cells" / cell.key).symlink_to(mine)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link to" in err and "remove the link" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in mine.iterdir()) == ["NOTES.md"]
    # diff review: through a sibling of the cell's name form that is itself a link (two hops), the same
    prefix = cell.key.rpartition("__")[0]
    (out / "cells" / cell.key).unlink()
    (out / "cells" / f"{prefix}__hop").symlink_to(mine)
    (out / "cells" / cell.key).symlink_to(f"{prefix}__hop")
    assert main(argv) == 2 and "remove the link" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["NOTES.md"]
