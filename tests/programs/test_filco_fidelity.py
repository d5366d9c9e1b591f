"""FILCO, issue 22: the FULL baseline's generator is not told its context was filtered (item 10), the filter's
sentence-index bound and SILVER's passage granularity are pinned by tests (item 14), and the CXMI measure
that trains the filter is computed where the LM serves log-probabilities, else a declared fallback (item 1)."""

from __future__ import annotations

import dspy

from ragzoo.programs.filco import Filco
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever

QUESTION = "Which river flows through the capital of France?"
PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. "
                                              "The Seine flows through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. The Rhone flows through it.")


def make(k=2, **knobs):
    retriever = StaticRetriever([PARIS, LYON], by_query={QUESTION: [PARIS, LYON]})
    return Filco(retriever=retriever, k=k, **knobs)


def run(program, script, **inputs):
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION, **inputs)
    return prediction, lm


def _instructions(call) -> str:
    signature = call.signature
    return " ".join([signature.instructions, *(field.json_schema_extra.get("desc", "")
                                               for field in signature.input_fields.values())]).lower()


# --- item 10: FULL is M_gen on the retrieved passages, not on a filtered context ---------------------------


def test_the_full_baseline_does_not_tell_the_generator_its_context_was_filtered():
    full, lm = run(make(context="full"), {"generate": {"answer": "Seine"}})
    told = _instructions(lm.calls_to("generate")[0])
    for word in ("filter", "judged helpful", "selected"):
        assert word not in told, word
    assert "retrieved" in told
    assert full.answer == "Seine" and lm.call_names == ["generate"]
    # FILCO proper still tells its generator the context is what the filter kept
    _, lm = run(make(), {"filter": {"selected": [2]}, "generate": {"answer": "Seine"}})
    assert "filter" in _instructions(lm.calls_to("generate")[0])


# --- item 14: surviving mutants ---------------------------------------------------------------------------


def test_a_one_based_index_past_the_last_sentence_is_ignored_not_read():
    """An LM numbering sentences from 1 answers len(sentences) for the last one: that index does not exist
    (sentences are shown 0-based), so it is reported in `ignored_indices` and nothing past the end is read."""
    prediction, lm = run(make(k=1), {"filter": {"selected": [3]}, "generate": {"answer": "x"}})
    assert prediction.selected == [[]] and prediction.ignored_indices == [3]
    assert prediction.context == [] and prediction.fallback == "none"
    prediction, _ = run(make(k=1), {"filter": {"selected": [2, 3]}, "generate": {"answer": "x"}})
    assert prediction.selected == [[2]] and prediction.ignored_indices == [3]
    assert prediction.context == ["Paris | The Seine flows through it."]


def test_silver_at_passage_granularity_scores_whole_passages_not_their_best_sentence():
    """PSG's oracle (SILVER, granularity=passage) scores each passage as one unit: "the Rhone flows" overlaps
    Lyon's second sentence with F1 0.67 (> 0.5) but the whole Lyon passage only with F1 0.33, so the passage
    oracle drops it where the sentence oracle keeps that sentence."""
    by_passage, lm = run(make(context="silver", granularity="passage", measure="lexical"),
                         {"generate": {"answer": "x"}}, answers=["the Rhone flows"])
    assert by_passage.selected == [False, False] and by_passage.context == [] and by_passage.sentences == []
    assert lm.call_names == ["generate"]
    by_sentence, _ = run(make(context="silver", measure="lexical"), {"generate": {"answer": "x"}},
                         answers=["the Rhone flows"])
    assert by_sentence.selected == [[], [1]]
    # an answer only the passage's title holds: the passage oracle sees the title, the sentences do not
    titled, _ = run(make(k=1, context="silver", granularity="passage"), {"generate": {"answer": "x"}},
                    answers=["Paris"])
    assert titled.selected == [True] and titled.context == [PARIS.long_text]


# --- item 1: CXMI from the LM server's log-probabilities, else a declared measure, recorded ------------------

import json  # noqa: E402
import re  # noqa: E402

from ragzoo.stubserver import adapter_responder  # noqa: E402
from ragzoo.testing import JSONHandler, LoopbackHTTPServer  # noqa: E402


def echo_logprobs(prompt: str) -> dict:
    """Prompt log-probabilities as vLLM echoes them, made up so CXMI is readable: the answer after "answer:" is
    likelier (-0.5 a token) after a context line that holds it, unlikelier (-4) after one that does not, and -2
    with no context."""
    cut = prompt.rindex("answer:") + len("answer:")
    output = prompt[cut:].strip().lower()
    context = re.match(r"context: (.*)\n", prompt)
    per_token = -2.0 if context is None else (-0.5 if output in context.group(1).lower() else -4.0)
    tokens = list(re.finditer(r"\s*\S+", prompt))
    return {"tokens": [t.group() for t in tokens], "text_offset": [t.start() for t in tokens],
            "token_logprobs": [None if t.start() == 0 else (per_token if t.start() >= cut else -1.0) for t in tokens],
            "top_logprobs": None}


class Upstream(JSONHandler):
    """An OpenAI-compatible server on loopback: chat completions answer type-valid placeholders (the stub's
    responder); /completions echoes prompt log-probabilities unless the class says it is a chat-only server."""

    serves_logprobs = True
    completions: list = []

    def do_GET(self):  # the CLI's preflight lists the models
        self.reply(200, {"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if self.path.endswith("/chat/completions"):
            text = adapter_responder(body["messages"], body)
            self.reply(200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": usage})
        elif self.path.endswith("/completions") and self.serves_logprobs:
            type(self).completions.append(body)
            assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1
            self.reply(200, {"id": "t", "object": "text_completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "text": body["prompt"] + " x", "finish_reason": "length",
                                          "logprobs": echo_logprobs(body["prompt"])}], "usage": usage})
        else:
            self.reply(404, {"error": {"message": "not found"}})


def compile_filco(tmp_path, upstream: type, *knobs: str) -> tuple[int, dict, str]:
    from ragzoo.cli import main

    out = tmp_path / "filco"
    with LoopbackHTTPServer(upstream) as server:
        argv = ["compile", "--method", "filco", "--dataset", "hotpotqa", "--optimizer", "labeled", "--train-n", "3",
                "--dev-n", "1", "--lm", "openai/loopback", "--api-base", server.base_url + "/v1", "--no-cache",
                "--out", str(out)]
        for knob in knobs:
            argv += ["--knob", knob]
        import contextlib
        import io

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(argv)
    manifest = json.loads((out / "manifest.json").read_text()) if code == 0 else {}
    return code, manifest, printed.getvalue()


def test_on_hotpotqa_the_filter_trains_on_cxmi_from_the_servers_prompt_log_probabilities(tmp_path):
    """measure=auto is CXMI on HotpotQA (§4.2): the CLI compile scores it through the LM's own
    OpenAI-compatible server (echo=True, logprobs=1), one probe then 1 + n_sentences requests per passage,
    and the manifest's stage record names the measure and its source."""
    class WithLogprobs(Upstream):
        completions = []

    code, manifest, _ = compile_filco(tmp_path, WithLogprobs)
    assert code == 0
    (stage,) = manifest["compile_stages"]
    assert stage["stage"] == "filter" and stage["measure"] == "cxmi" and "fallback" not in stage
    assert "127.0.0.1" in stage["cxmi_source"] and "/completions" in stage["cxmi_source"]
    assert stage["logprob_requests"] == len(WithLogprobs.completions) - 1 > 0  # all but the probe
    assert stage["examples"] == 3 and stage["demos"] == {"filter": 3}
    assert WithLogprobs.completions[0]["model"] == "loopback"  # the served model, without LiteLLM's prefix
    assert not any(note.startswith("compile stage") for note in manifest["notes"])


def test_without_prompt_log_probabilities_the_declared_fallback_trains_the_filter_and_says_so(tmp_path):
    class ChatOnly(Upstream):
        serves_logprobs = False

    code, manifest, printed = compile_filco(tmp_path, ChatOnly)
    assert code == 0
    (stage,) = manifest["compile_stages"]
    assert stage["measure"] == "lexical" and stage["asked"] == "cxmi"
    assert "HTTP 404" in stage["fallback"] and "cxmi_fallback=lexical" in stage["fallback"]
    assert any("labels are LEXICAL ones" in note for note in manifest["notes"])
    # review: on HotpotQA, LEXICAL (unigram F1 > 0.5 against a short answer) keeps no sentence: demos that all keep
    # nothing would teach the filter to keep nothing, so the stage is skipped, and says so
    assert stage["labels_keeping_something"] == 0 and stage["examples"] > 0 and "demos" not in stage
    assert "keep nothing" in stage["skipped"] and "measure=strinc" in stage["skipped"]
    assert "note: compile stage 'filter': CXMI labels (the paper's choice for hotpotqa)" in printed
    # declared "none": no filter stage, and the compile says why instead of skipping it silently
    code, manifest, printed = compile_filco(tmp_path / "none", ChatOnly, "cxmi_fallback=none")
    assert code == 0
    (stage,) = manifest["compile_stages"]
    assert "skipped" in stage and "cxmi_fallback" in stage["skipped"]
    assert "note: compile stage 'filter' skipped:" in printed


def test_the_grid_table_says_which_measure_trained_a_cells_filter_when_it_fell_back(tmp_path):
    """A cell whose compile fell back from CXMI names it among the table's differences (the bundled grid's
    static differences say what may happen; this says what did)."""
    from ragzoo.grid import bundled_grids, load_grid
    from ragzoo.grid.runner import cell_dir
    from ragzoo.grid.table import build, to_markdown

    from ragzoo.grid.spec import LMEntry

    grid = load_grid(bundled_grids()["filco-table4"])
    grid.lms = [LMEntry("openai/gpt-4o-mini")]  # what --lm sets
    cell = next(c for c in grid.cells() if c.method.label == "FILCO (top 1)" and c.dataset.label == "HotpotQA")
    artifact = cell_dir(tmp_path, cell) / "artifact"
    artifact.mkdir(parents=True)
    reason = ("CXMI labels (measure=cxmi) could not be computed: gpt-4o-mini is a hosted chat API; the filter's "
              "labels are LEXICAL ones (cxmi_fallback=lexical)")
    (artifact / "manifest.json").write_text(json.dumps({"compile_stages": [
        {"stage": "filter", "measure": "lexical", "asked": "cxmi", "fallback": reason}]}))
    table = build(grid, tmp_path, resamples=10)
    assert table["run_differences"] == [f"FILCO (top 1), HotpotQA: {reason}"]
    assert f"- differs in this run: FILCO (top 1), HotpotQA: {reason}" in to_markdown(table)
    # review: a stage skipped after its fallback (LEXICAL keeps nothing on HotpotQA) was said as the fallback alone
    (artifact / "manifest.json").write_text(json.dumps({"compile_stages": [
        {"stage": "filter", "measure": "lexical", "asked": "cxmi", "fallback": reason,
         "skipped": "all 6 LEXICAL labels keep nothing"}]}))
    (said,) = build(grid, tmp_path, resamples=10)["run_differences"]
    assert "compile stage 'filter' skipped: all 6 LEXICAL labels keep nothing" in said and reason in said


def test_the_cxmi_source_and_fallback_reason_never_show_a_key_or_url_credentials(monkeypatch):
    from ragzoo.lm import make_lm
    from ragzoo.programs.filco_oracle import logprob_scorer_for

    class ChatOnly(Upstream):
        serves_logprobs = False

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefghijklmnopqrstuvwxyz123456")
    with LoopbackHTTPServer(ChatOnly) as server:
        scorer, reason = logprob_scorer_for(make_lm("openai/loopback", api_base=server.base_url + "/v1"))
        assert scorer is None and "HTTP 404" in reason and "sk-test" not in reason
        # the CLI refuses a credentialed URL; a Python caller's dspy.LM may carry one: it is not shown either
        base = server.base_url.replace("http://", "http://user:pa55word@") + "/v1"
        scorer, reason = logprob_scorer_for(dspy.LM("openai/loopback", api_base=base))
    assert scorer is None and "HTTP 404" in reason
    assert "pa55word" not in reason and "user@" not in reason and "sk-test" not in reason
    assert logprob_scorer_for(make_lm("dry-run"))[0] is None
    assert "hosted chat API" in logprob_scorer_for(make_lm("openai/gpt-4o-mini"))[1]


def test_an_unreadable_filter_reply_keeps_every_sentence_of_its_passage_and_ignores_none():
    from ragzoo.adapters import make_adapter

    lm = ScriptedLM({"filter": "I am not following any format here.", "generate": {"answer": "Seine"}})
    with dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=0)):
        prediction = make(k=1)(question=QUESTION)
    assert prediction.selected == [[0, 1, 2]] and prediction.ignored_indices == []
    assert prediction.context == [PARIS.long_text]  # "Title | all its sentences"
