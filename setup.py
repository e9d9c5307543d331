"""toolgym: RL environments and credit-assignment modules for agentic tool search.

Each top-level folder is one subpackage, mapped to ``toolgym.<folder>`` so the repository
shows the architecture and import names cannot collide with other packages.
"""
from pathlib import Path

from setuptools import find_packages, setup

SUBPACKAGES = ["envs", "retrieval", "data", "agents", "rewards", "evaluation", "trainers", "fitting", "cli", "integrations"]
# Nested packages (trainers/verl, the verl plugin; data/dialogue_generator) are found under each folder.
NESTED = {f"toolgym.{name}.{sub}": f"{name}/{sub.replace('.', '/')}" for name in SUBPACKAGES
          for sub in find_packages(name)}

setup(
    name="toolgym",
    version="0.1.0",
    description="RL environment suite for LLM agents that search tool libraries",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # `toolgym` itself is an implicit namespace package: it has no folder of its own.
    packages=[f"toolgym.{name}" for name in SUBPACKAGES] + sorted(NESTED),
    package_dir={**{f"toolgym.{name}": name for name in SUBPACKAGES}, **NESTED},
    package_data={"toolgym.data": ["bundled/*.jsonl.gz", "bundled/*.json", "bundled/LICENSES/*"]},
    include_package_data=True,
    # Other trainers toolgym plugs into (toolgym.integrations): optional, never imported by the rest.
    # jmespath: transformers < 5.13 parses tool calls with it (TRL's response schema).
    extras_require={"trl": ["trl==1.16.0", "jmespath>=1.0"], "verifiers": ["verifiers==0.4.0"]},
    entry_points={"console_scripts": ["toolgym = toolgym.cli.main:main"]},
)
