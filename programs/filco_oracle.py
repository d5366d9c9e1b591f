"""FILCO's oracle ("silver") context measures as library functions, and what FILCO builds from them.

It lives beside `programs/filco.py` because FILCO is its only user (as Post-Fusion's `voting.py` does).

Paper: "Learning to Filter Context for Retrieval-Augmented Generation" (Wang et al. 2023, arXiv 2311.08377),
§2.2 (the three measures), §2.3 (silver labels train the filter). The paper fine-tunes the filter on silver
labels; ragzoo compiles a DSPy filter predictor instead, so the labels become (a) demos / a trainset for that
predictor (`oracle_labels`, `build_filter_trainset`) and (b) its compile metric (`filter_agreement_metric`).

Measures:
- STRINC `string_inclusion(sentence, answers)`: the sentence contains a gold answer. Both sides are
  normalized (lower case, punctuation and articles removed, whitespace collapsed) and the answer must match
  whole tokens, so "1" is not found in "1927" (the official code tests a plain lower-cased substring).
- LEXICAL `lexical_overlap(sentence, reference)`: unigram F1 over normalized WORD tokens (multiset overlap),
  max over references. The paper keeps spans with F1 > λ = 0.5 (strictly greater; `LEXICAL_THRESHOLD`).
  The official code counts characters, not words; we use the standard word-level F1 the paper describes.
  For fact verification the paper scores against the query, not the label (`lexical_reference="question"`).
- CXMI `cxmi(sentence, question, output, logprob_fn)`: log p(o | t ⊕ q) − log p(o | q), the log of the
  paper's ratio M_gen(o|t⊕q) / M_gen(o|q). The paper's λ is "0.0" in the text and 1.0 on the ratio in its
  footnote; both mean a log-ratio > 0 (`CXMI_THRESHOLD = 0.0`), which is also what the official code's
  sigmoid(log-ratio) > 0.5 amounts to. The output scored is the first gold answer, as in the official code.
  CXMI needs the log-probability of a GIVEN output (teacher forcing), which chat APIs do not give: OpenAI
  chat completions with `logprobs=True` return log-probabilities of the tokens the model sampled, not of the
  gold answer. `CompletionLogprobScorer` gets them from an OpenAI-compatible /completions endpoint that
  echoes prompt log-probabilities (`echo=True, logprobs=1`), which vLLM's server does; any other
  `logprob_fn(output, question, context) -> float` works (e.g. a local Hugging Face model).
  Without one, `cxmi` raises `LMError` saying so.

Selection (`oracle_select`): the single best unit of each passage, as the paper selects a single best span
(at its top-1 setting that is the argmax over all spans; for top-k the official code takes the best sentence
per passage, which is what per-passage selection gives): STRINC takes the first sentence that contains an
answer, LEXICAL and CXMI the argmax among units scoring above the threshold (ties: the earlier sentence).

Sentence splitting (`split_sentences`): the paper uses spaCy, the official code NLTK's punkt; neither is a
dependency here (punkt needs a data download), so a regex splitter: a sentence ends at . ! or ? (plus closing
quotes/brackets) followed by whitespace and an upper-case letter, digit, quote or bracket, unless the word
before the period is a single-letter initial ("J. R. R."), a dotted abbreviation ("U.S.") or a common
abbreviation ("Dr.", "St.", "Jan.", "e.g."). Decimals ("3.5") never split because no space follows the dot.

Normalization and word F1 are the answer metrics' (`ragzoo.metrics.answer`), so the oracle and the
evaluator agree on what "contains" and "overlaps" mean.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any, Callable, Iterable, Literal, Protocol, Sequence

from ragzoo.errors import ConfigError, LMError
from ragzoo.metrics.answer import normalize_answer, token_f1
from ragzoo.metrics.fields import gold_answers as _metric_gold_answers

Measure = Literal["strinc", "lexical", "cxmi"]
Granularity = Literal["sentence", "passage"]
MEASURES: tuple[str, ...] = typing.get_args(Measure)
GRANULARITIES: tuple[str, ...] = typing.get_args(Granularity)
LEXICAL_THRESHOLD = 0.5  # §2.2 and footnote 3: the best of 0.1/0.3/0.5/0.7/0.9
CXMI_THRESHOLD = 0.0  # on the log-ratio, = 1.0 on the paper's probability ratio (footnote 4)

# ---------------------------------------------------------------------------------------------- sentences

_BOUNDARY = re.compile(r"""[.!?]+["'”’)\]]*\s+(?=["'“‘(\[]?[A-Z0-9])""")
_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft vs etc inc ltd co corp vol vols fig figs gen col lt sgt capt cmdr
adm rev gov sen rep pres hon approx ca cf al jan feb mar apr jun jul aug sep sept oct nov dec
e.g i.e a.k.a
""".split())


def _ends_with_abbreviation(text: str) -> bool:
    words = text.split()
    if not words:
        return False
    word = words[-1].lstrip("([\"'“‘").rstrip(".")
    if len(word) == 1 and word.isalpha():
        return True  # an initial: "J. R. R. Tolkien", "George W. Bush"
    return word.lower() in _ABBREVIATIONS or "." in word  # "Dr.", "U.S.", "a.k.a."


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences with the regex rule described in the module docstring."""
    text = " ".join(text.split())
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        candidate = text[start:match.end()]
        punctuation = match.group(0).strip()
        if punctuation.startswith(".") and _ends_with_abbreviation(text[start:match.start() + 1]):
            continue
        if candidate.strip():
            sentences.append(candidate.strip())
        start = match.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


# ------------------------------------------------------------------------------------------------ measures

def unigram_f1(text: str, reference: str) -> float:
    """Word-level unigram F1 after SQuAD normalization (no HotPotQA yes/no special case)."""
    return token_f1(text, reference, hotpot_special_case=False)


def _as_list(references: str | Sequence[str]) -> list[str]:
    return [references] if isinstance(references, str) else [r for r in references if isinstance(r, str)]


def string_inclusion(sentence: str, answers: str | Sequence[str]) -> bool:
    """STRINC: True when the sentence contains any gold answer (normalized, whole tokens)."""
    padded = f" {normalize_answer(sentence)} "
    return any(normalized and f" {normalized} " in padded
               for normalized in (normalize_answer(answer) for answer in _as_list(answers)))


def lexical_overlap(sentence: str, reference_text: str | Sequence[str]) -> float:
    """LEXICAL: unigram F1 between the sentence and the reference (max over several references)."""
    return max((unigram_f1(sentence, reference) for reference in _as_list(reference_text)), default=0.0)


def lexical_match(sentence: str, reference_text: str | Sequence[str], threshold: float = LEXICAL_THRESHOLD) -> bool:
    """True when the unigram F1 is strictly above the threshold (the paper's f_uf1 > λ)."""
    return lexical_overlap(sentence, reference_text) > threshold


class LogProbFn(Protocol):
    """log p(output | context, question): the summed token log-probabilities of `output` given a prompt
    made of the question and, when `context` is not None, that context before it (t ⊕ q)."""

    def __call__(self, output: str, question: str, context: str | None) -> float: ...


NO_LOGPROBS = ("CXMI needs token log-probabilities of the gold answer, and none are available: pass a "
               "logprob_fn (e.g. ragzoo.programs.filco_oracle.CompletionLogprobScorer for a vLLM "
               "OpenAI-compatible server), "
               "or use measure 'strinc' or 'lexical'")


def cxmi(sentence: str, question: str, output: str, logprob_fn: LogProbFn | None,
         base_logprob: float | None = None) -> float:
    """CXMI: log p(output | sentence ⊕ question) − log p(output | question).

    Positive when the sentence makes the gold output more likely. `base_logprob` reuses log p(o | q) when
    scoring many sentences of one example."""
    if logprob_fn is None:
        raise LMError(NO_LOGPROBS)
    if base_logprob is None:
        base_logprob = logprob_fn(output, question, None)
    return float(logprob_fn(output, question, sentence)) - float(base_logprob)


def cxmi_scores(units: Sequence[str], question: str, output: str, logprob_fn: LogProbFn | None) -> list[float]:
    """CXMI of every unit, computing log p(o | q) once."""
    if logprob_fn is None:
        raise LMError(NO_LOGPROBS)
    base = logprob_fn(output, question, None)
    return [cxmi(unit, question, output, logprob_fn, base_logprob=base) for unit in units]


# ------------------------------------------------------------------------------ log-probabilities from a server

CXMI_PROMPT = "{context}question: {question}\nanswer:"


class CompletionLogprobScorer:
    """A `LogProbFn` backed by an OpenAI-compatible `/completions` endpoint that echoes prompt
    log-probabilities (`echo=True`, `logprobs=1`): vLLM's server does. The prompt is
    "context: {t}\\nquestion: {q}\\nanswer:" (without the context line for the base), the scored
    continuation " {output}"; the log-probabilities of the tokens from the continuation onward are summed.

    OpenAI's chat API cannot do this: `logprobs=True` there covers sampled tokens only. Servers that do not
    echo prompt log-probabilities raise `LMError`.

    Each request is an LM call that is paid for: it counts on the open usage meters (`ragzoo.usage`) as a call
    of signature `filco.cxmi` with the tokens the server reports, priced as `lm` (the LM whose server this is:
    its --price, else its list price) would be, reserves its place on their budgets before it is sent
    (`--max-calls`, `--max-cost` bound it; past them, `BudgetExceeded`), and joins the current example's trace."""

    SIGNATURE = "filco.cxmi"

    def __init__(self, model: str, api_base: str, api_key: str | None = None, timeout: float = 60.0,
                 client: Any = None, lm: Any = None):
        import httpx

        self.model = model
        self.url = api_base.rstrip("/") + "/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(timeout=timeout)
        self.lm = lm

    def __call__(self, output: str, question: str, context: str | None) -> float:
        prefix = CXMI_PROMPT.format(context=f"context: {context}\n" if context is not None else "", question=question)
        body = {"model": self.model, "prompt": prefix + " " + output, "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": 1}
        response = self._metered_post(body)
        if response.status_code >= 400:
            raise LMError(f"{self.url} answered HTTP {response.status_code} to an echo=True/logprobs request; "
                          f"CXMI needs a server that returns prompt log-probabilities (e.g. vLLM)")
        try:
            logprobs = response.json()["choices"][0]["logprobs"]
            tokens_logprobs, offsets = logprobs["token_logprobs"], logprobs["text_offset"]
        except (KeyError, IndexError, TypeError, ValueError):
            raise LMError(f"{self.url} returned no prompt log-probabilities; {NO_LOGPROBS}") from None
        end = len(prefix) + 1 + len(output)
        picked = [value for value, offset in zip(tokens_logprobs, offsets) if len(prefix) <= offset < end]
        if not picked or any(value is None for value in picked):
            raise LMError(f"{self.url} did not echo the log-probabilities of the scored answer; {NO_LOGPROBS}")
        return float(sum(picked))

    def _metered_post(self, body: dict):
        """POST `body` as one metered LM call (see the class docstring); the response, whatever its status."""
        import time

        from ragzoo.engines import approx_tokens
        from ragzoo.tracing import LMCallRecord, record_lm_call
        from ragzoo.usage import Usage, call_cost, open_meters

        meters = open_meters()
        budgets = [meter.budget for meter in meters if meter.budget is not None]
        # what the request could cost: its prompt (echoed, so counted once) and its one sampled token
        estimate = call_cost(self.lm, approx_tokens(body["prompt"]), body["max_tokens"]) \
            if any(budget.max_cost is not None for budget in budgets) else 0.0
        reserved = []
        try:
            for budget in budgets:
                budget.reserve(estimate)
                reserved.append(budget)
        except Exception:  # BudgetExceeded: nothing is sent, and what was reserved is given back
            for budget in reserved:
                budget.release()
                budget.settle(estimate)
            raise
        started = time.perf_counter()
        try:
            try:
                response = self.client.post(self.url, json=body, headers=self.headers)
            except Exception as error:  # connection refused, timeout: a server problem, not a bug here
                for meter in meters:
                    meter.usage.add_failure()
                raise LMError(f"cannot reach {self.url} for CXMI log-probabilities: {error}") from error
            prompt_tokens, completion_tokens = _reported_tokens(response)
            record = LMCallRecord(signature=self.SIGNATURE, model=str(getattr(self.lm, "model", None) or self.model),
                                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  cost=call_cost(self.lm, prompt_tokens, completion_tokens),
                                  latency=time.perf_counter() - started)
            for meter in meters:
                meter.record(record)
            if isinstance(getattr(self.lm, "usage", None), Usage):  # the LM's running totals, as its calls add
                self.lm.usage.add(record)
            record_lm_call(record)
            return response
        finally:
            for budget in reserved:
                budget.settle(estimate)


def _reported_tokens(response) -> tuple[int, int]:
    """(prompt, completion) tokens an OpenAI-compatible response reports in `usage`; 0 for what it does not."""
    try:
        usage = response.json().get("usage")
    except (ValueError, AttributeError):
        usage = None
    counts = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key) if isinstance(usage, dict) else None
        counts.append(int(value) if isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value) and value >= 0 else 0)
    return counts[0], counts[1]


def _served_model(model: str) -> str:
    """The model name an OpenAI-compatible server knows: the LiteLLM spec without its provider prefix
    ("openai/llama-3-8b" -> "llama-3-8b", "hosted_vllm/x" -> "x")."""
    return model.split("/", 1)[1] if "/" in model else model


def logprob_scorer_for(lm: Any, probe: bool = True) -> tuple[LogProbFn | None, str]:
    """A CXMI scorer for the LM a compile runs with, or None and why there is none.

    An LM served from an OpenAI-compatible server (`--api-base`, e.g. vLLM) gets a `CompletionLogprobScorer`
    on that server and model; with `probe`, one request checks that the server echoes prompt
    log-probabilities before any label is built from it. A hosted chat API (no api_base) cannot score a given
    answer (its `logprobs` cover sampled tokens only), nor can the dry-run LM. The key is the one the LM
    sends: an explicit `api_key` option, else its provider's variable in the environment; it is never part of
    what this returns or raises."""
    import os

    from ragzoo.engines import is_dry_run
    from ragzoo.secrets import redact, strip_url

    if lm is None:
        return None, "no LM is configured"
    if is_dry_run(lm):
        return None, "the dry-run LM has no log-probabilities"
    kwargs = dict(getattr(lm, "kwargs", {}) or {})
    api_base = kwargs.get("api_base") or kwargs.get("base_url")
    model = str(getattr(lm, "model", "") or "")
    if not api_base:
        return None, (f"{model or 'the LM'} is a hosted chat API, whose log-probabilities cover only the tokens "
                      f"it samples; CXMI scores a given answer through an OpenAI-compatible /completions server "
                      f"that echoes prompt log-probabilities (vLLM: --api-base)")
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    key = kwargs.get("api_key") or os.environ.get(f"{provider.upper()}_API_KEY")
    scorer = CompletionLogprobScorer(_served_model(model), str(api_base), api_key=key, lm=lm)
    shown = strip_url(scorer.url)  # what manifests and notes may show of the URL
    if probe:
        try:
            scorer("yes", "Is this a probe?", None)
        except LMError as error:
            return None, str(redact(str(error).replace(scorer.url, shown)))
    return scorer, f"prompt log-probabilities from {shown} ({_served_model(model)})"


class CountingScorer:
    """A `LogProbFn` that counts its requests, for the compile stage's record (`logprob_requests`): a
    `CompletionLogprobScorer`'s are on the usage meter too, a caller's own `logprob_fn` is not seen by it."""

    def __init__(self, scorer: LogProbFn):
        self.scorer, self.requests = scorer, 0

    def __call__(self, output: str, question: str, context: str | None) -> float:
        self.requests += 1
        return self.scorer(output, question, context)


class LabelledExamples(list):
    """A compile stage's labelled examples plus `record`: what the stage's manifest record should say about
    how they were built (FILCO: which measure labelled them, and why when it is not the one asked for).
    `ragzoo.optimizers.stages.run_stages` copies `record` into the stage's record."""

    def __init__(self, examples: Iterable[Any] = (), record: dict | None = None):
        super().__init__(examples)
        self.record = dict(record or {})


# ------------------------------------------------------------------------------------------- oracle labels


def _check(measure: str, granularity: str = "sentence") -> None:
    if measure not in MEASURES:
        raise ConfigError(f"unknown FILCO measure {measure!r}; use one of {', '.join(MEASURES)}")
    if granularity not in GRANULARITIES:
        raise ConfigError(f"unknown FILCO granularity {granularity!r}; use one of {', '.join(GRANULARITIES)}")


def gold_answers(example: Any) -> list[str]:
    """The gold answers of an example (`answers`, else `answer`), as the answer metrics read them; an
    example without them raises `DataError`."""
    return _metric_gold_answers(example)


def oracle_select(units: Sequence[str], *, question: str, answers: str | Sequence[str], measure: Measure = "strinc",
                  threshold: float | None = None, logprob_fn: LogProbFn | None = None,
                  lexical_reference: Literal["answer", "question"] = "answer") -> list[int]:
    """Indices of the oracle-selected units of ONE passage: the single best one, or [] if none qualifies.

    `threshold` defaults to the paper's λ for the measure (0.5 lexical, 0.0 log-ratio CXMI; unused by STRINC)."""
    _check(measure)
    answers = _as_list(answers)
    if not units:
        return []
    if measure == "strinc":
        return next(([index] for index, unit in enumerate(units) if string_inclusion(unit, answers)), [])
    if measure == "lexical":
        reference = question if lexical_reference == "question" else answers
        scores = [lexical_overlap(unit, reference) for unit in units]
        threshold = LEXICAL_THRESHOLD if threshold is None else threshold
    else:
        if not answers:
            return []
        scores = cxmi_scores(units, question, answers[0], logprob_fn)
        threshold = CXMI_THRESHOLD if threshold is None else threshold
    qualifying = [index for index, score in enumerate(scores) if score > threshold and not math.isnan(score)]
    return [max(qualifying, key=lambda index: (scores[index], -index))] if qualifying else []


def oracle_labels(example: Any, passages: Iterable[Any], measure: Measure = "strinc",
                  granularity: Granularity = "sentence", threshold: float | None = None,
                  logprob_fn: LogProbFn | None = None,
                  lexical_reference: Literal["answer", "question"] = "answer") -> list:
    """Silver filter labels for one question: one `dspy.Example` per passage, with the inputs of the
    program's filter predictor and its oracle output.

    granularity "sentence": inputs (question, title, sentences) -> `selected` (list[int]; [] when no sentence
    qualifies; passages without text are skipped, as the program does not call the filter on them).
    granularity "passage": inputs (question, passage) -> `keep` (bool), the whole passage as the one unit."""
    import dspy

    from ragzoo.signatures.filco import format_sentences

    _check(measure, granularity)
    question, answers = example["question"], gold_answers(example)
    options = dict(question=question, answers=answers, measure=measure, threshold=threshold,
                   logprob_fn=logprob_fn, lexical_reference=lexical_reference)
    labels = []
    for passage in passages:
        if granularity == "passage":
            keep = bool(oracle_select([passage.long_text], **options))
            labels.append(dspy.Example(question=question, passage=passage.long_text, keep=keep)
                          .with_inputs("question", "passage"))
            continue
        sentences = split_sentences(passage.text)
        if not sentences:
            continue
        labels.append(dspy.Example(question=question, title=passage.title, sentences=format_sentences(sentences),
                                   selected=oracle_select(sentences, **options))
                      .with_inputs("question", "title", "sentences"))
    return labels


def build_filter_trainset(examples: Iterable[Any], retriever: Callable[[str, int], list], measure: Measure = "strinc",
                          k: int = 1, granularity: Granularity = "sentence", threshold: float | None = None,
                          logprob_fn: LogProbFn | None = None,
                          lexical_reference: Literal["answer", "question"] = "answer",
                          positives_only: bool = False) -> list:
    """Retrieve the top-k passages of each question and label them with `oracle_labels`: a trainset (or
    demo pool) for the filter predictor, one example per passage. `positives_only` drops passages whose
    oracle selection is empty (by default they stay: they teach the filter to select nothing)."""
    trainset = []
    for example in examples:
        for label in oracle_labels(example, retriever(example["question"], k), measure, granularity, threshold,
                                   logprob_fn, lexical_reference):
            if positives_only and not label.get("selected", label.get("keep")):
                continue
            trainset.append(label)
    return trainset


def _field(record: Any, name: str) -> Any:
    if hasattr(record, "get"):
        try:
            return record.get(name)
        except Exception:  # dspy.Prediction.get follows dict.get; anything else means "absent"
            return None
    return getattr(record, name, None)


def filter_agreement_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """Agreement of the filter's selection with the oracle's, the metric the filter is compiled against.

    Sentence labels: F1 between the predicted and oracle index sets (both empty = 1.0, one empty = 0.0).
    Passage labels: 1.0 when keep/drop matches. During bootstrapping (`trace` is not None) only a perfect
    agreement counts, so only demos that reproduce the oracle are kept."""
    oracle_keep = _field(example, "keep")
    if oracle_keep is not None and _field(example, "selected") is None:
        score = float(bool(_field(pred, "keep")) == bool(oracle_keep))
    else:
        gold = {int(index) for index in (_field(example, "selected") or [])}
        predicted = {int(index) for index in (_field(pred, "selected") or [])}
        if not gold and not predicted:
            score = 1.0
        elif not gold or not predicted:
            score = 0.0
        else:
            common = len(gold & predicted)
            score = 0.0 if common == 0 else 2 * common / (len(gold) + len(predicted))
    return score >= 1.0 if trace is not None else score
