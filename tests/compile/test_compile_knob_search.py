"""Knob search: Optuna over a method's knobs jointly with the optimizer finds the knob that matters."""

from __future__ import annotations

import dspy
import pytest

from ragzoo.errors import ConfigError
from ragzoo.optimizers import search_knobs
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever


def _needs_three_passages(make_examples):
    """Each question's answer sits in the 3rd passage retrieved, so only k >= 3 can answer it."""
    examples = make_examples(10)
    by_query = {}
    for i, example in enumerate(examples):
        noise = [Passage(pid=f"n{i}-{j}", title=f"Noise {j}", text="nothing useful") for j in range(2)]
        by_query[example.question] = noise + [Passage(pid=f"a{i}", title=f"Item {i}", text=f"answer {i}")]
    retriever = StaticRetriever([], by_query=by_query)

    def respond(call):
        number = call.inputs["question"].split("item ")[-1].rstrip("?")
        return {"answer": f"answer {number}" if f"answer {number}" in call.inputs["context"] else "unknown"}

    return examples, retriever, ScriptedLM({"answer": respond})


def test_search_finds_the_knob_that_matters(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):
        result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                              optimizers=["none", "labeled"], n_trials=8, seed=0)
    assert result.best_knobs == {"k": 3} and result.best_score == 1.0
    assert {trial["knobs"]["k"] for trial in result.trials} >= {1, 3}
    assert all(trial["score"] == (1.0 if trial["knobs"]["k"] == 3 else 0.0) for trial in result.trials)
    assert result.best_program.k == 3


def test_search_is_seeded(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    runs = []
    for _ in range(2):
        with dspy.context(lm=lm):
            result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6],
                                  valset=examples[6:], optimizers=["none", "labeled"], n_trials=4, seed=7)
        runs.append([(t["knobs"]["k"], t["optimizer"]) for t in result.trials])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("space, optimizers, message", [
    ({"k": []}, ["none"], "no values"),
    ({"k": ["many"]}, ["none"], "integer"),
    ({"depth": [1]}, ["none"], "no knob 'depth'"),
    ({"k": [1]}, ["nosuch"], "optimizer"),
])
def test_bad_search_spaces_are_refused(space, optimizers, message, make_examples, tiny_retriever):
    examples = make_examples(4)
    with pytest.raises(ConfigError, match=message):
        search_knobs("_tinyqa", tiny_retriever, space, trainset=examples[:2], valset=examples[2:],
                     optimizers=optimizers, n_trials=1)


def test_search_budgets_are_totals_over_all_trials(make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):
        result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                              optimizers=["none"], n_trials=8, seed=0, max_calls=9)
    # each trial validates on 4 questions (4 calls): a per-trial budget of 9 would let all 8 trials run
    assert len(lm.calls) == 9
    assert result.stopped and "max-calls 9" in result.stopped
    assert len(result.trials) == 3 and "stopped" in result.trials[-1]
    assert all("stopped" not in trial for trial in result.trials[:-1])


def test_search_cost_budget_binds_and_a_search_with_no_finished_trial_says_so(make_examples):
    from ragzoo.errors import BudgetExceeded

    examples, retriever, lm = _needs_three_passages(make_examples)
    lm.priced_model = "openai/gpt-4o-mini"  # priced, so a cost budget can bind
    with dspy.context(lm=lm), pytest.raises(BudgetExceeded, match="before any trial finished"):
        search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                     optimizers=["none"], n_trials=8, seed=0, max_cost=1e-9)
    assert len(lm.calls) == 0  # below one call's price: the first call could pass it, so none is sent


# -- a grid: every point once, typed values ------------------------------------------------------------------

@pytest.mark.parametrize("n_trials, expected", [(20, 6), (4, 4)])
def test_a_grid_search_visits_each_point_at_most_once(n_trials, expected, make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):
        result = search_knobs("_tinyqa", retriever, {"k": ["1", "2", "3"]}, trainset=examples[:6],
                              valset=examples[6:], optimizers=["none", "labeled"], n_trials=n_trials, seed=3)
    points = [(t["knobs"]["k"], t["optimizer"]) for t in result.trials]
    assert len(points) == expected and len(set(points)) == expected  # 12 trials gave 7 distinct points before
    assert result.grid_size == 6 and result.capped == (n_trials > 6) and result.n_trials == expected
    assert all(type(k) is int for k, _ in points)  # "3" from the command line is the int 3
    assert len(lm.calls) == 4 * expected  # 4 dev questions per trial, nothing run twice


# -- storage: resume and several workers ---------------------------------------------------------------------

def _storage(kind, tmp_path):
    return f"sqlite:///{tmp_path / 'search.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'search.log'}"


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_stopped_search_resumes_without_redoing_finished_trials(kind, tmp_path, make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    common = dict(trainset=examples[:6], valset=examples[6:], optimizers=["none"], n_trials=10, seed=0,
                  storage=_storage(kind, tmp_path))
    with dspy.context(lm=lm):  # stopped by the budget in its 3rd trial: 2 finished
        first = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, max_calls=9, **common)
    assert first.stopped and len(lm.calls) == 9 and first.pending == 1
    done_first = {t["knobs"]["k"] for t in first.trials if "stopped" not in t}
    assert len(done_first) == 2
    _, _, lm2 = _needs_three_passages(make_examples)
    with dspy.context(lm=lm2):
        second = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    assert len(lm2.calls) == 4 and second.ran_here == 1  # only the interrupted point, once (4 dev questions)
    assert sorted(t["knobs"]["k"] for t in second.trials) == [1, 2, 3] and second.pending == 0
    assert second.best_knobs == {"k": 3} and second.best_program.k == 3
    _, _, lm3 = _needs_three_passages(make_examples)
    with dspy.context(lm=lm3):
        third = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    assert len(lm3.calls) == 0 and third.ran_here == 0 and third.best_score == 1.0
    assert third.recompiled_best and third.best_program.k == 3  # rebuilt from the stored configuration


def test_ctrl_c_gives_the_trial_up_and_a_rerun_redoes_only_it(tmp_path, make_examples):
    examples, retriever, lm = _needs_three_passages(make_examples)
    answer = lm.responses["answer"]

    def interrupted(call):
        if len(lm.calls) == 6:  # in the 2nd trial
            raise KeyboardInterrupt
        return answer(call)

    lm.responses["answer"] = interrupted
    common = dict(trainset=examples[:6], valset=examples[6:], optimizers=["none"], n_trials=10, seed=0,
                  storage=_storage("sqlite", tmp_path))
    with dspy.context(lm=lm), pytest.raises(KeyboardInterrupt):
        search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    _, _, lm2 = _needs_three_passages(make_examples)
    with dspy.context(lm=lm2):
        second = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    assert second.ran_here == 2 and len(lm2.calls) == 8 and len(second.trials) == 3


_WORKER = r'''
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import dspy
from conftest import TinyQA, make_examples
from ragzoo.programs import register
register("_tinyqa", paper="test only", calls="1", summary="test-only retrieve-then-answer")(TinyQA)
import test_compile_knob_search as t

examples, retriever, lm = t._needs_three_passages(make_examples)
answer = lm.responses["answer"]
def slow(call):
    time.sleep(0.02)
    return answer(call)
lm.responses["answer"] = slow
Path(sys.argv[2] + ".ready").touch()
while not Path(sys.argv[1]).with_name("go").exists():
    time.sleep(0.01)
from ragzoo.optimizers import search_knobs
with dspy.context(lm=lm):
    result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3, 4]}, trainset=examples[:6], valset=examples[6:],
                          optimizers=["none", "labeled"], n_trials=8, seed=0, storage="sqlite:///" + sys.argv[1])
Path(sys.argv[2]).write_text(json.dumps({"calls": len(lm.calls), "ran": result.ran_here,
                                         "trials": len(result.trials)}))
'''


def test_two_workers_on_one_storage_split_the_trials(tmp_path):
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    here = Path(__file__).parent
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    outs = [tmp_path / f"w{i}.json" for i in range(2)]
    workers = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "s.db"), str(out), str(here)])
               for out in outs]
    deadline = time.time() + 60
    while not all(Path(f"{out}.ready").exists() for out in outs) and time.time() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    assert all(worker.wait(timeout=60) == 0 for worker in workers)
    results = [json.loads(out.read_text()) for out in outs]
    # 8 points x 4 dev questions: each point run by exactly one worker
    assert sum(r["ran"] for r in results) == 8 and sum(r["calls"] for r in results) == 32, results
    assert max(r["trials"] for r in results) == 8 and all(r["ran"] >= 1 for r in results)  # both took a share


_KILLED = r'''
import os, signal, sys
sys.path.insert(0, sys.argv[2])
import dspy
from conftest import TinyQA, make_examples
from ragzoo.programs import register
register("_tinyqa", paper="test only", calls="1", summary="test-only retrieve-then-answer")(TinyQA)
import test_compile_knob_search as t
from ragzoo.optimizers import search_knobs

examples, retriever, lm = t._needs_three_passages(make_examples)
answer = lm.responses["answer"]
def killed(call):
    if len(lm.calls) == 6:  # in the 2nd trial
        os.kill(os.getpid(), signal.SIGKILL)
    return answer(call)
lm.responses["answer"] = killed
with dspy.context(lm=lm):
    search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                 optimizers=["none"], n_trials=10, seed=0, storage=sys.argv[1])
'''


def test_a_killed_search_resumes_its_killed_trial(tmp_path, make_examples):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    storage = _storage("sqlite", tmp_path)
    code = subprocess.run([sys.executable, str(script), storage, str(Path(__file__).parent)], timeout=60).returncode
    assert code == -signal.SIGKILL
    examples, retriever, lm = _needs_three_passages(make_examples)
    with dspy.context(lm=lm):  # the killed trial's claim is stale (its process is gone): redone, once
        result = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, trainset=examples[:6], valset=examples[6:],
                              optimizers=["none"], n_trials=10, seed=0, storage=storage)
    assert result.ran_here == 2 and len(lm.calls) == 8 and len(result.trials) == 3 and result.pending == 0


def test_a_trial_cut_by_ctrl_c_counts_against_the_budget_of_the_rerun(tmp_path, make_examples):
    """Review: a trial cut by SIGTERM or Ctrl-C released its claim without storing what it had sent, so the rerun
    got the whole --max-calls again (29 requests under --max-calls 20)."""
    examples, retriever, lm = _needs_three_passages(make_examples)
    answer = lm.responses["answer"]

    def interrupted(call):
        if len(lm.calls) == 7:  # the 3rd call of the 2nd trial
            raise KeyboardInterrupt
        return answer(call)

    lm.responses["answer"] = interrupted
    common = dict(trainset=examples[:6], valset=examples[6:], optimizers=["none"], n_trials=10, seed=0,
                  storage=_storage("sqlite", tmp_path), max_calls=10)
    with dspy.context(lm=lm), pytest.raises(KeyboardInterrupt):
        search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    first = len(lm.calls) - 1  # the call that raised was never answered
    _, _, lm2 = _needs_three_passages(make_examples)
    with dspy.context(lm=lm2):
        second = search_knobs("_tinyqa", retriever, {"k": [1, 2, 3]}, **common)
    assert first == 6 and first + len(lm2.calls) <= 10, (first, len(lm2.calls))
    assert second.stopped and second.spent_before["lm_calls"] == 6
