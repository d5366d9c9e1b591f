"""Compiled-program artifacts: a directory holding `program.json` (DSPy's JSON state, never a pickle) and
`manifest.json` (what the program is and how it was made).

`save(program, path, ...)` writes both files into a temporary sibling directory (each file written to a temp
file, fsynced and renamed) and then renames the directory into place, so a crash leaves either the old
artifact or the new one. `load(path)` rebuilds the program from the manifest through the method registry and
the retriever spec, checks everything it can (format version, sha256 of program.json, signature hashes,
predictor names, DSPy version) and only then loads the state: it returns a fully loaded program or raises
`ArtifactError`, never a half-loaded one.

The signature hashes in the manifest are those of the method as the code builds it (before compilation), so
a later change to a signature's instructions, fields, types or descriptions in the code is detected on load.

An artifact is untrusted input. Loading follows its retriever only inside RAGZOO_DATA (`untrusted_retriever`: a
relative corpus or index path, or `fixed`); a URL, an absolute path, a local ColBERT index or another embedding
model needs `trust_retriever=True` (`--trust-retriever`), or the caller's own `retriever`/`retriever_spec`. Every
size, count and nesting depth it holds is bounded (the `MAX_*` constants), and a value of the wrong type is an
`ArtifactError` naming the file, never an AttributeError. Saved manifests keep endpoints without credentials
(`ragzoo.secrets.storable`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from ragzoo.errors import ArtifactError, ConfigError
from ragzoo.leakage import restore as restore_seen
from ragzoo.leakage import seen_by
from ragzoo.secrets import scrub, storable, strip_spec
from ragzoo.files import is_transient_dir, atomic_write_bytes, atomic_write_json, discard_dir, fsync_dir, jsonable, staging_dir
from ragzoo.ownership import claim, replace

FORMAT_VERSION = 1
PROGRAM_FILE = "program.json"
MANIFEST_FILE = "manifest.json"
KNN_TRAINSET_FILE = "knn_trainset.json"

# Bounds on what an artifact may ask for: a hand-edited file must not make loading read, build or prompt without
# limit. Each is far above what `ragzoo compile` writes (an ensemble of 3, a few demos, a 50-question trainset).
MAX_MANIFEST_BYTES = 16 * 2**20
MAX_PROGRAM_BYTES = 64 * 2**20
MAX_TRAINSET_BYTES = 256 * 2**20
MAX_JSON_DEPTH = 64
MAX_ENSEMBLE_MEMBERS = 64
MAX_KNN_TRAINSET = 100_000
MAX_KNN_K = 100
MAX_DEMOS_PER_PREDICTOR = 1_000
MAX_SPEC_CHARS = 4_096
STRUCTURE_KINDS = ("single", "ensemble", "knn")

# ---------------------------------------------------------------------------------------------------------
# Signature hashes


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return f"{annotation.__module__}.{annotation.__qualname__}" if annotation.__module__ != "builtins" \
            else annotation.__qualname__
    return repr(annotation)


def signature_description(signature) -> dict:
    """What defines a signature for a compiled program: instructions and, per field in order, its name,
    direction, type, description and prefix."""
    fields = []
    for direction, group in (("input", signature.input_fields), ("output", signature.output_fields)):
        for name, info in group.items():
            extra = info.json_schema_extra or {}
            fields.append({"name": name, "io": direction, "type": _type_name(info.annotation),
                           "desc": str(extra.get("desc", "")), "prefix": str(extra.get("prefix", ""))})
    return {"instructions": signature.instructions, "fields": fields}


def signature_hash(signature) -> str:
    canonical = json.dumps(signature_description(signature), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def signature_hashes(program) -> dict[str, str]:
    """Predictor name (as `named_predictors()` gives it) -> hash of its signature."""
    return {name: signature_hash(predictor.signature) for name, predictor in program.named_predictors()}


# ---------------------------------------------------------------------------------------------------------
# What a program is


def _infer_method(program) -> str:
    from ragzoo import programs

    matches = [m for m in programs.methods().values() if m.cls is type(program)]
    for method in matches:  # a family sharing one class: the fixed knobs tell them apart
        if all(getattr(program, name, object()) == value for name, value in method.fixed_knobs.items()):
            return method.method_id
    if len(matches) == 1:
        return matches[0].method_id
    raise ArtifactError(f"cannot tell which method a {type(program).__name__} is; build it with "
                        f"ragzoo.programs.get(method, ...) or pass method= to save()")


def package_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in ("ragzoo", "dspy", "litellm", "pydantic"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


# ---------------------------------------------------------------------------------------------------------
# Save


def save(program, path: str | os.PathLike, *, method: str | None = None, knobs: dict | None = None,
         retriever_spec: str | None = None, overwrite: bool = False, **info: Any) -> Path:
    """Write `program` as an artifact directory at `path`.

    `info` goes into the manifest as is (JSON-serialisable): dataset, split, sizes, optimizer, optimizer
    settings, metric, score, lm (spec without secrets), seed, usage, cost, ... `method` and `knobs` default
    to what `programs.get`/`load` remembered; `retriever_spec` to the program's retriever's `spec`.
    Refuses to replace an existing directory unless `overwrite=True`.
    """
    from ragzoo import programs
    from ragzoo.adapters import compiled_adapter

    if "adapter" not in info:  # a Python compile-then-save: the adapter it was compiled under, for `load`
        adapter, reasks = compiled_adapter(program)
        if adapter is not None:
            info["adapter"] = adapter
            info.setdefault("max_reasks", reasks)
    if "optimizer" not in info and getattr(program, "ragzoo_optimizer", None):  # as compile_program noted it
        info["optimizer"] = program.ragzoo_optimizer
    path = Path(path)
    origin = programs.origin(program) or {}
    method = method or origin.get("method") or _infer_method(program)
    info_method = programs.info(method)
    if knobs is None:
        knobs = origin.get("knobs") if origin.get("method") == method else None
    elif origin.get("method") == method and origin.get("knobs") is not None and \
            programs.resolve_knobs(method, knobs) != programs.resolve_knobs(method, origin["knobs"]):
        # `load` rebuilds the program from the manifest's knobs: other ones would load another program
        raise ArtifactError(f"knobs {knobs} are not those the program was built with ({origin['knobs']}); leave "
                            f"knobs= out to save the program's own")
    resolved = programs.resolve_knobs(method, knobs or {})
    path = check_replaceable(path, overwrite)

    structure = _structure(program)
    if structure.get("kind") == "knn":
        from ragzoo.optimizers.knn import bootstrap_problem

        problem = bootstrap_problem(structure.get("bootstrap") or {})
        if problem:  # it would not load: refused before anything is written
            raise ArtifactError(f"cannot save this KNN program: {problem}; compile it with a built-in metric "
                                f"to save it")
    fresh = programs.get(method, retriever=None if not info_method.uses_retrieval else _NoRetriever(),
                         **resolved)
    hashes = signature_hashes(fresh)
    members = structure.get("members", 1)
    expected = _expected_predictor_names(hashes, structure)
    actual = [name for name, _ in program.named_predictors()]
    if sorted(actual) != sorted(expected):
        raise ArtifactError(f"the program's predictors {actual} are not those of method {method!r} with these "
                            f"knobs {sorted(hashes)}; pass the right method= and knobs=")
    if retriever_spec is None:
        retriever = getattr(program, "retriever", None) or (
            getattr(program.programs[0], "retriever", None) if members > 1 else None)
        retriever_spec = getattr(retriever, "spec", None) if retriever is not None else None

    staging = staging_dir(path)
    try:
        program_file = staging / PROGRAM_FILE
        data = _program_json(program)  # DSPy's JSON state, serialised here: JSON only, never a pickle
        atomic_write_bytes(program_file, data)
        if structure.get("kind") == "knn":
            atomic_write_json(staging / KNN_TRAINSET_FILE, scrub(structure.pop("trainset")))  # as program.json
        manifest = {
            "format_version": FORMAT_VERSION,
            "method": method,
            "knobs": jsonable(resolved),
            "structure": structure,
            "signature_hashes": hashes,
            "retriever": strip_spec(retriever_spec),  # an endpoint is stored without its credentials
            "package_versions": package_versions(),
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "program_sha256": hashlib.sha256(data).hexdigest(),
            "seen_questions": seen_by(program),  # hashes of the questions the compile trained/validated on
            **storable(jsonable(info)),  # no credentials in URLs, no key-shaped values, no secret-named entries
        }
        atomic_write_json(staging / MANIFEST_FILE, manifest)
        check_replaceable(path, overwrite)  # again: the folder may have changed while the program compiled
        replace(staging, path, "artifact")  # marks it; files the user added to the old artifact are kept
        fsync_dir(path)
    except BaseException:
        discard_dir(staging)
        raise
    return path


def _program_json(program) -> bytes:
    """The program's DSPy state as JSON bytes (what `program.save("x.json")` writes, without its advice to fall
    back to pickle when a value is not JSON: ragzoo artifacts are JSON only)."""
    from dspy.utils.saving import get_dependency_versions

    state = program.dump_state()
    state["metadata"] = {"dependency_versions": get_dependency_versions()}
    try:
        json.dumps(state)
    except (TypeError, ValueError) as error:
        raise ArtifactError(f"the compiled program holds a value that is not JSON ({error}); ragzoo saves "
                            f"programs as JSON only: keep only JSON values (text, numbers, lists) in its state") \
            from None
    # scrubbed: demos are LM outputs, and an upstream that echoed the key must not get it kept
    data = json.dumps(scrub(state), indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    json.loads(data)  # never publish a program.json that does not parse
    return data


def is_artifact_dir(path: str | os.PathLike) -> bool:
    """True if `path` is a folder ragzoo wrote as an artifact (its manifest carries a format version)."""
    manifest = Path(path) / MANIFEST_FILE
    try:
        return isinstance(json.loads(manifest.read_text(encoding="utf-8")).get("format_version"), int)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def check_replaceable(path: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse to write an artifact over anything but nothing, an empty folder, or (with `overwrite`) an
    artifact ragzoo wrote (`ragzoo.ownership.claim`). Returns the folder to write (a symbolic link followed)."""
    found = claim(path, "artifact", error=ArtifactError)
    if found.existing and not overwrite:
        raise ArtifactError(f"{path} already exists; choose another --out or pass --force to replace it")
    return found.path


class _NoRetriever:
    """Stands in for a retriever when a fresh program is built only to read its signatures."""

    spec = "none"

    def __call__(self, query, k):
        raise ArtifactError("this program was built only to inspect its signatures; it has no retriever")


def _structure(program) -> dict:
    from ragzoo.optimizers.ensemble import EnsembleProgram
    from ragzoo.optimizers.knn import KNNProgram

    if isinstance(program, EnsembleProgram):
        return {"kind": "ensemble", "members": len(program.programs)}
    if isinstance(program, KNNProgram):
        return {"kind": "knn", "members": 1, **program.settings(), "trainset": program.trainset_json()}
    return {"kind": "single", "members": 1}


def _expected_predictor_names(hashes: dict[str, str], structure: dict) -> list[str]:
    kind = structure.get("kind", "single")
    if kind == "ensemble":
        return [f"programs[{i}].{name}" for i in range(structure["members"]) for name in hashes]
    if kind == "knn":
        return [f"program.{name}" for name in hashes]
    return list(hashes)


# ---------------------------------------------------------------------------------------------------------
# Load


def _read_bounded(file: Path, limit: int, what: str) -> bytes:
    """The bytes of `file`, refused past `limit` bytes or when unreadable (one line saying what to do)."""
    try:
        size = file.stat().st_size
        if size > limit:
            raise ArtifactError(f"{file} is {size // 2**20} MB, more than the {limit // 2**20} MB a {what} may hold; "
                                f"the artifact was edited or is not a ragzoo artifact, recompile the program")
        with open(file, "rb") as handle:
            return handle.read(limit + 1)
    except OSError as error:
        raise ArtifactError(f"cannot read {file} ({error.strerror or error}); check its permissions, or "
                            f"recompile the program") from None


def _json_depth_ok(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return True


def _parse_json(data: bytes, file: Path) -> Any:
    too_deep = False
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{file} is corrupt or truncated ({error}); recompile the program") from None
    except RecursionError:
        value, too_deep = None, True
    if too_deep or not _json_depth_ok(value):
        raise ArtifactError(f"{file} is nested more than {MAX_JSON_DEPTH} levels deep, which no ragzoo artifact is; "
                            f"the file was edited, recompile the program")
    return value


def _corrupt(file: Path, what: str) -> ArtifactError:
    return ArtifactError(f"{file}: {what}; the manifest was edited or truncated, recompile the program")


def _check_manifest_types(manifest: dict, manifest_file: Path) -> None:
    """Every field that loading reads has the type and size ragzoo writes; anything else is a corrupt artifact."""
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in manifest["signature_hashes"].items()):
        raise _corrupt(manifest_file, "'signature_hashes' must map predictor names to hash strings")
    if not all(isinstance(k, str) for k in manifest["knobs"]):
        raise _corrupt(manifest_file, "'knobs' must map knob names to values")
    retriever = manifest.get("retriever")
    if retriever is not None and (not isinstance(retriever, str) or len(retriever) > MAX_SPEC_CHARS):
        raise _corrupt(manifest_file, "'retriever' must be a retriever spec string")
    versions = manifest.get("package_versions")
    if versions is not None and (not isinstance(versions, dict)
                                 or not all(isinstance(v, str) for v in versions.values())):
        raise _corrupt(manifest_file, "'package_versions' must map package names to version strings")
    structure = manifest.get("structure")
    if structure is None:
        return
    if not isinstance(structure, dict) or structure.get("kind", "single") not in STRUCTURE_KINDS:
        raise _corrupt(manifest_file, f"'structure' must be an object whose kind is one of {list(STRUCTURE_KINDS)}")
    members = structure.get("members", 1)
    limit = MAX_ENSEMBLE_MEMBERS if structure.get("kind") == "ensemble" else 1
    if not isinstance(members, int) or isinstance(members, bool) or not 1 <= members <= limit:
        raise _corrupt(manifest_file, f"'structure.members' must be an integer from 1 to {limit}, got {members!r}")
    if structure.get("kind") == "knn":
        k = structure.get("k", 3)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_KNN_K:
            raise _corrupt(manifest_file, f"the KNN 'k' must be an integer from 1 to {MAX_KNN_K}, got {k!r}")
        bootstrap = structure.get("bootstrap") or {}
        if not isinstance(bootstrap, dict):
            raise _corrupt(manifest_file, "the KNN 'bootstrap' settings must be an object")
        from ragzoo.optimizers.knn import bootstrap_problem

        problem = bootstrap_problem(bootstrap)
        if problem:
            raise _corrupt(manifest_file, f"the KNN 'bootstrap' settings: {problem}")
        if not isinstance(structure.get("embedder", ""), str):
            raise _corrupt(manifest_file, "the KNN 'embedder' must be a model name")


def read_manifest(path: str | os.PathLike) -> dict:
    """Read and validate the manifest of the artifact at `path` (size, nesting, format, required keys, types)."""
    path = Path(path)
    if not path.is_dir():
        raise ArtifactError(f"{path} is not a compiled-program directory (expected {PROGRAM_FILE} and "
                            f"{MANIFEST_FILE} inside); check --program")
    manifest_file = path / MANIFEST_FILE
    if not manifest_file.is_file():
        raise ArtifactError(f"{manifest_file} is missing; {path} is not a complete artifact, recompile it")
    manifest = _parse_json(_read_bounded(manifest_file, MAX_MANIFEST_BYTES, "manifest"), manifest_file)
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{manifest_file} is not a JSON object; recompile the program")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{manifest_file} has no valid format_version; recompile the program")
    if version > FORMAT_VERSION:
        raise ArtifactError(f"{path} was written by a newer ragzoo (artifact format {version}, this ragzoo reads "
                            f"up to {FORMAT_VERSION}); upgrade ragzoo to load it")
    if version < 1:
        raise ArtifactError(f"{path} has an unknown artifact format {version}; recompile the program")
    for key, kind in (("method", str), ("knobs", dict), ("signature_hashes", dict), ("program_sha256", str)):
        if not isinstance(manifest.get(key), kind):
            raise ArtifactError(f"{manifest_file} lacks a valid {key!r}; the manifest was edited or truncated, "
                                f"recompile the program")
    _check_manifest_types(manifest, manifest_file)
    return manifest


# ---------------------------------------------------------------------------------------------------------
# Trust: an artifact names its retriever, but loading follows it only where the user already pointed ragzoo


def untrusted_retriever(spec: str | None) -> str | None:
    """What following `spec` (read from an artifact) would do beyond what the user named, or None when it stays
    inside RAGZOO_DATA (a relative corpus or index path, no '..', no model option) or replays the passages
    recorded with the user's own questions (`fixed`)."""
    from urllib.parse import parse_qsl

    from ragzoo.paths import data_root
    from ragzoo.secrets import strip_spec

    if spec is None or spec.strip().lower() in ("", "static", "none", "fixed") or \
            spec.strip().lower().startswith("fixed:"):
        return None
    scheme, _sep, rest = spec.strip().partition(":")
    scheme = scheme.lower()
    if scheme in ("bm25", "dense", "hybrid"):
        target, _q, query = rest.partition("?")
        options = dict(parse_qsl(query, keep_blank_values=True))
        if "model" in options:
            return f"loads the embedding model {options['model']!r}"
        parts = Path(target).parts
        root = data_root().resolve()
        if target and Path(target).is_absolute() and ".." not in parts and "\\" not in target:
            # an absolute path is followed where it is in RAGZOO_DATA (`index build` named its corpus so)
            found = Path(target).resolve()
            return None if root in found.parents else f"reads {target!r}, an absolute path outside RAGZOO_DATA"
        if not target or target.startswith("~") or ".." in parts or "\\" in target:
            return f"reads {target!r}, outside RAGZOO_DATA"
        inside = (root / target).resolve()
        if inside != root and root not in inside.parents:
            return f"reads {target!r}, which links outside RAGZOO_DATA"
        if Path(target).exists() and Path(target).resolve() != inside:  # a corpus path is tried as given first
            return f"reads {target!r} in the current folder, outside RAGZOO_DATA"
        return None
    if scheme == "colbertv2":
        return f"sends every question to {strip_spec(spec).partition(':')[2]}"
    if scheme == "colbert":
        return f"opens the index folder {rest!r}"
    return "is not a spec ragzoo follows from an artifact"


def _check_trusted(path: Path, spec: str) -> None:
    from ragzoo.secrets import strip_spec

    reason = untrusted_retriever(spec)
    if reason:
        raise ArtifactError(f"{path} asks for retriever {strip_spec(spec)!r}, which {reason}; an artifact's retriever "
                            f"is followed only inside RAGZOO_DATA: pass --trust-retriever to use it anyway, or "
                            f"--retriever SPEC to choose your own (Python: trust_retriever=True or retriever_spec=)")


def load(path: str | os.PathLike, *, retriever=None, retriever_spec: str | None = None,
         method: str | None = None, knobs: dict | None = None, trust_retriever: bool = False):
    """Rebuild the compiled program saved at `path`.

    `retriever` (an object) or `retriever_spec` override the retriever recorded in the manifest. The recorded one
    is followed only when it stays inside RAGZOO_DATA (a relative corpus path, as `ragzoo compile` records the
    default) or is `fixed`; any other (a URL, an absolute path, a model option) is refused unless
    `trust_retriever=True`: an artifact from someone else must not make loading read your files or send your
    questions to their server. `method`, if given, is the method the caller expects: another method's artifact
    is refused. `knobs`, if given, must match the manifest's. Raises `ArtifactError` on any mismatch or damage;
    never returns a half-loaded program. The manifest is attached to the program as `program.ragzoo_manifest`.
    The program runs under the lenient adapter it was compiled with (the manifest's `adapter`, `max_reasks`;
    chat for an artifact that records none) unless its caller chooses one (see `ragzoo.adapters.run_under`).
    """
    from ragzoo.adapters import DEFAULT_MAX_REASKS, run_under

    program, manifest = load_artifact(path, retriever=retriever, retriever_spec=retriever_spec,
                                      method=method, knobs=knobs, trust_retriever=trust_retriever)
    adapter, reasks = recorded_adapter(manifest)
    try:
        return run_under(program, adapter, max_reasks=DEFAULT_MAX_REASKS if reasks is None else reasks)
    except ConfigError as error:
        raise ArtifactError(f"{path} records an adapter this ragzoo cannot build ({error}); recompile the "
                            f"program") from None


def recorded_adapter(manifest: dict) -> tuple[str | None, int | None]:
    """(the adapter an artifact was compiled under, its `max_reasks`) as its manifest records them; None for what
    it does not record. `load` runs the program under them; `ragzoo evaluate --program` follows them unless
    --adapter is given."""
    adapter, reasks = manifest.get("adapter"), manifest.get("max_reasks")
    if isinstance(adapter, dict):  # {"name": ...}, as some hand-written manifests have it
        adapter = adapter.get("name")
    return (adapter if isinstance(adapter, str) else None,
            reasks if isinstance(reasks, int) and not isinstance(reasks, bool) else None)


def load_artifact(path: str | os.PathLike, *, retriever=None, retriever_spec: str | None = None,
                  method: str | None = None, knobs: dict | None = None, trust_retriever: bool = False):
    """`load`, returning `(program, manifest)`."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArtifactError(f"an artifact is a folder path, got {type(path).__name__} {path!r}")
    path = Path(path)
    if is_transient_dir(path):  # a compile killed between its last write and the swap leaves a complete-looking copy
        raise ArtifactError(f"{path} is the unfinished build or the backup of a compile, not an artifact; load the "
                            f"folder the compile was writing (its --out)")
    manifest = read_manifest(path)
    try:
        return _load_checked(path, manifest, retriever=retriever, retriever_spec=retriever_spec, method=method,
                             knobs=knobs, trust_retriever=trust_retriever)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError, RecursionError) as error:
        # a value of the wrong type or shape in a hand-edited file: say so, never an internal error
        raise ArtifactError(f"{path} is corrupt ({type(error).__name__}: {str(error)[:200]}); the artifact was "
                            f"edited or damaged, recompile the program") from None


def _load_checked(path: Path, manifest: dict, *, retriever, retriever_spec, method, knobs, trust_retriever):
    from ragzoo import programs

    saved_method = manifest["method"]
    if method is not None and method != saved_method:
        raise ArtifactError(f"{path} holds a compiled {saved_method!r} program, not {method!r}; pass the matching "
                            f"--method or another --program")
    try:
        info = programs.info(saved_method)
    except ConfigError:
        raise ArtifactError(f"{path} holds a program of method {saved_method!r}, which this ragzoo does not "
                            f"know; install the ragzoo version that wrote it") from None
    if knobs:
        wanted = programs.resolve_knobs(saved_method, knobs)
        for name in knobs:
            want, have = wanted[name], manifest["knobs"].get(name)
            if jsonable(want) != have:
                raise ArtifactError(f"{path} was compiled with {name}={have!r}, not {want!r}; knobs of a compiled "
                                    f"program are fixed: recompile with the knob you want")

    program_file = path / PROGRAM_FILE
    if not program_file.is_file():
        raise ArtifactError(f"{program_file} is missing; recompile the program")
    data = _read_bounded(program_file, MAX_PROGRAM_BYTES, "program file")
    if hashlib.sha256(data).hexdigest() != manifest["program_sha256"]:
        raise ArtifactError(f"{program_file} does not match the sha256 in its manifest (edited, truncated or "
                            f"corrupt); recompile the program")
    state = _parse_json(data, program_file)
    if not isinstance(state, dict):
        raise ArtifactError(f"{program_file} is not a DSPy state object; recompile the program")
    _check_state(state, program_file)

    _check_versions(path, manifest)

    try:  # a knob added since compilation gets its default, which is what the code would build
        saved_knobs = programs.resolve_knobs(saved_method, manifest["knobs"])
    except ConfigError as error:
        raise ArtifactError(f"{path}: the manifest's knobs no longer fit method {saved_method!r} ({error}); "
                            f"recompile the program") from None

    if info.uses_retrieval and retriever is None:
        spec = retriever_spec or manifest.get("retriever")
        if not spec or spec in ("static", "none"):
            raise ArtifactError(f"{path} was compiled with retriever {spec!r}, which cannot be rebuilt from its "
                                f"spec; pass retriever= (or --retriever SPEC)")
        if retriever_spec is None and not trust_retriever:
            _check_trusted(path, spec)
        from ragzoo.retrieval import make_retriever

        retriever = make_retriever(spec)

    fresh = programs.get(saved_method, retriever=retriever if info.uses_retrieval else None, **saved_knobs)
    hashes = signature_hashes(fresh)
    saved_hashes = manifest["signature_hashes"]
    if set(hashes) != set(saved_hashes):
        raise ArtifactError(f"{path}: method {saved_method!r} now has predictors {sorted(hashes)}, the artifact "
                            f"has {sorted(saved_hashes)}; the program changed since compilation, recompile it")
    changed = sorted(name for name in hashes if hashes[name] != saved_hashes[name])
    if changed:
        raise ArtifactError(f"{path}: the signature of {', '.join(changed)} changed since compilation "
                            f"(instructions, fields or types); recompile the program")

    program = _assemble(fresh, manifest, path, saved_method, saved_knobs, retriever, trust_retriever)
    state.pop("metadata", None)
    names = {name for name, _ in program.named_parameters()}
    if set(state) != names:
        raise ArtifactError(f"{program_file} holds predictors {sorted(state)}, the program has {sorted(names)}; "
                            f"the artifact does not fit this method, recompile it")
    try:
        program.load_state(state)  # DSPy applies it to a deep copy first, so a bad state leaves nothing half-set
    except Exception as error:
        raise ArtifactError(f"{program_file} does not load into {saved_method!r} ({type(error).__name__}: "
                            f"{error}); recompile the program") from None
    programs.tag(program, saved_method, saved_knobs)
    restore_seen(program, manifest.get("seen_questions"))
    object.__setattr__(program, "ragzoo_manifest", manifest)
    if isinstance(manifest.get("optimizer"), str):  # saved again, it keeps it; compiled again, the new one wins
        object.__setattr__(program, "ragzoo_optimizer", manifest["optimizer"])
    return program, manifest


# what DSPy's Predict.dump_state writes (3.4), each key of a predictor's state DSPy's load_state then sets on it
PREDICTOR_STATE_KEYS = {"demos", "lm", "signature", "traces", "train", "fields"}


def _check_state(state: dict, program_file: Path) -> None:
    """Each predictor's state is an object of the keys DSPy writes, and its demos a list of at most
    MAX_DEMOS_PER_PREDICTOR objects (every demo goes into every prompt: an edited file must not make each call pay
    for a million of them). Its `lm` is null, as ragzoo saves it: an LM in the file would answer that predictor
    instead of the one the command was given (--lm, --api-base), with the user's key, past every budget and
    meter; and a key DSPy does not write would be set on the predictor as it stands (`forward`, `config`)."""
    for name, value in state.items():
        if name == "metadata":
            continue
        if not isinstance(value, dict):
            raise ArtifactError(f"{program_file}: the state of {name!r} is not an object; recompile the program")
        unknown = sorted(set(value) - PREDICTOR_STATE_KEYS)
        if unknown:
            raise ArtifactError(f"{program_file}: the state of {name!r} has keys DSPy does not save ({unknown}); the "
                                f"file was edited, recompile the program")
        if value.get("lm") is not None:
            raise ArtifactError(f"{program_file}: {name!r} names an LM of its own; ragzoo saves none (a program runs "
                                f"with the LM its command is given), so the file was edited: recompile the program")
        for key in ("traces", "train"):
            if not isinstance(value.get(key, []), list):
                raise ArtifactError(f"{program_file}: the {key} of {name!r} are not a list; recompile the program")
        demos = value.get("demos", [])
        if not isinstance(demos, list) or not all(isinstance(demo, dict) for demo in demos):
            raise ArtifactError(f"{program_file}: the demos of {name!r} are not a list of objects; recompile the "
                                f"program")
        if len(demos) > MAX_DEMOS_PER_PREDICTOR:
            raise ArtifactError(f"{program_file}: {name!r} has {len(demos)} demos, more than the "
                                f"{MAX_DEMOS_PER_PREDICTOR} ragzoo loads; the file was edited, recompile the program")
        signature = value.get("signature", {})
        fields = signature.get("fields", []) if isinstance(signature, dict) else None
        if not isinstance(signature, dict) or not isinstance(signature.get("instructions", ""), str) \
                or not isinstance(fields, list) or not all(
                    isinstance(item, dict) and all(isinstance(item.get(key, ""), str) for key in ("prefix", "description"))
                    for item in fields):
            # a wrong type loaded without a word, then failed every question ("AttributeError: instructions")
            raise ArtifactError(f"{program_file}: the signature of {name!r} is not text instructions and fields; the "
                                f"file was edited, recompile the program")


def _assemble(fresh, manifest: dict, path: Path, method: str, knobs: dict, retriever, trust: bool = False):
    from ragzoo import programs

    structure = manifest.get("structure") or {"kind": "single", "members": 1}
    kind = structure.get("kind", "single")
    if kind == "single":
        return fresh
    if kind == "ensemble":
        from ragzoo.optimizers.ensemble import EnsembleProgram

        size = structure.get("members")
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_ENSEMBLE_MEMBERS:
            raise ArtifactError(f"{path}: the manifest's ensemble size is invalid; recompile the program")
        members = [fresh] + [programs.get(method, retriever=retriever if programs.info(method).uses_retrieval
                                          else None, **knobs) for _ in range(size - 1)]
        return EnsembleProgram(members)
    if kind == "knn":
        from ragzoo.optimizers.knn import KNNProgram

        from ragzoo.optimizers.knn import DEFAULT_EMBEDDER

        trainset_file = path / KNN_TRAINSET_FILE
        if not trainset_file.is_file():
            raise ArtifactError(f"{trainset_file} is missing; recompile the program")
        trainset = _parse_json(_read_bounded(trainset_file, MAX_TRAINSET_BYTES, "KNN training set"), trainset_file)
        if not isinstance(trainset, list) or not 1 <= len(trainset) <= MAX_KNN_TRAINSET or not all(
                isinstance(item, dict) and isinstance(item.get("fields"), dict) and isinstance(item.get("inputs"), list)
                and all(isinstance(name, str) for name in item["inputs"]) for item in trainset):
            raise ArtifactError(f"{trainset_file} is not a list of 1 to {MAX_KNN_TRAINSET} training examples "
                                f"({{fields, inputs}}); recompile the program")
        embedder = structure.get("embedder", DEFAULT_EMBEDDER)
        if embedder != DEFAULT_EMBEDDER and not trust:
            raise ArtifactError(f"{path} asks for the embedding model {embedder!r} (ragzoo loads only "
                                f"{DEFAULT_EMBEDDER} from an artifact); pass --trust-retriever to use it anyway "
                                f"(Python: trust_retriever=True)")
        return KNNProgram.from_saved(fresh, trainset, structure)
    raise ArtifactError(f"{path}: unknown program structure {kind!r}; upgrade ragzoo or recompile")


def _check_versions(path: Path, manifest: dict) -> None:
    saved = (manifest.get("package_versions") or {}).get("dspy")
    if saved is not None and not isinstance(saved, str):
        raise ArtifactError(f"{path}: the manifest's DSPy version {saved!r} is not a version string; recompile")
    current = package_versions().get("dspy")
    if not saved or not current or saved == current:
        return
    if saved.split(".")[0] != current.split(".")[0]:
        raise ArtifactError(f"{path} was compiled with DSPy {saved}, this environment has DSPy {current} (another "
                            f"major version, whose saved state differs); install dspy=={saved} or recompile")
    from ragzoo.errors import RagzooWarning

    warnings.warn(f"{path} was compiled with DSPy {saved}; this environment has {current} (a minor version "
                  f"apart: it loads; recompile if its answers look off)", RagzooWarning, stacklevel=3)
