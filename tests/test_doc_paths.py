"""Every repository path that README.md, docs/*.md or a docstring names in backticks exists.

A path here is a backticked word whose first part is a top-level folder of the repository
(``configs/verl/launch.sh``, ``benchmarks/results/quickstart.json``, ``docs/scale.md#...``,
``tests/test_layout.py::test_...``) or one of its top-level files (``pyproject.toml``). Skipped:
run outputs (``runs/...``), placeholders (``<name>``, ``{name}``, ``RUN_DIR``, ``...``), and
paths outside the repository (``../shared``, ``~/.cache``, ``/tmp``). A glob must match a file.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"agents", "benchmarks", "cli", "configs", "data", "docs", "envs", "evaluation", "examples", "fitting",
           "integrations", "retrieval", "rewards", "tests", "toolgym", "trainers", ".ci"}
FILES = {"README.md", "Makefile", "pyproject.toml", "requirements.txt", "constraints-cpu.txt", "pytest.ini"}
# Named but not files of this repository, each with its reason.
ELSEWHERE = {
    # files inside the upstream datasets' own archives (the loaders read them from there)
    "data/all_apis.csv": "API-Bank's archive", "data/all_clean_data.csv": "MetaTool's archive",
    "data/multi_tool_query_golden.json": "MetaTool's archive", "data/ultratool/": "GNN4TaskPlan's repository",
    "examples/x.py": "an example name in tests/conftest.py",
}
CODE = re.compile(r"``([^`\n]+)``|`([^`\n]+)`")
PACKAGE_DIRS = [*sorted(FOLDERS - {"docs", "configs"})]


def named_paths(text: str) -> list[str]:
    found = []
    for match in CODE.finditer(text):
        for word in (match.group(1) or match.group(2)).split():
            word = word.strip("([{\"'").rstrip(".,:;)]}\"'")
            word = re.split(r"#|::", word, maxsplit=1)[0]
            word = re.sub(r":\d+(-\d+)?$", "", word)  # file:line
            if not word or word.startswith(("/", "~", "..", "-")) or "=" in word:
                continue
            head = word.split("/", 1)[0]
            if not (word in FILES or ("/" in word and head in FOLDERS)):
                continue
            parts = word.rstrip("/").split("/")
            if re.fullmatch(r"[\w.*-]+-v\d+", parts[-1]) or re.fullmatch(r"toolgym/[A-Z].*", word):
                continue  # a gymnasium env id: toolgym/ToolSearch-v0, toolgym/Decompose-*
            if any(c in word for c in "<>{}$") or "..." in word or any(p.split(".")[0].isupper() for p in parts):
                continue  # a placeholder: benchmarks/results/<name>.json, configs/verl/RECIPE.yaml
            found.append(word)
    return found


def exists(path: str) -> bool:
    if path in ELSEWHERE:
        return True
    if "*" in path or "?" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def doc_texts() -> list[tuple[str, str]]:
    texts = [("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))]
    texts += [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").glob("*.md"))]
    return texts


def docstrings() -> list[tuple[str, str]]:
    out = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    if doc:
                        where = path.relative_to(ROOT).as_posix() + ("" if isinstance(node, ast.Module) else f" ({node.name})")
                        out.append((where, doc))
    return out


def test_the_scanner_finds_paths_and_skips_placeholders():
    text = ("`configs/verl/launch.sh RECIPE`, ``tests/test_layout.py::test_cli``, `docs/scale.md#verl`, "
            "`benchmarks/results/<name>.json`, `runs/quickstart/sft`, `../shared/data`, `pyproject.toml`, "
            "`configs/verl/RECIPE.yaml`, `toolgym eval`, `envs/base.py:12`")
    assert named_paths(text) == ["configs/verl/launch.sh", "tests/test_layout.py", "docs/scale.md",
                                 "pyproject.toml", "envs/base.py"]


@pytest.mark.parametrize("where, text", doc_texts(), ids=[name for name, _ in doc_texts()])
def test_every_path_a_doc_names_exists(where, text):
    missing = sorted({p for p in named_paths(text) if not exists(p)})
    assert not missing, f"{where} names paths that do not exist: {missing}"


def test_every_path_a_docstring_names_exists():
    missing = sorted({f"{where}: {p}" for where, doc in docstrings() for p in named_paths(doc) if not exists(p)})
    assert not missing, "docstrings name paths that do not exist:\n" + "\n".join(missing)
