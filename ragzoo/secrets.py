"""Recognising secrets, so that none is taken from a flag, a config file or an LM option, and none is written.

Keys come from the environment only. This module is the one place that says what looks like a credential:
an option name (`api_key`, `token`, `password`, ...) or a value shaped like a provider key (sk-..., hf_...,
Bearer ...). `strict` adds any unbroken run of 40+ key characters, which is right for LM specs, LM options
and URLs, but too eager for file paths and questions.

And the one rule for what leaves the process: `redact(text)` / `scrub(record)` hide every known secret value
(the environment's `*_API_KEY`/`*_TOKEN`/... values, the credentials of an endpoint given on the command line)
and anything shaped like a provider key. Every writer of run records, grids, Optuna storage, cell logs and
the command's output goes through them; `storable` adds, for configurations, URLs without credentials and
secret-named entries masked.
"""

from __future__ import annotations

import re
from typing import Any, Callable

SECRET_NAME = re.compile(r"(api[_-]?key|(^|[_-])key|secret|password|passwd|credential|token|auth|authorization)$",
                         re.IGNORECASE)
_KEY_SHAPES = (r"sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{12,}|hf_[A-Za-z0-9]{12,}|"
               r"xai-[A-Za-z0-9]{12,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+\S+")
# a key starts a word: "sk-..." inside "risk-adjusted-returns" or "task-oriented-dialogue" is prose
_WORD_CHARACTER = "[A-Za-z0-9]"
_KEY_START = f"(?<!{_WORD_CHARACTER})"
_SECRET_VALUE = re.compile(f"{_KEY_START}({_KEY_SHAPES})")
# what redaction hides by shape: the key shapes, but a Bearer token only with a digit in it (prose such as
# "the Torch Bearer in Young Chef Olympiad" or "Water Bearer Films" is a model's answer, not a credential)
def _starting_a_word(shapes: str) -> str:
    """`_KEY_START` + `shapes`, with each alternative's literal first and the character before it checked after
    ("sk-(?<![A-Za-z0-9]sk-)..."): the same matches, but a pattern whose alternatives all open with a literal is
    scanned by those first characters, not tried at every position (5x faster on a record's ~3 KB of text)."""
    alternatives = []
    for alternative in shapes.split("|"):
        literal = re.match(r"[A-Za-z_-]+", alternative).group(0)
        alternatives.append(f"{literal}(?<!{_WORD_CHARACTER}{re.escape(literal)}){alternative[len(literal):]}")
    return "(?:" + "|".join(alternatives) + ")"


_REDACTED_SHAPES = _starting_a_word(_KEY_SHAPES.replace(
    r"Bearer\s+\S+", r"Bearer\s+(?=[^\s]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*"))
_SECRET_VALUE_STRICT = re.compile(f"{_KEY_START}({_KEY_SHAPES})|([A-Za-z0-9_\\-]{{40,}})")
SECRET_HINT = "keys are read from the environment only (e.g. export OPENAI_API_KEY=...)"
MASK = "***"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name)))


def looks_like_secret(value: Any, *, strict: bool = False) -> bool:
    """True if `value` (a string, or a list/tuple/dict holding strings) contains something shaped like a key."""
    if isinstance(value, str):
        return bool((_SECRET_VALUE_STRICT if strict else _SECRET_VALUE).search(value))
    if isinstance(value, (list, tuple)):
        return any(looks_like_secret(v, strict=strict) for v in value)
    if isinstance(value, dict):
        return any(looks_like_secret(v, strict=strict) for v in value.values())
    return False


def masked(name: str, value: Any) -> Any:
    """`value` with anything secret (by its name or its shape) replaced by `***`, recursively for dicts."""
    if is_secret_name(name):
        return MASK if value else value
    if isinstance(value, dict):
        return {key: masked(str(key), item) for key, item in value.items()}
    if looks_like_secret(value, strict=True):
        return MASK
    return value


# ---------------------------------------------------------------------------------------------------------
# Endpoints stored without credentials, and known secret values redacted from every error text

SECRET_ENV = re.compile(r"(_API_KEY|_API_TOKEN|_TOKEN|_SECRET|_SECRET_KEY|_PASSWORD|_ACCESS_KEY)$", re.IGNORECASE)
# endpoints the libraries ragzoo calls read from the environment and echo in their own logs and errors (the hub
# client logs "... thrown while requesting HEAD <url>"): their credentials are secrets as a *_TOKEN's value is
ENDPOINT_ENV = re.compile(r"^(HF_ENDPOINT|OPENAI_BASE_URL|OPENAI_API_BASE|HTTPS?_PROXY|ALL_PROXY)$", re.IGNORECASE)
MIN_SECRET_LENGTH = 8  # shorter values ("stub", "none") would mangle ordinary text; real keys are longer
NOT_SECRETS = {"ragzoo-no-key"}  # the placeholder key ragzoo itself sends to local servers
# a path segment that is a credential rather than a route: 20+ word characters mixing letters and digits, with no
# dash or dot (a deployment name such as gpt-4o-mini-2024-07-18 is a route), or 24+ hex digits
_TOKEN_SEGMENT = re.compile(r"^((?=[A-Za-z0-9_]*[0-9])(?=[A-Za-z0-9_]*[A-Za-z])[A-Za-z0-9_]{20,}|[0-9a-fA-F]{24,})$")
_VERSION_VALUE = re.compile(r"^[0-9][0-9.\-]*(-?[A-Za-z]+)?$")
# a character that continues a userinfo's word (letters, digits, RFC 3986's unreserved, %, +, :): an endpoint's
# userinfo is hidden only where it starts after none of these and is followed by "@", so "al:pw" is hidden in
# "'al:pw@proxy'" and "proxy=al:pw@proxy", not in "sal:pw@x" (quotes, "=", "(" and "/" are where URLs start)
_USERINFO_CHARS = r"A-Za-z0-9\-._~%+:"
_registered: set[str] = set()
# the userinfo of every endpoint registered from the command line or a config file (`register_url`): hidden where
# a URL holds it, however short, as an endpoint variable's is (`endpoint_userinfos`)
_registered_userinfos: set[str] = set()


def _usable_secret(value: str | None) -> bool:
    return bool(value) and len(value) >= MIN_SECRET_LENGTH and value not in NOT_SECRETS


def register_secret(value: str | None) -> None:
    """Remember a secret value met at run time (a credential found in an endpoint), so `redact` hides it."""
    if isinstance(value, str) and _usable_secret(value.strip()):
        _registered.add(value.strip())


def known_secrets() -> list[str]:
    """Values `redact` hides: every `*_API_KEY`/`*_TOKEN`/`*_SECRET`/`*_PASSWORD` variable of the environment,
    the credentials of an endpoint variable (`ENDPOINT_ENV`) and every credential registered from an endpoint;
    longest first (a key containing another is hidden whole)."""
    import os

    environ = os.environ  # names first: decoding every value costs more than the whole rest (run per record)
    names = list(environ)
    values = {environ.get(name) for name in names if SECRET_ENV.search(name)}
    for name in names:
        if ENDPOINT_ENV.match(name):
            values.update(url_credentials(environ.get(name) or ""))
    values = {value for value in values if _usable_secret(value)} | _registered
    return sorted(values, key=len, reverse=True)


def endpoint_userinfos() -> list[str]:
    """The userinfo (`user:password`, or `user` alone) of every endpoint variable (`ENDPOINT_ENV`), with or
    without a scheme (`HTTPS_PROXY=user:pw@proxy:3128` is what curl and requests accept). `redact` hides each where
    a URL holds it (followed by "@"), however short: a proxy's `alice:pw` is below `MIN_SECRET_LENGTH` as a value
    of its own, but never ordinary text in front of an "@". A user without a password counts too: a proxy or a
    mirror may take a token as the user name (`https://TOKEN@host`), and nothing tells the two apart."""
    import os

    found = set()
    for name in list(os.environ):
        if ENDPOINT_ENV.match(name):
            userinfo = _userinfo(os.environ.get(name) or "")
            if userinfo:
                found.add(userinfo)
    return sorted(found, key=len, reverse=True)


def _authority_url(url: str) -> str:
    """`url` as `urlsplit` reads its host and userinfo: a scheme-less endpoint (`user:pw@host:3128`, as proxy
    variables are often given) would otherwise be read as scheme `user` and path `pw@host:3128`."""
    if "://" in url or "@" not in url.split("/", 1)[0]:
        return url
    return "//" + url


def environ_memo(compute: Callable[[], Any], version: Callable[[], Any] = lambda: None) -> Callable[[], Any]:
    """`compute()`, computed again only once `os.environ` (or `version()`) changed. For what is derived from the
    environment on every LM call or record (secret values, proxy settings): reading it decodes every variable,
    which cost more than the rest of a record's scrub. The check compares the environment's raw items with a
    copy (C code, no decoding); where there are none to compare (`os.environ` replaced by a plain mapping),
    every call computes."""
    import os

    state: list = [None]  # (raw items, version, value), swapped whole: threads read one consistent state

    def cached() -> Any:
        raw = getattr(os.environ, "_data", None)
        if not isinstance(raw, dict):
            return compute()
        seen, now = state[0], version()
        if seen is not None and seen[1] == now and seen[0] == raw:
            return seen[2]
        snapshot = dict(raw)  # before computing: a change meanwhile makes the next call compute again
        value = compute()
        state[0] = (snapshot, now, value)
        return value

    return cached


def _compile_redaction() -> tuple[tuple[str, ...], re.Pattern, re.Pattern | None]:
    values = tuple(known_secrets())
    # the userinfo's literal first, its start checked after (a lookbehind over it and the character before):
    # a pattern whose every alternative opens with a literal is scanned by its first characters, 2x faster
    userinfos = sorted({*endpoint_userinfos(), *_registered_userinfos}, key=len, reverse=True)
    in_urls = [f"{re.escape(userinfo)}(?=@)(?<![{_USERINFO_CHARS}]{re.escape(userinfo)})" for userinfo in userinfos]
    known = [*map(re.escape, values), *in_urls]
    return values, re.compile("|".join([*known, _REDACTED_SHAPES])), re.compile("|".join(known)) if known else None


# registered credentials are only ever added: their count says whether the set changed
_redaction = environ_memo(_compile_redaction, version=lambda: (len(_registered), len(_registered_userinfos)))


def _redaction_pattern() -> re.Pattern:
    """One regex for every known secret value (longest first) and the key shapes, compiled once per set of
    values: a record's strings are each scanned once, whatever the number of keys."""
    return _redaction()[1]


def redact(text: Any) -> Any:
    """`text` with every known secret value (environment keys, endpoint credentials) and anything shaped like a
    provider key (sk-..., hf_..., Bearer <token>) replaced by `***`. Non-strings are returned unchanged."""
    if not isinstance(text, str) or not text:
        return text
    return _redaction_pattern().sub(MASK, text)


def scrub(value: Any) -> Any:
    """A JSON-ready record (dicts, lists, strings, numbers; keys and values, recursively) as it may be written:
    every string `redact`ed; a value JSON cannot hold is written as its redacted `str` (what `json.dumps(...,
    default=str)` would write). The one pass applied by every record writer (run predictions, summary and
    config, grid.json, Optuna attributes)."""
    return _scrub(value, _redaction_pattern())


def scrub_reply(outputs: Any) -> Any:
    """What an LM call returns (DSPy's list of texts, or of dicts with "text", "reasoning_content", "tool_calls",
    ...), as the program may see it: itself when no text holds a known secret (nearly always), else a copy with
    each known secret value (the environment's keys, an endpoint's credentials) as `***`, in every string down to
    the tool calls' arguments. An upstream that echoes the key it was sent thus never gives it to the program, so
    nothing the program makes of its answers (a record, an optimizer's state files, a served reply) can carry it.
    Only known values: a text merely shaped like a key ("risk-adjusted-returns" ends in "sk-...") is an answer,
    which the record writers mask as they write, after it was scored."""
    known = _redaction()[2]
    if known is None or not isinstance(outputs, list) or not _holds(outputs, known):
        return outputs
    return redacted_copy(outputs, known)


def redacted_copy(value: Any, pattern: re.Pattern | None = None) -> Any:
    """A private copy of `value` with every string in it redacted (`pattern`, default: what `redact` hides):
    dicts, lists and tuples rebuilt, objects (pydantic models such as LiteLLM's responses and tool calls) through
    their attribute dicts. Raises what `copy.deepcopy` raises for an object that cannot be copied."""
    import copy

    return _redact_strings(copy.deepcopy(value), set(), pattern or _redaction_pattern())


def _redact_strings(value: Any, seen: set, pattern: re.Pattern) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value) if value else value
    if value is None or isinstance(value, (bool, int, float, bytes)) or id(value) in seen:
        return value
    seen.add(id(value))
    if isinstance(value, dict):
        for key in list(value):
            item = _redact_strings(value.pop(key), seen, pattern)
            value[pattern.sub(MASK, key) if isinstance(key, str) else key] = item
        return value
    if isinstance(value, list):
        value[:] = [_redact_strings(item, seen, pattern) for item in value]
        return value
    if isinstance(value, tuple):
        items = [_redact_strings(item, seen, pattern) for item in value]
        return tuple(items) if type(value) is tuple else type(value)(*items)
    for name in ("__dict__", "__pydantic_extra__", "__pydantic_private__"):
        attributes = getattr(value, name, None)
        if isinstance(attributes, dict):
            _redact_strings(attributes, seen, pattern)
    return value


def holds_secret(value: Any) -> bool:
    """Whether `scrub(value)` would hide anything: every text of `value` (keys and values, and the `str` of a value
    JSON cannot hold) is searched at once, joined by NUL. A match inside one text is a match of the joined texts
    (the patterns look behind only for a character that continues a word or a userinfo, which NUL never does, so
    a text's start after NUL is a start as it is alone), so False means `scrub` changes no text and the value may
    be written as it is: a clean record (nearly all) is not copied string by string."""
    return _holds(value, _redaction_pattern())


def _holds(value: Any, pattern: re.Pattern) -> bool:
    texts: list[str] = []
    _texts(value, texts)
    return pattern.search("\x00".join(texts)) is not None


_SCALARS = (type(None), bool, int, float)


def _texts(value: Any, texts: list[str]) -> None:
    # exact types first (a record is plain dicts, lists and strings; this walk runs on every record written), then
    # their subclasses as before
    kind = type(value)
    if kind is str:
        texts.append(value)
    elif kind is dict or (kind is not list and isinstance(value, dict)):
        for key, item in value.items():
            if isinstance(key, str):
                texts.append(key)
            if type(item) is str:
                texts.append(item)
            elif type(item) not in _SCALARS:
                _texts(item, texts)
    elif kind is list or isinstance(value, (list, tuple)):
        for item in value:
            if type(item) is str:
                texts.append(item)
            elif type(item) not in _SCALARS:
                _texts(item, texts)
    elif isinstance(value, str):
        texts.append(value)
    elif not isinstance(value, _SCALARS):
        texts.append(str(value))


def _scrub(value: Any, pattern: re.Pattern) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value) if value else value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {_scrub(key, pattern) if isinstance(key, str) else key: _scrub(item, pattern)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(item, pattern) for item in value]
    return pattern.sub(MASK, str(value))


def register_url(url: Any, *, paths: bool = True) -> None:
    """Register the credentials of an endpoint given on the command line (see `url_credentials`), so that
    `redact` hides them wherever they are echoed. `paths=False` for a URL whose path names a file
    (sqlite:///runs/grid.db: a folder name is not a credential)."""
    if not isinstance(url, str) or "://" not in url:
        return
    for value in url_credentials(url, paths=paths):
        register_secret(value)
    userinfo = _userinfo(url)
    if userinfo:
        _registered_userinfos.add(userinfo)


def _userinfo(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        netloc = urlsplit(_authority_url(url)).netloc
    except ValueError:
        return None
    return netloc.rpartition("@")[0] or None


def url_credentials(url: str, *, paths: bool = True) -> list[str]:
    """The credential parts of a URL (with or without its scheme): userinfo (user, password, and the two as they
    stand together, each also %-decoded, and as Basic auth sends them), query values, token-like path segments
    (unless not `paths`)."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    url = _authority_url(url)
    try:
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        found = [parts.username, parts.password, userinfo]
        found += [unquote(value) for value in found if value and unquote(value) != value]
        if userinfo:  # as an HTTP client sends it (Basic auth), which a server may echo in an error body
            found.append(_basic_auth(unquote(parts.username or ""), unquote(parts.password or "")))
        found += [value for _name, value in parse_qsl(parts.query, keep_blank_values=True)
                  if not _VERSION_VALUE.match(value)]  # every query value but a version or date (api-version=...)
        if paths:
            found += [unquote(segment) for segment in parts.path.split("/") if _is_token_segment(unquote(segment))]
        if parts.fragment:
            found.append(parts.fragment)
    except ValueError:
        return []
    return [value for value in found if value]


def carries_credentials(url: str) -> bool:
    """Whether an LM server's URL holds a credential (a user or password, a secret-named or key-shaped query
    value): refused where it is given, since the key belongs in the environment."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return True  # not a URL urllib can read: refused rather than guessed at
    return bool(user or password or looks_like_secret(parts.query, strict=True)
                or any(is_secret_name(key) for key in re.findall(r"([^&=]+)=", parts.query)))


def _basic_auth(user: str, password: str) -> str:
    """The base64 credentials of an HTTP Basic `Authorization` header for this user and password."""
    import base64

    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _is_token_segment(segment: str) -> bool:
    return bool(_TOKEN_SEGMENT.match(segment)) or looks_like_secret(segment, strict=True)


def strip_url(url: Any) -> Any:
    """`url` as it may be stored: no userinfo, no query, no fragment, token-like path segments as `***`.
    Every removed part is registered, so it is also redacted from error texts. Non-URLs are returned unchanged."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    if not isinstance(url, str) or "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    # a database file's or a file's URL (sqlite:///runs/a_long_folder_name_2024/s.db): its path is where it is,
    # not a token (a long folder name was registered as a secret and masked in every output)
    paths = parts.scheme.split("+")[0].lower() not in _FILE_SCHEMES
    for value in url_credentials(url, paths=paths):
        register_secret(value)
    if not paths:  # as given, less its query and fragment (urlunsplit would make sqlite:////abs a host "abs")
        return url.split("#", 1)[0].split("?", 1)[0]
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    path = "/".join(MASK if _is_token_segment(unquote(segment)) else segment for segment in parts.path.split("/"))
    return urlunsplit((parts.scheme, netloc, path, "", ""))


_FILE_SCHEMES = ("sqlite", "file")


def strip_endpoint(endpoint: str) -> str:
    """An endpoint a user gave (a server's or a mirror's address), as output may name it: `strip_url`, and the
    same for one given without its scheme or with a misspelt one (`user:pw@host:8893/api`, `htp://user:pw@host`),
    which `strip_url` leaves alone as not a URL. Every removed part is registered for redaction."""
    if not isinstance(endpoint, str):
        return endpoint
    if "://" in endpoint:  # any scheme, a misspelt one too: strip_url reads its authority
        return strip_url(endpoint)
    # none: what is there read as the authority and path of an http URL
    shown = strip_url("http://" + endpoint)
    return shown if shown == MASK else shown[len("http://"):]


def strip_spec(spec: Any) -> Any:
    """A retriever spec as it may be stored: a `colbertv2:URL` keeps its URL without credentials."""
    if not isinstance(spec, str) or "://" not in spec:
        return spec
    scheme, sep, rest = spec.partition(":")
    if "://" in scheme + sep:  # a bare URL
        return strip_url(spec)
    return f"{scheme}:{strip_url(rest)}" if rest.split("://", 1)[0].isalpha() else strip_url(spec)


def storable(value: Any, name: str = "") -> Any:
    """A configuration (dict/list/str, recursively) as it may be written to config.json or a manifest: URLs
    without credentials, secret-named entries and key-shaped values masked."""
    if isinstance(value, dict):
        return {key: storable(item, str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(item, name) for item in value]
    if isinstance(value, str):
        if is_secret_name(name) and value:
            return MASK
        return redact(strip_spec(value)) if "://" in value else redact(value)
    return value


class RedactingStream:
    """stdout/stderr while a command runs: every known secret (the environment's *_API_KEY/*_TOKEN values, the
    credentials of an endpoint) and anything shaped like a key is written as `***` (`ragzoo.secrets.redact`), so
    an LM server that echoes the key in its error cannot get it printed, whoever prints it (ragzoo, DSPy, LiteLLM,
    a logger created during the command). Every process that prints wraps its streams: the CLI's, and each
    process `serve --workers` spawns (a spawned process starts from the raw streams)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(redact(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)
