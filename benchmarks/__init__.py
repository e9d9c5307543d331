"""The benchmark scripts: measurements behind the numbers in README and docs/*.md.

Not part of the toolgym package (the wheel ships ``toolgym.*`` only, see pyproject.toml). Run a
script from the repository root as a module, ``python -m benchmarks.NAME [options]`` (e.g.
``python -m benchmarks.retrieval --quick``); the scripts share ``benchmarks._report`` (results
files and docs/benchmarks.md sections) and import each other as ``benchmarks.NAME``. They use the
public API of toolgym only (tests/test_benchmarks_api.py).
"""
