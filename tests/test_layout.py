"""The architecture rules of docs/architecture.md, checked on the source: imports point one way."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# package -> toolgym subpackages it must not import
# The rooms from the bottom up; a room imports only rooms below it (data and retrieval, the two
# leaves, may not import each other's upper neighbours either):
#   data, retrieval < envs, rewards < agents < evaluation < trainers < fitting < cli, integrations
UPPER = {"envs", "agents", "rewards", "evaluation", "trainers", "fitting", "cli", "integrations"}
FORBIDDEN = {
    "retrieval": UPPER,
    "data": UPPER,
    "envs": UPPER - {"envs"},
    "rewards": UPPER - {"rewards"},
    "agents": UPPER - {"envs", "rewards", "agents"},
    "evaluation": {"trainers", "fitting", "cli", "integrations"},
    "trainers": {"fitting", "cli", "integrations"},
    "fitting": {"cli", "integrations"},
    # the command line and the integrations (TRL, verifiers) sit on top; nothing imports them
    "cli": {"integrations"},
    "integrations": {"cli"},
}
NOT_SHIPPED = {"benchmarks"}  # a package (python -m benchmarks.NAME), outside the toolgym wheel
NEVER_OUTSIDE_TRAINERS = {"verl", "ray"}
NEVER_OUTSIDE_INTEGRATIONS = {"trl", "verifiers"}  # optional extras: only toolgym.integrations imports them


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[0] in NEVER_OUTSIDE_TRAINERS and package != "trainers":
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
            if parts[0] in NEVER_OUTSIDE_INTEGRATIONS and package != "integrations":
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
            if parts[0] == "toolgym" and len(parts) > 1 and parts[1] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
            if module == "toolgym":  # the root API sits above every room and imports them lazily
                bad.append(f"{path.relative_to(ROOT)} imports the root package (import from its subpackage)")
    assert not bad, "\n".join(bad)


def test_every_package_folder_is_mapped_in_pyproject():
    """pyproject.toml lists every folder with an ``__init__.py`` as ``toolgym.<folder path>``, and
    ``toolgym/`` (the root API) as ``toolgym``; nothing else (``benchmarks/`` is a package of scripts
    that the wheel does not ship)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    expected = {"toolgym": "toolgym"}
    for package in sorted(FORBIDDEN):
        assert (ROOT / package / "__init__.py").exists()
        for init in sorted((ROOT / package).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT).as_posix()
            expected["toolgym." + folder.replace("/", ".")] = folder
    assert setuptools["package-dir"] == expected
    assert sorted(setuptools["packages"]) == sorted(expected)
    # every top-level folder with an __init__.py is a mapped subpackage, but for benchmarks/: a
    # package of scripts (python -m benchmarks.NAME) that the wheel does not ship
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert folders - {"toolgym"} == set(FORBIDDEN) | NOT_SHIPPED, sorted(folders)
    assert sorted(p.name for p in (ROOT / "toolgym").iterdir() if p.suffix == ".py") == ["__init__.py"]


def test_cli_lists_subcommands(capsys):
    from toolgym.cli.main import main

    assert main([]) == 0
    out = capsys.readouterr().out
    for name in ("eval", "envs", "replay", "train"):
        assert name in out
    assert main(["nonsense"]) == 2
