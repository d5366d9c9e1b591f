"""Format slips of real models (issue 14): the stub's slip mode, each shape alone, read through the lenient
adapters, the bounded re-ask (never served from the cache) and the typed error when a call stays unreadable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from typing import Literal

import dspy
import pytest

from ragzoo.adapters import UnreadableOutput, lenient_value, make_adapter
from ragzoo.lm import make_lm
from ragzoo.stubserver import SLIP_SHAPES, StubLMServer, seeded_slips, slip_answer
from ragzoo.tracing import record_degradation, trace_example


class Judge(dspy.Signature):
    """Judge a claim."""

    claim: str = dspy.InputField()
    supported: bool = dspy.OutputField()
    evidence_ids: list[int] = dspy.OutputField()
    verdict: Literal["true", "false", "unsure"] = dspy.OutputField()
    answer: str = dspy.OutputField()


def _lm(server, **kw):
    kw.setdefault("cache", False)
    return make_lm("openai/stub-model", api_base=server.base_url + "/v1", num_retries=0, **kw)


def _judge(server, adapter="chat", claim="water is wet", **kw):
    with dspy.context(lm=_lm(server, **kw), adapter=make_adapter(adapter)), trace_example() as trace:
        prediction = dspy.ChainOfThought(Judge)(claim=claim)
    return prediction, trace


def _system(adapter: str) -> str:
    return make_adapter(adapter).format(dspy.ChainOfThought(Judge).predict.signature, [], {"claim": "c"})[0]["content"]


SHAPE_MARKS = {
    "preamble": lambda text, finish: text.startswith("Sure!"),
    "fences": lambda text, finish: text.startswith("```\n") and text.endswith("```"),
    "glued": lambda text, finish: "\n\n[[ ##" not in text and " [[ ## answer ## ]]" in text,
    "json": lambda text, finish: json.loads(text)["supported"] is True,
    "fenced_json": lambda text, finish: text.startswith("```json\n") and json.loads(text[8:-4])["verdict"] == "true",
    "words": lambda text, finish: "Yes." in text and "Only 1." in text and "I would say it is true." in text,
    "empty": lambda text, finish: text == "",
    "length": lambda text, finish: finish == "length" and "[[ ## completed ## ]]" not in text,
    "headers": lambda text, finish: "**supported:** True" in text and "[[ ##" not in text,
}


@pytest.mark.parametrize("shape", SLIP_SHAPES)
def test_each_slip_shape_is_served_alone_and_looks_like_itself(shape):
    text, finish = slip_answer(_system("chat"), shape)
    assert SHAPE_MARKS[shape](text, finish), text
    with StubLMServer(slips=[shape]) as server:  # only the first request slips
        body = {"model": "m", "messages": [{"role": "system", "content": _system("chat")},
                                           {"role": "user", "content": "[[ ## claim ## ]]\nc"}]}
        request = urllib.request.Request(server.base_url + "/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        first = json.loads(urllib.request.urlopen(request, timeout=5).read())
        second = json.loads(urllib.request.urlopen(request, timeout=5).read())
    assert first["choices"][0]["message"]["content"] == text and first["choices"][0]["finish_reason"] == finish
    assert second["choices"][0]["finish_reason"] == "stop" and "[[ ## completed ## ]]" in second["choices"][0]["message"]["content"]
    assert server.slips_served == {shape: 1} and server.log[0] == (0, f"slip:{shape}")


RECOVERED_BY_REASK = {"empty", "length"}


@pytest.mark.parametrize("adapter", ["chat", "json", "xml"])
@pytest.mark.parametrize("shape", SLIP_SHAPES)
def test_every_shape_is_read_or_reasked_under_every_adapter(shape, adapter):
    with StubLMServer(slips=[shape]) as server:
        prediction, trace = _judge(server, adapter)
    assert (prediction.supported, prediction.evidence_ids, prediction.verdict) == (True, [1], "true")
    expected_calls = 2 if shape in RECOVERED_BY_REASK else 1
    assert server.requests == expected_calls and len(trace.lm_calls) == expected_calls
    assert len(trace.reasks) == expected_calls - 1


def test_plain_dspy_loses_what_the_lenient_adapter_reads():
    """The failure the issue measured: DSPy's own ChatAdapter (with its JSON fallback) cannot read these."""
    for shape in ("words", "headers", "empty"):
        with StubLMServer(slips=lambda index, body, shape=shape: shape) as server:
            with dspy.context(lm=_lm(server), adapter=dspy.ChatAdapter()), pytest.raises(Exception):
                dspy.ChainOfThought(Judge)(claim="c")


def test_reask_is_not_served_from_the_cache():
    claim = f"cached claim {uuid.uuid4().hex}"  # DSPy's disk cache outlives one test
    with StubLMServer(slips=["empty"]) as server:
        prediction, trace = _judge(server, claim=claim, cache=True)
        assert prediction.verdict == "true" and server.requests == 2 and len(trace.reasks) == 1
        again, trace = _judge(server, claim=claim, cache=True)  # both the empty reply and the re-ask are cached now
    assert again.verdict == "true" and server.requests == 2
    assert [call.cached for call in trace.lm_calls] == [True, True]


def test_reasks_are_bounded_and_end_in_a_typed_error_programs_can_catch():
    claim = f"always empty {uuid.uuid4().hex}"
    with StubLMServer(slips=lambda index, body: "empty") as server:
        with dspy.context(lm=_lm(server, cache=True), adapter=make_adapter("chat", max_reasks=2)), \
                trace_example() as trace:
            try:
                dspy.ChainOfThought(Judge)(claim=claim)
            except UnreadableOutput as error:  # what a method does with it: its paper-consistent degradation
                assert error.attempts == 3 and error.reason == "empty reply"
                record_degradation("judge", "kept every passage: the judge's reply could not be read")
    # every re-ask is a new conversation: the second is not the first one's cached empty reply
    assert server.requests == 3 and len(trace.reasks) == 2 and len(trace.degradations) == 1
    assert not any(call.cached for call in trace.lm_calls)


@pytest.mark.parametrize("text, annotation, value", [
    ("Yes.", bool, True), ("No, it does not.", bool, False), ("TRUE", bool, True),
    ("0 and 2", list[int], [0, 2]), ("Passages 1, 3 and 4.", list[int], [1, 3, 4]), ("None of them.", list[int], []),
    ("two", int, 2), ("I would say it is unsure.", Literal["true", "false", "unsure"], "unsure"),
    ("- a\n- b", list[str], ["a", "b"]),
    # a negated yes-word is a no (review: "Not relevant." was unreadable, and a gate then kept what it rejected)
    ("Not relevant.", bool, False), ("The passage is not relevant to the question.", bool, False),
    ("It isn't helpful", bool, False), ("is not at all helpful", bool, False), ("It is relevant", bool, True),
    # a reply that keeps nothing is [] before any number word is read as an id (review: "...no relevant one" was [1])
    ("There is no relevant one.", list[int], []), ("None of the three passages is relevant.", list[int], []),
    ("No.", list[int], []), ("There is no helpful sentence.", list[int], []), ("Not relevant", list[int], []),
    ("passages one and three", list[int], [1, 3]), ("- 0\n- 2", list[int], [0, 2]),
    ("Passage 2 is the one.", list[int], [2]), ("Not any of them.", list[int], []),
    # (diff review) what was read right before stays so: negators and no-words count as they did
    ("No, not at all.", bool, False), ("No, not really.", bool, False), ("Yes, it can't hurt.", bool, True),
    ("Yes, it doesn't contradict the passage.", bool, True),
    ("Only passage 2; none of the others are relevant.", list[int], [2]), ("None of the above except 2", list[int], [2]),
    # the same class on an option list: a negated option is not the one chosen
    ("not true, it is false", Literal["true", "false", "unsure"], "false"),
    ("It is true, not false.", Literal["true", "false", "unsure"], "true"),
])
def test_typed_values_in_words_are_read_when_unambiguous(text, annotation, value):
    assert lenient_value(text, annotation) == value


@pytest.mark.parametrize("text, annotation", [
    ("yes and no", bool), ("maybe", bool), ("true or false", Literal["true", "false", "unsure"]),
    ("no idea", list[int]), ("2 or 3", int),
    ("yes and not relevant", bool), ("0-4", list[int]), ("1 to 3", list[int]), ("0 through 2", list[int]),
    ("None of 1 and 2 is relevant", list[int]),
    ("It is not true.", Literal["true", "false", "unsure"]),
    ("2.5", list[int]),
])
def test_ambiguous_values_stay_unreadable(text, annotation):
    with pytest.raises(ValueError):
        lenient_value(text, annotation)


def test_seeded_slips_are_a_function_of_seed_and_messages_only():
    schedule = seeded_slips(0.3, seed=7)
    bodies = [{"messages": [{"role": "user", "content": f"question {i}"}]} for i in range(400)]
    draws = [schedule(0, body) for body in bodies]
    assert draws == [schedule(999, body) for body in bodies]  # the request index does not matter
    assert draws != [seeded_slips(0.3, seed=8)(0, body) for body in bodies]
    share = sum(d is not None for d in draws) / len(draws)
    assert 0.24 < share < 0.36 and {d for d in draws if d} == set(SLIP_SHAPES)
    with pytest.raises(ValueError):
        seeded_slips(0.3, shapes=["sloppy"])


def test_python_m_stubserver_serves_until_stopped():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "ragzoo.stubserver", "--port", "0", "--slips", "0.5",
                                "--capacity", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("stub LM server on http://127.0.0.1:"), line
        base = line.split()[4]
        models = json.loads(urllib.request.urlopen(base + "/models", timeout=5).read())
        assert models["data"][0]["id"] == "stub-model"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0 and "stopped after 0 chat request(s)" in err
    help_text = subprocess.run([sys.executable, "-m", "ragzoo.stubserver", "--help"], capture_output=True, text=True,
                               timeout=30)
    assert help_text.returncode == 0 and "--slips" in help_text.stdout and "--capacity" in help_text.stdout
    for flag in ("--latency", "--retry-after"):  # serving review: nan was served as no latency at all
        refused = subprocess.run([sys.executable, "-m", "ragzoo.stubserver", "--port", "0", flag, "nan"],
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and f"{flag} must be a finite number of seconds" in refused.stderr


def test_running_under_another_adapter_than_compiled_warns_once():
    from ragzoo.adapters import adapter_name, warn_adapter_mismatch

    assert adapter_name(None) == "chat" and adapter_name(dspy.XMLAdapter()) == "xml"
    assert adapter_name(make_adapter("json")) == "json" and adapter_name(dspy.JSONAdapter()) == "json"
    with pytest.warns(UserWarning, match="compiled under the xml adapter and runs under the chat adapter"):
        assert warn_adapter_mismatch("xml", "chat", where="artifacts/x") is True
    assert warn_adapter_mismatch("xml", "chat") is False  # once
    assert warn_adapter_mismatch("chat", "chat") is False and warn_adapter_mismatch(None, "json") is False


# --- review: replies read as other values than the model meant --------------------------------------------

class QA(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class PickIds(dspy.Signature):
    """Pick the sentences that help."""

    sentences: str = dspy.InputField()
    selected: list[int] = dspy.OutputField()


@pytest.mark.parametrize("reply, expected", [
    ("[2, 3]", [2, 3]), ("2, 3", [2, 3]), ("[1] and [3]", [1, 3]), ("Sentences [1] and [3]", [1, 3]),
    ("- [1]\n- [3]", [1, 3]), ("1. 2\n2. 3", [2, 3]), ("Passages 2 and 3 are relevant.", [2, 3]),
    ("Only 1.", [1]), ("passages one and three", [1, 3]),
    ("Sentence 1 is not helpful; sentence 2 is.", None), ("2 and 3 (out of 4)", None), ("2, 3 (0-based)", None),
    ("Sentence 0: no. Sentence 2: yes.", None),
])
def test_a_list_of_ids_is_read_as_ids_alone_or_reasked(reply, expected):
    """Every digit had been taken for an id ("1. 2\\n2. 3" as [1, 2, 3], "2 and 3 (out of 4)" as [2, 3, 4]), and
    DSPy's JSON repair kept the last of "[1] and [3]"; now ids alone are read, and anything said besides re-asked."""
    from ragzoo.testing import ScriptedLM

    lm = ScriptedLM({"PickIds": [f"[[ ## selected ## ]]\n{reply}\n\n[[ ## completed ## ]]",
                                 "[[ ## selected ## ]]\n[4]\n\n[[ ## completed ## ]]"]})
    with dspy.context(lm=lm, adapter=make_adapter("chat")), trace_example() as trace:
        result = dspy.Predict(PickIds)(sentences="[1] a [2] b [3] c [4] d")
    if expected is None:  # unreadable: re-asked, and the second reply is what is read
        assert result.selected == [4] and len(lm.calls) == 2 and len(trace.reasks) == 1
    else:
        assert result.selected == expected and len(lm.calls) == 1


def test_a_field_marker_glued_to_the_answer_is_no_part_of_it():
    """The stub's own `glued` slip: DSPy's strict read kept 'Paris [[ ## completed ## ]]', which scored EM 0."""
    from ragzoo.testing import ScriptedLM

    lm = ScriptedLM({"QA": "[[ ## answer ## ]]\nParis [[ ## completed ## ]]"})

    with dspy.context(lm=lm, adapter=make_adapter("chat")):
        assert dspy.Predict(QA)(question="Capital of France?").answer == "Paris"


def test_a_field_given_twice_is_read_as_the_models_last_word():
    from ragzoo.adapters import lenient_parse

    values, _ = lenient_parse(QA, "First guess:\nAnswer: London\nBut the passage says Paris.\n\n**Answer:** Paris")
    assert values["answer"] == "Paris"
    values, _ = lenient_parse(QA, "[[ ## answer ## ]]\nanswer: Paris")  # a header, then the name again
    assert values["answer"] == "Paris"


def test_a_reasoning_models_cut_reply_goes_back_as_its_text_not_its_reasoning():
    from ragzoo.adapters import _reply_text

    cut = {"text": "[[ ## answer ## ]]\nThe Eiffel", "reasoning_content": "Let me think step by step " * 50}
    assert _reply_text(cut) == "[[ ## answer ## ]]\nThe Eiffel" and _reply_text("plain") == "plain"


def test_a_list_of_text_given_python_style_still_reads_as_its_items():
    """Review of the ids fix: its JSON-only gate had reached lists of text too ("['a', 'b']" became one item)."""
    assert lenient_value("['Who directed Jaws?', 'When was Spielberg born?']", list[str]) == [
        "Who directed Jaws?", "When was Spielberg born?"]
    assert lenient_value("[a, b]", list[str]) == ["a", "b"]


@pytest.mark.parametrize("adapter, reply", [
    ("json", '{"selected": "[1] and [3]"}'), ("xml", "<selected>[1] and [3]</selected>"),
    ("chat", "[[ ## selected ## ]]\n[1] and [3]\n\n[[ ## completed ## ]]"),
])
def test_ids_given_as_text_inside_any_adapters_structure_are_not_repaired_into_others(adapter, reply):
    """Re-reading the ids fix: under the JSON and XML adapters a field holding "[1] and [3]" as text still went
    through DSPy's JSON repair and read [3]; the check now takes the field's text under every adapter."""
    from ragzoo.testing import ScriptedLM

    lm = ScriptedLM({"PickIds": reply})
    with dspy.context(lm=lm, adapter=make_adapter(adapter, max_reasks=0)):
        assert dspy.Predict(PickIds)(sentences="[1] a [2] b [3] c").selected == [1, 3]


@pytest.mark.parametrize("adapter, reply", [
    ("chat", "[[ ## selected ## ]]\n[2, 3]\n\n[[ ## completed ## ]]\nHope this helps!"),
    ("chat", "[[ ## selected ## ]]\n```json\n[2, 3]\n```\n\n[[ ## completed ## ]]"),
    ("xml", "<selected>[2, 3]</selected>\nHope this helps."),
    ("json", 'Selected: 2 and 3.\n```json\n{"selected": [2, 3]}\n```'),
    ("chat", "[[ ## selected ## ]]\n2 and 3 are both relevant\n\n[[ ## completed ## ]]"),
])
def test_a_strict_read_of_ids_is_not_reasked_for_what_follows_or_wraps_it(adapter, reply):
    """Review of the ids fix: the re-read took the whole section after the header (text after the end marker, a
    fence) or a JSON reply's preamble, and re-asked replies DSPy had read right."""
    from ragzoo.testing import ScriptedLM

    lm = ScriptedLM({"PickIds": reply})
    with dspy.context(lm=lm, adapter=make_adapter(adapter, max_reasks=0)):
        assert dspy.Predict(PickIds)(sentences="[1] a [2] b [3] c").selected == [2, 3]
    assert len(lm.calls) == 1


def test_an_end_marker_after_a_repeated_header_is_not_the_fields_last_word():
    from ragzoo.adapters import lenient_parse

    values, _ = lenient_parse(QA, "Answer: Paris\n\n[[ ## answer ## ]]\n[[ ## completed ## ]]")
    assert values["answer"] == "Paris"
