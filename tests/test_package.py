"""The installable package: the root API, the folder-name import guard, and pyproject.toml's
dependencies against requirements.txt and constraints-cpu.txt (README, Install on a GPU machine)."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import toolgym

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ["envs", "retrieval", "data", "agents", "rewards", "evaluation", "trainers", "fitting", "cli", "integrations"]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_toolgym_does_not_import_torch(tmp_path):
    done = run_python("import toolgym, sys; assert 'torch' not in sys.modules; assert 'gymnasium' not in sys.modules; "
                      "print(toolgym.__version__)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == toolgym.__version__


def test_root_api_names_resolve_without_torch(tmp_path):
    # the core (envs, rewards, retrieval, data) needs no torch: pyproject.toml keeps it an extra
    code = ("import sys, toolgym; [getattr(toolgym, n) for n in toolgym.__all__]; "
            "assert 'torch' not in sys.modules, 'a root name imports torch'")
    done = run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr


def test_root_api_is_short_documented_and_listed():
    names = [n for n in toolgym.__all__ if n != "__version__"]
    assert 15 <= len(names) <= 30
    assert set(toolgym.__all__) <= set(dir(toolgym))
    for name in names:
        assert name in toolgym.__doc__, f"toolgym.{name} is not in the root docstring"
        assert getattr(toolgym, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        toolgym.nope  # noqa: B018


def test_root_names_are_the_subpackages_objects():
    from toolgym.data.records import Task
    from toolgym.envs.base import ToolEnv
    from toolgym.rewards import get_reward

    assert toolgym.Task is Task and toolgym.ToolEnv is ToolEnv and toolgym.get_reward is get_reward


def test_make_registers_the_builtin_ids():
    env = toolgym.make("toolgym/ToolSearch-v0", max_turns=2)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["messages"]


def test_version_matches_the_installed_metadata():
    from importlib.metadata import version

    assert version("toolgym") == toolgym.__version__


@pytest.mark.parametrize("folder", SUBPACKAGES)
def test_a_folder_imported_by_its_own_name_names_the_package(folder):
    done = run_python(f"import {folder}", ROOT)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError") and f"toolgym.{folder}" in last, last


def test_cli_runs_as_a_module(tmp_path):
    done = subprocess.run([sys.executable, "-m", "toolgym.cli.main", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "toolgym" in done.stdout, done.stderr


# -- dependencies: pyproject.toml (what users install) against requirements.txt (what make installs) --
def _requirements(lines) -> dict[str, Requirement]:
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            found[canonicalize_name(req.name)] = req
    return found


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_pyproject_and_requirements_name_the_same_ranges():
    project = _pyproject()
    declared = _requirements(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        for req in _requirements(reqs).values():
            if canonicalize_name(req.name) == "toolgym":
                assert set(req.extras) <= set(project["optional-dependencies"]), f"{extra}: unknown extra in {req}"
                continue
            declared[canonicalize_name(req.name)] = req
    listed = _requirements((ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines())
    assert set(declared) == set(listed), f"only in pyproject: {set(declared) - set(listed)}; " \
                                         f"only in requirements.txt: {set(listed) - set(declared)}"
    for name, req in declared.items():
        assert (req.specifier, req.extras) == (listed[name].specifier, listed[name].extras), f"{req} vs {listed[name]}"


def test_torch_is_a_range_and_the_cpu_pin_is_a_constraint():
    project = _pyproject()
    every = [*project["dependencies"], *(r for reqs in project["optional-dependencies"].values() for r in reqs)]
    torch = [Requirement(r) for r in every if canonicalize_name(Requirement(r).name) == "torch"]
    assert torch and all("==" not in str(r.specifier) for r in torch), torch
    assert not any(canonicalize_name(Requirement(r).name) == "torch" for r in project["dependencies"])
    pins = _requirements((ROOT / "constraints-cpu.txt").read_text(encoding="utf-8").splitlines())
    pinned = next(iter(pins["torch"].specifier)).version
    assert all(r.specifier.contains(pinned) for r in torch)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-c constraints-cpu.txt" in makefile
    assert "pyproject.toml" in makefile and "constraints-cpu.txt" in makefile.split("$(STAMP):", 1)[1].splitlines()[0]
