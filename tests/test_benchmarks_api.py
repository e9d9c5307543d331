"""The benchmark scripts use toolgym's public API and run as ``python -m benchmarks.NAME`` (issue 35 item 5).

Checked on the source of every ``benchmarks/*.py`` with ``ast`` (nothing is imported or run):

- no private name from another package: ``from toolgym.x import _name``, ``import toolgym._x``,
  ``obj._name`` on anything but ``self`` / ``cls``, ``getattr(obj, "_name")``. The benchmarks
  package's own modules may import each other's private names (``from benchmarks._report import
  ...``): ``_report`` is the package's shared helper, private to the package, not to the module;
  its leading underscore only says it is not a benchmark to run;
- no ``sys.path`` edit and no import by file path (``spec_from_file_location``, ``SourceFileLoader``),
  no ``sys.modules`` assignment: the scripts import each other as ``benchmarks.NAME``;
- nothing at module level (import time) mutates state of another first-party module (``toolgym.*``
  or ``benchmarks.*``): no assignment, augmented assignment or ``del`` on an attribute or item of
  such a name, no mutating method call on it (``setdefault``, ``update``, ``append``, ...), no
  ``setattr`` / ``delattr`` on it. (``os.environ.setdefault("OMP_WAIT_POLICY", ...)`` before torch
  loads is the process's settings, not another module's, and is allowed.)

``test_the_check_catches`` shows each rule failing on a small source string.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
FIRST_PARTY = ("toolgym", "benchmarks")
OWN_PACKAGE = "benchmarks"
# a script's bare name (``from learning import ENVS``: the old sys.path style) is first-party too
SIBLINGS = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__"}
MUTATORS = {"setdefault", "update", "append", "extend", "insert", "pop", "popitem", "clear", "remove", "add",
            "discard", "sort", "reverse", "__setitem__", "__delitem__", "__setattr__", "__delattr__"}
PATH_IMPORTERS = {"spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "load_source"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.AST) -> ast.AST:
    """The innermost object of ``a.b[c].d``: the ``a`` Name (or whatever expression starts the chain)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _module_level(tree: ast.Module):
    """Statements that run at import: the module body and the bodies of its top-level if / try /
    with / for / while blocks, not function or class bodies."""
    todo = list(tree.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            todo += getattr(stmt, field, [])
        for handler in getattr(stmt, "handlers", []):
            todo += handler.body


def violations(source: str, own_package: str = OWN_PACKAGE) -> list[str]:
    """Every rule of the module docstring that ``source`` (one benchmark script) breaks, one line each."""
    tree = ast.parse(source)
    found: list[str] = []

    def where(node: ast.AST) -> str:
        return f"line {getattr(node, 'lineno', '?')}"

    # 1. private names from another package; imports by path; sys.path / sys.modules edits (anywhere)
    first_party: set[str] = set()  # names bound at module level to a toolgym / benchmarks module or object
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            relative = node.level > 0
            own = relative or module == own_package or module.startswith(own_package + ".")
            if not own and module != "__future__":
                if any(_private(part) for part in module.split(".")):
                    found.append(f"{where(node)}: imports the private module {module}")
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{where(node)}: imports the private name {alias.name} from {module}")
            if relative or module.split(".")[0] in FIRST_PARTY or module.split(".")[0] in SIBLINGS:
                first_party.update((a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top != own_package and any(_private(part) for part in alias.name.split(".")):
                    found.append(f"{where(node)}: imports the private module {alias.name}")
                if top in FIRST_PARTY or top in SIBLINGS:
                    first_party.add(alias.asname or top)
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                found.append(f"{where(node)}: uses the private attribute {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                    and _private(node.args[1].value):
                found.append(f"{where(node)}: {name}(..., {node.args[1].value!r}) reaches a private attribute")
            if name in PATH_IMPORTERS:
                found.append(f"{where(node)}: imports a module by file path ({name}); import benchmarks.NAME")
            if isinstance(func, ast.Attribute) and _dotted(func.value) == "sys.path":
                found.append(f"{where(node)}: edits sys.path ({ast.unparse(func)})")
            if name == "addsitedir":
                found.append(f"{where(node)}: edits sys.path (site.addsitedir)")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                edited = _dotted(target.value if isinstance(target, ast.Subscript) else target)
                if edited in ("sys.path", "sys.modules"):
                    found.append(f"{where(node)}: edits {edited}")

    # 2. import-time mutation of another first-party module's state
    for stmt in _module_level(tree):
        targets: list[ast.AST] = []
        if isinstance(stmt, (ast.Assign, ast.Delete)):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            targets = [stmt.target]
        for target in targets:
            for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    root = _root(t)
                    if isinstance(root, ast.Name) and root.id in first_party:
                        found.append(f"{where(stmt)}: changes {ast.unparse(t)} of the imported {root.id} at import")
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
                root = _root(func.value)
                if isinstance(root, ast.Name) and root.id in first_party:
                    found.append(f"{where(node)}: {ast.unparse(func)}(...) changes the imported {root.id} at import")
            if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                root = _root(node.args[0])
                if isinstance(root, ast.Name) and root.id in first_party:
                    found.append(f"{where(node)}: {func.id}({ast.unparse(node.args[0])}, ...) at import")
    return found


SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_uses_the_public_api_only(name):
    found = violations((BENCHMARKS / name).read_text(encoding="utf-8"))
    assert not found, f"benchmarks/{name}:\n" + "\n".join(found)


CAUGHT = {
    "private name from toolgym": "from toolgym.retrieval.index import ToolIndex, _top_k_rows\n",
    "private module from toolgym": "import toolgym.retrieval._private\n",
    "private attribute of an object": "def f(index):\n    return index._bm25.scores(['q'])\n",
    "private attribute by getattr": "def f(index):\n    return getattr(index, '_faiss')\n",
    "sys.path.insert": "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).parent))\n",
    "sys.path.append in a function": "import sys\ndef main():\n    sys.path.append('benchmarks')\n",
    "sys.path assigned": "import sys\nsys.path = ['x'] + sys.path\n",
    "sys.path item assigned": "import sys\nsys.path[0] = 'x'\n",
    "sys.modules entry": "import sys\nsys.modules['learning'] = object()\n",
    "import by file path": "import importlib.util\nspec = importlib.util.spec_from_file_location('x', 'benchmarks/x.py')\n",
    "setdefault on another script's dict": "from benchmarks.learning import ENVS\nENVS.setdefault('multi', {})\n",
    "item of another script's dict": "from benchmarks import learning\nlearning.ENVS['multi'] = {}\n",
    "attribute of a toolgym module": "import toolgym.retrieval.index as index\nindex.HYBRID_DEPTH = 5\n",
    "augmented attribute in an if block": "from benchmarks import learning\nif True:\n    learning.RUNS |= {}\n",
    "setattr on a toolgym module": "import toolgym.retrieval.index\nsetattr(toolgym.retrieval.index, 'RRF_C', 1.0)\n",
    "del of an item": "from benchmarks.learning import ENVS\ndel ENVS['toolsearch']\n",
    "update through a relative import": "from .learning import ENVS\nENVS.update(x={})\n",
    "a sibling script by its bare name": "from learning import ENVS\nENVS.setdefault('multi', {})\n",
}
PASSES = {
    "the package's own helper": "from benchmarks._report import RESULTS, write_report\n",
    "another script's public names": "from benchmarks.learning import ENVS, grpo_config\n",
    "process settings before torch": "import os\nos.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')\n",
    "own private state": "class C:\n    def __init__(self):\n        self._policy = None\n",
    "own module-level dict": "ENVS = {}\nENVS['a'] = 1\nENVS.setdefault('b', 2)\n",
    "a copy of another script's dict": "from benchmarks.learning import ENVS\nMINE = dict(ENVS)\nMINE['x'] = {}\n",
    "mutation inside main (run time, not import)": "from benchmarks.learning import ENVS\ndef main():\n    ENVS['x'] = {}\n",
    "dunder attributes": "import toolgym\nVERSION = toolgym.__version__\n",
}


@pytest.mark.parametrize("case", sorted(CAUGHT))
def test_the_check_catches(case):
    assert violations(CAUGHT[case]), f"{case}: not caught"


@pytest.mark.parametrize("case", sorted(PASSES))
def test_the_check_lets_through(case):
    assert violations(PASSES[case]) == [], case


def test_benchmarks_import_each_other_as_a_package_not_shipped_in_the_wheel():
    """benchmarks/ is a package (``python -m benchmarks.NAME``), every ``benchmarks.X`` a script imports
    exists, and pyproject.toml maps no benchmarks package into the toolgym wheel."""
    assert (BENCHMARKS / "__init__.py").is_file()

    def exists(module: str) -> bool:
        path = ROOT / Path(*module.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    for name in SCRIPTS:
        for node in ast.walk(ast.parse((BENCHMARKS / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "benchmarks":
                assert exists(node.module), f"benchmarks/{name} imports {node.module}, which is not there"
                if node.module == "benchmarks":  # from benchmarks import learning: a script
                    for alias in node.names:
                        assert exists(f"benchmarks.{alias.name}"), f"benchmarks/{name} imports benchmarks.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "benchmarks":
                        assert exists(alias.name), f"benchmarks/{name} imports {alias.name}, which is not there"
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert not [p for p in setuptools["packages"] if "benchmarks" in p]
    assert not [d for d in setuptools["package-dir"].values() if d.split("/")[0] == "benchmarks"]


COMMAND = re.compile(r"python[0-9.]*\s+benchmarks/[A-Za-z0-9_]+\.py|\$\(PY\)\s+benchmarks/")


def test_no_doc_gives_the_old_command():
    """``python benchmarks/NAME.py`` no longer runs (the scripts import ``benchmarks.*``): README, docs,
    configs, the Makefile and the scripts' own docstrings give ``python -m benchmarks.NAME``."""
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "configs").rglob("*.yaml")), *sorted(BENCHMARKS.glob("*.py")),
             *sorted((ROOT / "tests").glob("*.py"))]
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files if p.exists() and p.name != Path(__file__).name
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if COMMAND.search(line)]
    assert not bad, "\n".join(bad)


def test_every_kept_result_is_named_somewhere():
    """Each committed file under benchmarks/results is named (its path, or a folder holding it) by README,
    docs/*.md, a test, a benchmark script or another kept results file (a payload's ``per_query_file``):
    the repository keeps the results the docs quote and the rows behind them, nothing unreferenced
    (docs/benchmarks.md, "Running them, and what is kept")."""
    import subprocess

    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "benchmarks/results"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    kept = [line for line in listed.stdout.splitlines() if line]
    texts = [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                                                     *sorted((ROOT / "tests").glob("*.py")), *sorted(BENCHMARKS.glob("*.py"))]]
    texts += [p.read_text(encoding="utf-8") for p in sorted((BENCHMARKS / "results").glob("*.json"))
              if p.stat().st_size < 200_000]
    corpus = "\n".join(texts)
    unnamed = []
    for path in kept:
        inside = path.removeprefix("benchmarks/results/")
        parts = inside.split("/")
        names = {f"results/{inside}"} | {f"results/{'/'.join(parts[:i])}/" for i in range(1, len(parts))}
        names |= {f"results/{parts[0]}`", f"results/{parts[0]}\n", f"results/{parts[0]} "} if len(parts) > 1 else set()
        if not any(n in corpus for n in names):
            unnamed.append(path)
    assert not unnamed, "kept but named nowhere:\n" + "\n".join(unnamed)
