"""Mutation testing of the methods' control flow (`programs/*.py`), each mutant tested in a COPY of the repository.

    .venv/bin/python tools/mutate.py                       # every method file, up to --per-file mutants each
    .venv/bin/python tools/mutate.py programs/skr.py --per-file 0 --jobs 2 --timeout 120
    .venv/bin/python tools/mutate.py --list                # the mutants it would run, without running them

Mutants (each one change, made on the AST and written back over the changed node's own source span, so the
rest of the file keeps its text): comparison flips (< <=, > >=, == !=, in / not in, is / is not); boolean
negation (an `if` / `while` / conditional-expression test negated, `and` <-> `or`, True <-> False); off-by-one
(a slice bound + 1, `range(n)` -> `range(n + 1)`, an int knob default + 1); return/branch swaps (the two
branches of an if/else or of `a if c else b` swapped, `return x` -> `return None`); dropped calls (a call
statement replaced by `pass`). A mutant whose code equals the original's is not generated. Only code inside
functions is mutated (plus the constructor's int defaults); docstrings and `@register` arguments never are.

Why a copy, and how the copy's code is the one imported (the recipe):
1. The repository's working tree, uncommitted edits and new untracked files included, is copied (`git ls-files
   --cached --others --exclude-standard`, so `.venv`, caches and ignored files stay behind) into one folder per
   parallel job, `<workdir>/w<i>/` (default workdir /tmp/mutants). A mutant is written into that copy's file,
   its tests are run there, and the file is written back to the original text afterwards: the checkout itself
   is never touched, so other people's edits are safe.
2. The editable install does NOT import from the copy: its finder (`site-packages/__editable___ragzoo_*_
   finder.py`, installed by a `.pth` file) maps `ragzoo`, `ragzoo.programs`, `ragzoo.signatures`,
   `ragzoo.optimizers` and `ragzoo.metrics` to the folders of the checkout it was installed from (`ragzoo.
   programs` is `programs/`, not `ragzoo/programs/`, per `[tool.setuptools.package-dir]`), so a mutant in a
   clone silently tests the original code, and putting the clone on `sys.path` does not help for the
   sub-packages. The script therefore writes `<copy>/.mutate_site/sitecustomize.py` and runs pytest with
   PYTHONPATH=<copy>/.mutate_site: at interpreter start-up it puts a finder FIRST on `sys.meta_path` that maps
   the same package names (read from the copy's pyproject.toml) to the copy's folders. Subprocesses that tests
   start inherit PYTHONPATH, so `python -m ragzoo ...` in a test imports the copy too.
3. PYTHONDONTWRITEBYTECODE=1 and pytest `-p no:cacheprovider`: a mutant of the same length written in the same
   second as the original could otherwise be served from a stale `.pyc`, and the copy stays clean.
4. Speed (`--fork`, the default on POSIX): each copy gets one long-lived server process, started with the
   copy's environment, that imports the slow third-party modules once (litellm alone takes ~6 s; NOT ragzoo
   and NOT dspy, whose import fixes its disk-cache folder before the tests' conftest can choose it) and then
   forks a fresh child per mutant that runs `pytest.main(...)` in the copy: every mutant still imports
   ragzoo from scratch, from the mutated file. `--no-fork` runs `python -m pytest` per mutant instead.
5. Checks before any mutant: `import ragzoo.programs` in the copy must come from the copy (else the script
   stops), and a sentinel mutant (the first file's module raising on import) must fail its tests, which shows
   the tests really import the copy.

Which tests run for a file: every `tests/programs/test_*.py` and `tests/diagnostics/test_*.py` that names the module (`ragzoo.programs.<name>`)
or one of the method ids it registers (`"<id>"`), with `-x -q`, one per mutant, `--timeout` seconds each (a
mutant that hangs past it counts as killed, reported as "timeout"). The tests of each file are first run on the
unmutated copy; a file whose tests fail there is reported and its mutants are not run.

Output: one line per mutant (killed / SURVIVED / timeout), then the kill rate and each survivor with its file,
line and change; `--out FILE` writes every result as JSON lines. Exit status 0 (the survivors are data).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy as copylib
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SITECUSTOMIZE = '''\
"""Written by tools/mutate.py: ragzoo's packages import from this copy of the repository, not from the checkout
the editable install points at (see that script's docstring)."""
import importlib.util
import sys

_ROOT = {root!r}
_MAP = {mapping!r}


class _CopyFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        folder = _MAP.get(name)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(name, folder + "/__init__.py",
                                                      submodule_search_locations=[folder])


sys.meta_path.insert(0, _CopyFinder)
'''


@dataclass
class Mutant:
    id: str
    file: str  # relative to the repository
    line: int
    operator: str
    change: str  # "before -> after", one line
    source: str = field(repr=False, default="")  # the whole mutated file


@dataclass
class Result:
    id: str
    file: str
    line: int
    operator: str
    change: str
    status: str  # killed | survived | timeout | error
    seconds: float
    failed_test: str = ""


# ---------------------------------------------------------------------------------------------------------
# generating mutants

FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def _one_line(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _offsets(source: str) -> list[int]:
    starts, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def _span(node, lines: list[str], starts: list[int]) -> tuple[int, int]:
    """Character offsets of a node (AST columns are UTF-8 byte offsets within their line)."""
    def char(line: int, col: int) -> int:
        return starts[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore"))
    return char(node.lineno, node.col_offset), char(node.end_lineno, node.end_col_offset)


def _replace(source: str, node, new_node, lines, starts) -> str:
    start, end = _span(node, lines, starts)
    text = ast.unparse(ast.fix_missing_locations(new_node))
    if isinstance(node, ast.stmt):
        indent = " " * (node.col_offset)
        lines = text.splitlines()
        text = "\n".join([lines[0], *[indent + line for line in lines[1:]]])
    elif not isinstance(new_node, (ast.Slice, ast.Name, ast.Constant, ast.Call, ast.Subscript, ast.Attribute)):
        text = f"({text})"  # an operator's precedence must not bind to its neighbours
    return source[:start] + text + source[end:]


def _docstring_nodes(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                ids.add(id(first))
    return ids


def _candidates(tree):
    """(node, replacement node, operator) for every mutation of `tree`'s functions."""
    docstrings = _docstring_nodes(tree)
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for function in functions:
        if function.name == "__init__":
            for default in [*function.args.defaults, *function.args.kw_defaults]:
                if isinstance(default, ast.Constant) and type(default.value) is int:
                    yield default, ast.Constant(default.value + 1), "off-by-one (default)"
        for node in ast.walk(function):
            if id(node) in seen or node is function:
                continue
            seen.add(id(node))
            yield from _node_mutations(node, docstrings)


def _node_mutations(node, docstrings):
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in FLIPS:
        new = copylib.deepcopy(node)
        new.ops = [FLIPS[type(node.ops[0])]()]
        yield node, new, "comparison flip"
    if isinstance(node, (ast.If, ast.While)):
        new = copylib.deepcopy(node)
        new.test = ast.UnaryOp(ast.Not(), copylib.deepcopy(node.test))
        new.body, new.orelse = node.body, node.orelse
        yield node, _with_test(node, new.test), "boolean negation"
        if isinstance(node, ast.If) and node.orelse:
            swapped = ast.If(test=node.test, body=node.orelse, orelse=node.body)
            yield node, swapped, "branch swap"
    if isinstance(node, ast.IfExp):
        yield node, ast.IfExp(ast.UnaryOp(ast.Not(), node.test), node.body, node.orelse), "boolean negation"
        yield node, ast.IfExp(node.test, node.orelse, node.body), "branch swap"
    if isinstance(node, ast.BoolOp):
        yield node, ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values), \
            "boolean negation (and/or)"
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield node, ast.Constant(not node.value), "boolean negation (constant)"
    if isinstance(node, ast.Slice):
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is not None:
                new = ast.Slice(node.lower, node.upper, node.step)
                setattr(new, part, ast.BinOp(bound, ast.Add(), ast.Constant(1)))
                yield node, new, f"off-by-one (slice {part})"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
        args = list(node.args)
        index = 0 if len(args) == 1 else 1
        args[index] = ast.BinOp(args[index], ast.Add(), ast.Constant(1))
        yield node, ast.Call(node.func, args, node.keywords), "off-by-one (range)"
    if isinstance(node, ast.Return) and node.value is not None \
            and not (isinstance(node.value, ast.Constant) and node.value.value is None):
        yield node, ast.Return(ast.Constant(None)), "return swap (None)"
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and id(node) not in docstrings:
        yield node, ast.Pass(), "dropped call"


def _with_test(node, test):
    if isinstance(node, ast.If):
        return ast.If(test=test, body=node.body, orelse=node.orelse)
    return ast.While(test=test, body=node.body, orelse=node.orelse)


def mutants_of(path: Path, root: Path = REPO) -> list[Mutant]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    original = ast.dump(tree)
    starts = _offsets(source)
    lines = source.splitlines(keepends=True)
    rel = str(path.resolve().relative_to(root.resolve()))
    found: list[Mutant] = []
    seen_sources: set[str] = set()
    for node, new_node, operator in _candidates(tree):
        if isinstance(node, ast.expr) and not hasattr(node, "end_col_offset"):
            continue
        mutated = _replace(source, node, new_node, lines, starts)
        try:
            mutated_tree = ast.parse(mutated)
        except SyntaxError:
            continue
        if ast.dump(mutated_tree) == original or mutated in seen_sources:
            continue  # no change in code (or the same mutant reached twice)
        seen_sources.add(mutated)
        before = ast.get_source_segment(source, node) or ast.unparse(node)
        after = ast.unparse(ast.fix_missing_locations(new_node))
        found.append(Mutant(f"{path.stem}-{len(found) + 1:03d}", rel, node.lineno, operator,
                            f"{_one_line(before, 60)} -> {_one_line(after, 60)}", mutated))
    return found


# ---------------------------------------------------------------------------------------------------------
# the copy and its tests


def repository_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=repo,
                         capture_output=True, check=True).stdout.decode("utf-8")
    return [name for name in out.split("\0") if name and (repo / name).is_file()]


def package_mapping(root: Path) -> dict[str, str]:
    """Package name -> folder in `root`, as the install maps them (pyproject's package-dir; a package not
    listed there lives at its dotted path)."""
    import tomllib

    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    dirs = config.get("package-dir", {})
    mapping = {}
    for package in config.get("packages", []):
        parent, _, child = package.rpartition(".")
        if package in dirs:
            folder = dirs[package]
        elif parent in dirs:
            folder = f"{dirs[parent]}/{child}"
        else:
            folder = package.replace(".", "/")
        mapping[package] = str(root / folder)
    return mapping


def make_copy(repo: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in repository_files(repo):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    site = dest / ".mutate_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        SITECUSTOMIZE.format(root=str(dest), mapping=package_mapping(dest)), encoding="utf-8")
    return dest


def copy_env(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy / ".mutate_site")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("RAGZOO_DATA", str((REPO.parent / "shared" / "data")))
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env[name] = "1"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def check_imports_copy(copy: Path) -> None:
    probe = "import ragzoo, ragzoo.programs, ragzoo.metrics; print(ragzoo.__file__); print(ragzoo.programs.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=copy_env(copy), capture_output=True,
                         text=True, timeout=120)
    files = out.stdout.split()
    if out.returncode != 0 or len(files) != 2 or not all(Path(f).resolve().is_relative_to(copy.resolve())
                                                         for f in files):
        raise SystemExit(f"mutate: the copy at {copy} does not import its own ragzoo ({files or out.stderr[-500:]}); "
                         f"mutants there would test the original code")


def tests_for(file: str, root: Path) -> list[str]:
    """tests/programs and tests/diagnostics files naming the module or one of the method ids the file registers
    (the stage records a method returns are tested in tests/diagnostics)."""
    text = (root / file).read_text(encoding="utf-8")
    stem = Path(file).stem
    ids = re.findall(r'@register\(\s*"([^"]+)"', text)
    patterns = [f"ragzoo.programs.{stem}", *[f'"{method}"' for method in ids]]
    chosen = []
    for test in sorted([*(root / "tests" / "programs").glob("test_*.py"),
                        *(root / "tests" / "diagnostics").glob("test_*.py")]):
        body = test.read_text(encoding="utf-8")
        if any(pattern in body for pattern in patterns):
            chosen.append(str(test.relative_to(root)))
    return chosen


def run_tests(copy: Path, tests: list[str], timeout: float, server: "ForkServer | None" = None
              ) -> tuple[str, float, str]:
    if server is not None:
        return server.run(tests, timeout)
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests]
    try:
        out = subprocess.run(command, cwd=copy, env=copy_env(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - started, ""
    return _verdict(out.returncode, False, out.stdout, time.perf_counter() - started)


PRELOAD = ("litellm", "numpy", "pydantic", "pytest", "tiktoken", "httpx", "requests")
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rf"]


def serve() -> int:
    """The fork server of one copy (started by `ForkServer` with the copy's environment, in the copy): one JSON
    request per stdin line, {"tests": [...], "timeout": s, "log": path}; one JSON reply per line,
    {"code": pytest's exit code or null, "timeout": bool}."""
    import importlib
    import signal

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that is not installed is simply not preloaded
            pass
    assert not any(name == "ragzoo" or name.startswith(("ragzoo.", "dspy")) for name in sys.modules)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: a fresh pytest run in this copy
            code = 70
            try:
                os.setpgid(0, 0)
                log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                import pytest

                code = int(pytest.main([*PYTEST_ARGS, *request["tests"]]))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + float(request["timeout"])
        status, timed_out = None, False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.05)
        code = None if timed_out else (os.waitstatus_to_exitcode(status))
        try:  # the child's own subprocesses, if any outlived it
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        print(json.dumps({"code": code, "timeout": timed_out}), flush=True)
    return 0


class ForkServer:
    """The client side of `serve()` for one copy."""

    def __init__(self, copy: Path):
        self.copy = copy
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"], cwd=copy,
                                        env=copy_env(copy), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)

    def run(self, tests: list[str], timeout: float) -> tuple[str, float, str]:
        started = time.perf_counter()
        log = self.copy / ".mutate_site" / "pytest.log"
        self.process.stdin.write(json.dumps({"tests": tests, "timeout": timeout, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        seconds = time.perf_counter() - started
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return _verdict(reply["code"], reply["timeout"], output, seconds)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _verdict(code, timed_out: bool, output: str, seconds: float) -> tuple[str, float, str]:
    if timed_out:
        return "timeout", seconds, ""
    if code == 0:
        return "survived", seconds, ""
    failed = next((line[len("FAILED "):] for line in output.splitlines() if line.startswith("FAILED ")), "")
    if not failed:
        failed = next((line for line in output.splitlines() if line.startswith("ERROR ")), "") or f"exit {code}"
    return "killed", seconds, _one_line(failed, 160)


# ---------------------------------------------------------------------------------------------------------


def select(mutants: list[Mutant], per_file: int, seed: int) -> list[Mutant]:
    """Up to `per_file` mutants, spread over the operators (round robin over a seeded shuffle of each)."""
    if per_file <= 0 or len(mutants) <= per_file:
        return mutants
    rng = random.Random(seed)
    by_operator: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        by_operator.setdefault(mutant.operator.split(" (")[0], []).append(mutant)
    for group in by_operator.values():
        rng.shuffle(group)
    chosen: list[Mutant] = []
    while len(chosen) < per_file:
        for group in by_operator.values():
            if group and len(chosen) < per_file:
                chosen.append(group.pop())
    return sorted(chosen, key=lambda m: m.line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="method files (default: every programs/*.py but __init__/base)")
    parser.add_argument("--per-file", type=int, default=8, help="mutants per file at most (0: all)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (one repository copy each)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="/tmp/mutants", help="where the copies go (replaced)")
    parser.add_argument("--out", help="write every result as JSON lines here")
    parser.add_argument("--tests", nargs="+", help="run these test files for every file's mutants instead of the "
                                                   "ones chosen by name")
    parser.add_argument("--no-fork", dest="fork", action="store_false",
                        help="start python -m pytest per mutant instead of forking a preloaded server")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--list", action="store_true", help="print the mutants and their tests; run nothing")
    args = parser.parse_args(argv)
    if args.serve:
        return serve()

    files = [str(Path(f).resolve().relative_to(REPO)) for f in args.files] or sorted(
        str(p.relative_to(REPO)) for p in (REPO / "programs").glob("*.py")
        if p.name not in ("__init__.py", "base.py"))
    def make_plan(root: Path) -> tuple[dict, list[tuple[Mutant, list[str]]]]:
        tests_of = {file: list(args.tests) if args.tests else tests_for(file, root) for file in files}
        return tests_of, [(mutant, tests_of[file]) for file in files
                          for mutant in select(mutants_of(root / file, root), args.per_file, args.seed)]

    by_file, plan = make_plan(REPO)
    if args.list:
        for mutant, tests in plan:
            print(f"{mutant.id:<22} {mutant.file}:{mutant.line:<5} {mutant.operator:<26} {mutant.change}")
            print(f"{'':<22} tests: {' '.join(tests) or '(none)'}")
        print(f"{len(plan)} mutants over {len(files)} files")
        return 0

    started = time.perf_counter()
    workdir = Path(args.workdir)
    jobs = max(1, args.jobs)
    copies = [make_copy(REPO, workdir / f"w{i}") for i in range(jobs)]
    for copy in copies:
        check_imports_copy(copy)
    by_file, plan = make_plan(copies[0])  # from the copy's text: the checkout may have changed meanwhile
    print(f"mutate: {len(plan)} mutants over {len(files)} files, {jobs} copies under {workdir} "
          f"(each imports its own ragzoo)", flush=True)
    use_fork = args.fork and hasattr(os, "fork")
    servers = {copy: ForkServer(copy) if use_fork else None for copy in copies}

    free: queue.Queue = queue.Queue()
    for copy in copies:
        free.put(copy)

    def on_a_copy(run):
        copy = free.get()
        try:
            return run(copy)
        finally:
            free.put(copy)

    # baseline per file (on both copies at once), then the sentinel: the first file's module raising on
    # import must fail its tests
    broken: dict[str, str] = {file: "no test names it" for file, tests in by_file.items() if not tests}

    def baseline(file):
        return file, on_a_copy(lambda copy: run_tests(copy, by_file[file], args.timeout * 3, servers[copy]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for file, (status, seconds, failed) in pool.map(baseline, [f for f in files if f not in broken]):
            print(f"baseline {file}: {'ok' if status == 'survived' else status} ({seconds:.1f}s, "
                  f"{len(by_file[file])} test files)", flush=True)
            if status != "survived":
                broken[file] = f"its tests fail unmutated: {failed}"
    sentinel_file = next((f for f in files if f not in broken), None)
    if sentinel_file is not None:
        path = copies[0] / sentinel_file
        original = path.read_text(encoding="utf-8")
        path.write_text('raise ImportError("tools/mutate.py sentinel")\n' + original, encoding="utf-8")
        try:
            status, _, failed = run_tests(copies[0], by_file[sentinel_file], args.timeout, servers[copies[0]])
        finally:
            path.write_text(original, encoding="utf-8")
        if status != "killed":
            raise SystemExit(f"mutate: a sentinel mutant of {sentinel_file} in the copy did not fail its tests: the "
                             f"tests do not import the copy")
        print(f"sentinel: {sentinel_file} raising on import fails its tests in the copy ({failed})", flush=True)

    pending = [(m, t) for m, t in plan if m.file not in broken]
    results: list[Result] = []

    def run_one(item) -> Result:
        mutant, tests = item
        copy = free.get()
        path = copy / mutant.file
        original = path.read_text(encoding="utf-8")
        try:
            path.write_text(mutant.source, encoding="utf-8")
            status, seconds, failed = run_tests(copy, tests, args.timeout, servers[copy])
        finally:
            path.write_text(original, encoding="utf-8")
            free.put(copy)
        return Result(mutant.id, mutant.file, mutant.line, mutant.operator, mutant.change, status, round(seconds, 1),
                      failed)

    out = open(args.out, "w", encoding="utf-8") if args.out else None
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for result in pool.map(run_one, pending):
                results.append(result)
                mark = {"survived": "SURVIVED"}.get(result.status, result.status)
                print(f"{mark:<8} {result.id:<22} {result.file}:{result.line:<5} {result.operator:<26} "
                      f"{result.change}  [{result.seconds:.1f}s]", flush=True)
                if out is not None:
                    out.write(json.dumps(asdict(result)) + "\n")
                    out.flush()
    finally:
        if out is not None:
            out.close()
        for server in servers.values():
            if server is not None:
                server.close()

    killed = [r for r in results if r.status in ("killed", "timeout")]
    survivors = [r for r in results if r.status == "survived"]
    timeouts = sum(r.status == "timeout" for r in results)
    print(f"\n{len(killed)}/{len(results)} mutants killed ({100 * len(killed) / max(1, len(results)):.1f}%)"
          + (f", {timeouts} of them by the timeout" if timeouts else "")
          + f"; {len(files)} files, {(time.perf_counter() - started) / 60:.1f} min")
    for file, why in broken.items():
        print(f"not run: {file}: {why}")
    if survivors:
        print("survivors:")
        for r in survivors:
            print(f"  {r.id} {r.file}:{r.line} {r.operator}: {r.change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
