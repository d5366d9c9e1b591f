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
from ragzoo.files import atomic_write_bytes, atomic_write_json, discard_dir, fsync_dir, jsonable, replace_dir, \
    staging_dir

FORMAT_VERSION = 1
PROGRAM_FILE = "program.json"
MANIFEST_FILE = "manifest.json"
KNN_TRAINSET_FILE = "knn_trainset.json"

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

    path = Path(path)
    origin = programs.origin(program) or {}
    method = method or origin.get("method") or _infer_method(program)
    info_method = programs.info(method)
    if knobs is None:
        knobs = origin.get("knobs") if origin.get("method") == method else None
    resolved = programs.resolve_knobs(method, knobs or {})
    check_replaceable(path, overwrite)

    structure = _structure(program)
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
        program.save(str(program_file))  # DSPy JSON state; re-written atomically below after a fsync
        with open(program_file, "rb") as handle:
            data = handle.read()
        json.loads(data)  # never publish a program.json that does not parse
        atomic_write_bytes(program_file, data)
        if structure.get("kind") == "knn":
            atomic_write_json(staging / KNN_TRAINSET_FILE, structure.pop("trainset"))
        manifest = {
            "format_version": FORMAT_VERSION,
            "method": method,
            "knobs": jsonable(resolved),
            "structure": structure,
            "signature_hashes": hashes,
            "retriever": retriever_spec,
            "package_versions": package_versions(),
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "program_sha256": hashlib.sha256(data).hexdigest(),
            **jsonable(info),
        }
        atomic_write_json(staging / MANIFEST_FILE, manifest)
        fsync_dir(staging)
        replace_dir(staging, path)
    except BaseException:
        discard_dir(staging)
        raise
    return path


def is_artifact_dir(path: str | os.PathLike) -> bool:
    """True if `path` is a folder ragzoo wrote as an artifact (its manifest carries a format version)."""
    manifest = Path(path) / MANIFEST_FILE
    try:
        return isinstance(json.loads(manifest.read_text(encoding="utf-8")).get("format_version"), int)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def check_replaceable(path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse to write an artifact over anything but nothing, an empty folder, or (with `overwrite`) an
    artifact: ragzoo replaces only what it wrote itself."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise ArtifactError(f"{path} exists and is not a directory; choose another --out")
    if not any(path.iterdir()):
        return
    if not is_artifact_dir(path):
        raise ArtifactError(f"{path} exists and is not a compiled-program artifact; ragzoo never replaces it: "
                            f"choose another --out")
    if not overwrite:
        raise ArtifactError(f"{path} already exists; choose another --out or pass --force to replace it")


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


def read_manifest(path: str | os.PathLike) -> dict:
    """Read and validate the manifest of the artifact at `path` (format, required keys, types)."""
    path = Path(path)
    if not path.is_dir():
        raise ArtifactError(f"{path} is not a compiled-program directory (expected {PROGRAM_FILE} and "
                            f"{MANIFEST_FILE} inside); check --program")
    manifest_file = path / MANIFEST_FILE
    if not manifest_file.is_file():
        raise ArtifactError(f"{manifest_file} is missing; {path} is not a complete artifact, recompile it")
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{manifest_file} is corrupt or truncated ({error}); recompile the program") from None
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
    return manifest


def load(path: str | os.PathLike, *, retriever=None, retriever_spec: str | None = None,
         method: str | None = None, knobs: dict | None = None):
    """Rebuild the compiled program saved at `path`.

    `retriever` (an object) or `retriever_spec` override the retriever recorded in the manifest. `method`, if
    given, is the method the caller expects: another method's artifact is refused. `knobs`, if given, must
    match the manifest's. Raises `ArtifactError` on any mismatch or damage; never returns a half-loaded
    program. The manifest is attached to the program as `program.ragzoo_manifest`.
    """
    program, _manifest = load_artifact(path, retriever=retriever, retriever_spec=retriever_spec,
                                       method=method, knobs=knobs)
    return program


def load_artifact(path: str | os.PathLike, *, retriever=None, retriever_spec: str | None = None,
                  method: str | None = None, knobs: dict | None = None):
    """`load`, returning `(program, manifest)`."""
    from ragzoo import programs

    path = Path(path)
    manifest = read_manifest(path)
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
    data = program_file.read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest["program_sha256"]:
        raise ArtifactError(f"{program_file} does not match the sha256 in its manifest (edited, truncated or "
                            f"corrupt); recompile the program")
    try:
        state = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{program_file} is not valid JSON ({error}); recompile the program") from None
    if not isinstance(state, dict):
        raise ArtifactError(f"{program_file} is not a DSPy state object; recompile the program")

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

    program = _assemble(fresh, manifest, path, saved_method, saved_knobs, retriever)
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
    object.__setattr__(program, "ragzoo_manifest", manifest)
    return program, manifest


def _assemble(fresh, manifest: dict, path: Path, method: str, knobs: dict, retriever):
    from ragzoo import programs

    structure = manifest.get("structure") or {"kind": "single", "members": 1}
    kind = structure.get("kind", "single")
    if kind == "single":
        return fresh
    if kind == "ensemble":
        from ragzoo.optimizers.ensemble import EnsembleProgram

        size = structure.get("members")
        if not isinstance(size, int) or size < 1:
            raise ArtifactError(f"{path}: the manifest's ensemble size is invalid; recompile the program")
        members = [fresh] + [programs.get(method, retriever=retriever if programs.info(method).uses_retrieval
                                          else None, **knobs) for _ in range(size - 1)]
        return EnsembleProgram(members)
    if kind == "knn":
        from ragzoo.optimizers.knn import KNNProgram

        trainset_file = path / KNN_TRAINSET_FILE
        try:
            trainset = json.loads(trainset_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ArtifactError(f"{trainset_file} is missing or corrupt ({error}); recompile the program") from None
        return KNNProgram.from_saved(fresh, trainset, structure)
    raise ArtifactError(f"{path}: unknown program structure {kind!r}; upgrade ragzoo or recompile")


def _check_versions(path: Path, manifest: dict) -> None:
    saved = (manifest.get("package_versions") or {}).get("dspy")
    current = package_versions().get("dspy")
    if not saved or not current or saved == current:
        return
    if saved.split(".")[0] != current.split(".")[0]:
        raise ArtifactError(f"{path} was compiled with DSPy {saved}, this environment has DSPy {current} (another "
                            f"major version, whose saved state differs); install dspy=={saved} or recompile")
    warnings.warn(f"{path} was compiled with DSPy {saved}; this environment has {current}", stacklevel=3)
