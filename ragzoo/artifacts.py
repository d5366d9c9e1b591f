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
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ragzoo.errors import ArtifactError, ConfigError

FORMAT_VERSION = 1
PROGRAM_FILE = "program.json"
MANIFEST_FILE = "manifest.json"
KNN_TRAINSET_FILE = "knn_trainset.json"

# ---------------------------------------------------------------------------------------------------------
# Atomic writes (shared with ragzoo.runs)


def fsync_dir(path: str | os.PathLike) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems refuse to open a folder; the rename is atomic all the same
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a reader (or a crash) sees the old file or the new one, never a torn one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
# Building programs and remembering what they are

_TAG = "_ragzoo_origin"


def build_program(method: str, retriever=None, **knobs):
    """Build `method` through the registry and remember its id and resolved knobs for `save`."""
    from ragzoo import programs

    program = programs.get(method, retriever=retriever, **knobs)
    _tag(program, method, programs.resolved_knobs(method, **knobs))
    return program


def _tag(program, method: str, knobs: dict) -> None:
    object.__setattr__(program, _TAG, {"method": method, "knobs": jsonable(knobs)})


def program_origin(program) -> dict | None:
    """{"method", "knobs"} for a program built by `build_program` or loaded by `load`, else None."""
    origin = getattr(program, _TAG, None)
    if origin is None and getattr(program, "programs", None):  # an ensemble: its members' origin
        origin = getattr(program.programs[0], _TAG, None)
    if origin is None and hasattr(getattr(program, "program", None), "named_predictors"):  # KNN: the wrapped one
        origin = getattr(program.program, _TAG, None)
    return origin


def jsonable(value: Any) -> Any:
    """`value` with every container made JSON-ready: dict keys as strings, tuples and sets as lists, and
    anything else not JSON-native as its `str`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    return str(value)


def _infer_method(program) -> str:
    from ragzoo import programs

    matches = [m for m in programs.methods().values() if m.cls is type(program)]
    for method in matches:  # a family sharing one class: the fixed knobs tell them apart
        if all(getattr(program, name, object()) == value for name, value in method.fixed_knobs.items()):
            return method.method_id
    if len(matches) == 1:
        return matches[0].method_id
    raise ArtifactError(f"cannot tell which method a {type(program).__name__} is; build it with "
                        f"ragzoo.artifacts.build_program(method, ...) or pass method= to save()")


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
    to what `build_program`/`load` remembered; `retriever_spec` to the program's retriever's `spec`.
    Refuses to replace an existing directory unless `overwrite=True`.
    """
    from ragzoo import programs

    path = Path(path)
    origin = program_origin(program) or {}
    method = method or origin.get("method") or _infer_method(program)
    info_method = programs.info(method)
    if knobs is None:
        knobs = origin.get("knobs") if origin.get("method") == method else None
    resolved = programs.resolved_knobs(method, **(knobs or {}))
    if path.exists() and not overwrite:
        raise ArtifactError(f"{path} already exists; choose another --out or pass --force to replace it")
    if path.exists() and not path.is_dir():
        raise ArtifactError(f"{path} exists and is not a directory; choose another --out")

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

    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
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
        _publish(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


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


def _publish(staging: Path, path: Path) -> None:
    """Move the finished staging directory to `path`, replacing an old artifact only once the new one is
    complete (old -> backup, new -> path, drop backup)."""
    backup = None
    if path.exists():
        backup = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, backup)
    try:
        os.replace(staging, path)
    except BaseException:
        if backup is not None:
            os.replace(backup, path)
        raise
    fsync_dir(path.parent)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


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
        for name, value in knobs.items():
            want = programs.coerce_knob(saved_method, name, value)
            have = manifest["knobs"].get(name)
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

    try:
        saved_knobs = {name: programs.coerce_knob(saved_method, name, value)
                       for name, value in manifest["knobs"].items()}
    except ConfigError as error:
        raise ArtifactError(f"{path}: the manifest's knobs no longer fit method {saved_method!r} ({error}); "
                            f"recompile the program") from None
    unknown = set(info.knobs) - set(saved_knobs)
    if unknown:  # a knob added since compilation: its default applies, which is what the code would build
        pass

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
    _tag(program, saved_method, saved_knobs)
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
