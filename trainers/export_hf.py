"""``toolgym export-hf ENV_ID --out DIR``: an env's tasks and corpus as a Hugging Face ``datasets`` folder.

:func:`task_rows` is the one row builder for every trainer that reads tasks from a file: the
``datasets`` export here (what TRL's ``GRPOTrainer`` and verifiers read), ``toolgym export-verl``
(verl's ``RLHFDataset`` layout, :mod:`toolgym.trainers.export_verl`) and the TRL integration
(:mod:`toolgym.integrations.trl`). Each row is one task of the env, reset on that task:

* ``prompt``: the opening chat for a trainer that renders the tool schemas itself through the
  chat template (TRL, verifiers): the env's system prompt *without* its ``# Tools`` block, then
  the task's prior turns and the request. For an env without tools (``Decompose``) it equals
  ``env_prompt``;
* ``env_prompt``: the env's own opening chat (``info["messages"]``): the system prompt with the
  function schemas and the call format, what a local rollout and verl's agent loop start from;
* ``tools``: the OpenAI function schemas of the episode, as JSON (``"[]"`` without tools);
* ``task_id``, ``index``, ``split``, ``query``, ``gold`` (sorted ids), ``env_id``, ``env_kwargs``
  (JSON), and ``task``: the whole :class:`~toolgym.data.records.Task` as JSON, so ``toolgym eval
  --tasks DIR`` reads the tasks back exactly.

The folder: ``README.md`` (the dataset card: counts, source and licence, how the tasks were
derived, the two configs), ``tasks/<split>.parquet`` and ``corpus/tools.parquet``. toolgym reads
it back (:func:`load_export`) from those parquet files alone, never through the card, which could
name a URL or a path outside the folder. With ``datasets``::

    import datasets
    tasks = datasets.load_dataset(DIR, "tasks", split="train")
    corpus = datasets.load_dataset(DIR, "corpus", split="train")
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


TOOLS_HEADER = "\n\n# Tools\n\n"  # where toolgym's hermes system prompt starts its schema block
TASKS_CONFIG, CORPUS_CONFIG = "tasks", "corpus"
CORPUS_FILE = "corpus/tools.parquet"
MAX_ENV_KWARGS_CHARS = 65_536  # a few gymnasium.make keywords; longer input is refused unparsed


def check_max_tasks(max_tasks: int | None) -> None:
    """``--max-tasks`` is a count: None (all) or at least 1; 0 and negatives are refused."""
    if max_tasks is None:
        return
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ValueError(f"--max-tasks must be a positive integer, got {max_tasks!r}")


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs`` JSON: an object of ``gymnasium.make`` keywords, capped before parsing."""
    if len(text) > MAX_ENV_KWARGS_CHARS:
        raise ValueError(f"--env-kwargs is longer than {MAX_ENV_KWARGS_CHARS} characters")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError("--env-kwargs is nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    return value


def instructions_prompt(messages: list[dict[str, Any]], has_tools: bool) -> list[dict[str, str]]:
    """The env's opening chat without the schema block of its system prompt (the chat template adds it)."""
    out = [{"role": m["role"], "content": m["content"]} for m in messages]
    if has_tools and out and out[0]["role"] == "system":
        head, sep, _ = out[0]["content"].partition(TOOLS_HEADER)
        if not sep:  # search_r1 prompts describe the tags in prose: keep them whole
            return out
        out[0] = {"role": "system", "content": head}
    return out


def make_env(env_id: str, split: str | None = None, env_kwargs: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """``gymnasium.make(env_id, split=split, **env_kwargs)`` and the keywords it was built with."""
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs["split"] = split
    return gymnasium.make(env_id, **kwargs), kwargs


def task_rows(env_id: str, split: str | None = None, env_kwargs: dict[str, Any] | None = None,
              max_tasks: int | None = None, env: Any = None) -> list[dict[str, Any]]:
    """One row per task of ``env_id`` built with ``split`` (and ``env_kwargs``): the module docstring's columns."""
    check_max_tasks(max_tasks)
    own = env is None
    if own:
        env, kwargs = make_env(env_id, split, env_kwargs)
    else:
        kwargs = dict(env_kwargs or {})
        if split is not None:
            kwargs["split"] = split
    tasks = list(env.unwrapped.tasks)
    if split is not None:
        tasks = [t for t in tasks if t.split == split] or tasks
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    rows = []
    try:
        for index, task in enumerate(tasks):
            _, info = env.reset(seed=index, options={"task": task.id})
            schemas = info.get("tool_schemas") or []
            rows.append({
                "task_id": task.id,
                "index": index,
                "split": split or task.split,
                "query": task.query,
                "gold": sorted(task.gold),
                "prompt": instructions_prompt(info["messages"], bool(schemas)),
                "env_prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                "tools": json.dumps(schemas),
                "env_id": env_id,
                "env_kwargs": json.dumps(kwargs, sort_keys=True),
                "task": json.dumps(task.to_dict(), sort_keys=True),
            })
    finally:
        if own:
            env.close()
    return rows


def source_info(corpus_name: str) -> dict[str, Any]:
    """The bundled manifest's source (repo, commit, licence) of a corpus, or {} for other data."""
    from importlib import resources

    try:
        manifest = json.loads(resources.files("toolgym.data").joinpath("bundled/manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return dict((manifest.get(corpus_name) or {}).get("source") or {})


def dataset_card(env_id: str, kwargs: dict[str, Any], splits: dict[str, int], corpus: Any, kind: str) -> str:
    """README.md of the export: YAML configs for ``datasets``, counts, licence, how tasks were derived."""
    source = source_info(corpus.name)
    licence = source.get("licence", "other")
    yaml_licence = licence.lower() if licence != "other" else "other"
    lines = ["---", f"license: {yaml_licence}", "pretty_name: " + json.dumps(f"toolgym {env_id}"), "configs:",
             f"- config_name: {TASKS_CONFIG}", "  data_files:"]
    for split in splits:
        lines += [f"  - split: {split}", f"    path: tasks/{split}.parquet"]
    lines += [f"- config_name: {CORPUS_CONFIG}", "  data_files:", "  - split: train", f"    path: {CORPUS_FILE}", "---", ""]
    counts = "\n".join(f"| `{s}` | {n} |" for s, n in splits.items())
    where = (f"[{source['repo']}]({source['repo']}) at commit `{source.get('commit', '?')}`, licence {licence}"
             if source else f"the user's own data (`{corpus.name}`); check its licence before publishing")
    lines += [
        f"# toolgym {env_id}",
        "",
        f"Tasks of the toolgym environment `{env_id}` ({kind}) and the tool corpus it searches, written by",
        f"`toolgym export-hf {env_id}`. Environment keywords: `{json.dumps(kwargs, sort_keys=True)}`.",
        "",
        "| split | tasks |", "|---|---|", counts, "",
        f"Corpus: {len(corpus)} tools, {len(corpus.categories)} categories.",
        "",
        "## Source and licence",
        "",
        f"Derived from {where}. The tasks and tools were converted to toolgym's records by its",
        "loader for this benchmark (fields not needed for tool retrieval dropped); the licence of the",
        "source applies to this export.",
        "",
        "## How the tasks were derived",
        "",
        "Each row is the env reset on one task (`options={'task': task_id}`): `env_prompt` is the",
        "env's own opening chat (system prompt with the function schemas and call format, prior",
        "dialogue, request); `prompt` is the same chat without the schema block, for trainers whose",
        "chat template renders `tools` itself (TRL, verifiers); `tools` holds the OpenAI schemas as",
        "JSON; `gold` the gold tool ids (never shown to a policy); `task` the whole toolgym `Task` as",
        "JSON (`toolgym eval retrieval --tasks DIR` reads it back).",
        "",
        "```python",
        "import datasets",
        f'tasks = datasets.load_dataset(DIR, "{TASKS_CONFIG}", split="{next(iter(splits))}")',
        f'corpus = datasets.load_dataset(DIR, "{CORPUS_CONFIG}", split="train")',
        "```",
        "",
    ]
    return "\n".join(lines)


def corpus_rows(corpus: Any) -> list[dict[str, Any]]:
    """One row per tool; ``parameters`` as JSON (their shapes differ from tool to tool)."""
    return [{"id": t.id, "name": t.name, "description": t.description, "category": t.category,
             "parameters": json.dumps(t.parameters, sort_keys=True)} for t in corpus]


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def export_hf(env_id: str, out: str | Path, splits: list[str] | None = None, env_kwargs: dict[str, Any] | None = None,
              max_tasks: int | None = None) -> dict[str, int]:
    """Write the folder of the module docstring; returns the task count per split."""
    check_max_tasks(max_tasks)
    out = Path(out)
    counts: dict[str, int] = {}
    corpus = kind = None
    kwargs_seen: dict[str, Any] = dict(env_kwargs or {})
    for split in splits or [None]:
        env, kwargs = make_env(env_id, split, env_kwargs)
        try:
            rows = task_rows(env_id, split, env_kwargs, max_tasks, env=env)
            corpus = env.unwrapped.corpus
        finally:
            env.close()
        if not rows:
            raise ValueError(f"{env_id} has no tasks in split {split!r}")
        name = split or rows[0]["split"]
        kind = "tool search" if json.loads(rows[0]["tools"]) else "decomposition"
        write_parquet(rows, out / "tasks" / f"{name}.parquet")
        counts[name] = len(rows)
        kwargs_seen = {k: v for k, v in kwargs.items() if k != "split"}
    write_parquet(corpus_rows(corpus), out / CORPUS_FILE)
    (out / "README.md").write_text(dataset_card(env_id, kwargs_seen, counts, corpus, kind), encoding="utf-8")
    return counts


def is_export_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / CORPUS_FILE).exists() and (p / "tasks").is_dir()


# An export folder is read from its own parquet files only, with pyarrow: ``datasets.load_dataset``
# followed the README card's ``data_files``, which can name a URL (an HTTP request, a DNS look-up),
# an absolute path, ``../`` or a glob (``/etc/**``). The card is documentation; it is never read.
MAX_EXPORT_FILE_BYTES = 1 << 30  # one parquet file on disk
MAX_EXPORT_DATA_BYTES = 4 << 30  # its columns uncompressed, from the footer, before any page is read
MAX_EXPORT_ROWS = 4_000_000
MAX_EXPORT_SPLITS = 256
TASK_COLUMN = "task"
CORPUS_COLUMNS = ("id", "name", "description", "category", "parameters")


def _inside(root: Path, rel: str) -> Path:
    """``root/rel``, refused when it (or a symbolic link on the way) leads outside ``root``."""
    from toolgym.data.readers import DatasetFormatError

    path = root / rel
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise DatasetFormatError(f"{path}: leads outside the export folder {root} (to {resolved}); an export folder "
                                 "is read from its own files only")
    return resolved


def _read_parquet(root: Path, rel: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of ``root/rel`` (a regular file inside ``root``), ``columns`` only, size and row
    count checked from the footer before any data page is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from toolgym.data.readers import DatasetFormatError, open_regular

    path = _inside(root, rel)
    where = root / rel
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_EXPORT_FILE_BYTES:
                raise DatasetFormatError(f"{where}: larger than {MAX_EXPORT_FILE_BYTES:,} bytes")
            pf = pq.ParquetFile(f)
            meta = pf.metadata
            if meta.num_rows > MAX_EXPORT_ROWS:
                raise DatasetFormatError(f"{where}: {meta.num_rows:,} rows; at most {MAX_EXPORT_ROWS:,} are read")
            names = pf.schema_arrow.names
            missing = [c for c in columns if c not in names]
            if missing:
                raise DatasetFormatError(f"{where}: no column {', '.join(map(repr, missing))} (columns: "
                                         f"{', '.join(names[:20]) or 'none'}); not a toolgym export-hf file")
            wanted = {names.index(c) for c in columns}
            data = sum(meta.row_group(g).column(c).total_uncompressed_size
                       for g in range(meta.num_row_groups) for c in range(meta.num_columns) if c in wanted)
            if data > MAX_EXPORT_DATA_BYTES:
                raise DatasetFormatError(f"{where}: {data:,} bytes uncompressed; at most {MAX_EXPORT_DATA_BYTES:,}")
            table = pf.read(columns=list(columns))
    except DatasetFormatError:
        raise
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise DatasetFormatError(f"{where}: not a readable parquet file ({' '.join(str(exc).split())[:200]})") from None
    if table.num_rows == 0:
        raise DatasetFormatError(f"{where}: has no rows (an export file holds at least one)")
    return table.to_pylist()


def _cell(where: str, row: dict[str, Any], column: str, *, nullable: bool = False) -> Any:
    from toolgym.data.readers import DatasetFormatError

    value = row[column]
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DatasetFormatError(f"{where}: column {column!r} must be a string{' or null' if nullable else ''}, got {got}")
    return value


def load_export(path: str | Path, split: str | None = None) -> tuple[Any, list[Any]]:
    """``(ToolCorpus, tasks)`` of an :func:`export_hf` folder; ``split`` picks one split.

    Reads ``corpus/tools.parquet`` and ``tasks/<split>.parquet`` of the folder itself (never the
    README card, never a path outside the folder); every cell is checked and an error names the
    file and row (1-based): ``tasks/dev.parquet row 3: column 'task' ...``. Gold ids must be in the
    corpus.
    """
    from toolgym.data.readers import DatasetFormatError, loads_json
    from toolgym.data.records import Task
    from toolgym.retrieval.corpus import Tool, ToolCorpus

    given = Path(path)
    if not is_export_dir(given):
        raise FileNotFoundError(f"{given}: not a toolgym export-hf folder (needs {CORPUS_FILE} and tasks/*.parquet)")
    root = given.resolve()
    tools = []
    for i, row in enumerate(_read_parquet(root, CORPUS_FILE, CORPUS_COLUMNS), 1):
        where = f"{given / CORPUS_FILE} row {i}"
        parameters = _cell(where, row, "parameters", nullable=True)
        params = loads_json(parameters, f"{where} column 'parameters'") if parameters is not None else {}
        try:
            tools.append(Tool(_cell(where, row, "id"), _cell(where, row, "name"),
                              _cell(where, row, "description", nullable=True) or "",
                              _cell(where, row, "category", nullable=True), params))
        except DatasetFormatError:
            raise
        except ValueError as exc:
            raise DatasetFormatError(f"{where}: {exc}") from None
    try:
        corpus = ToolCorpus(tools, name=given.name)
    except ValueError as exc:
        raise DatasetFormatError(f"{given / CORPUS_FILE}: {exc}") from None
    tasks_dir = _inside(root, "tasks")
    available = sorted(p.name[: -len(".parquet")] for p in tasks_dir.iterdir()
                       if p.name.endswith(".parquet") and not p.name.startswith("."))
    if not available:
        raise FileNotFoundError(f"{given}: not a toolgym export-hf folder (no tasks/*.parquet)")
    if len(available) > MAX_EXPORT_SPLITS:
        raise DatasetFormatError(f"{given / 'tasks'}: {len(available)} split files; at most {MAX_EXPORT_SPLITS}")
    if split is not None and split not in available:
        raise ValueError(f"{given}: no split {split!r}; splits here: {available}")
    tasks = []
    for name in [split] if split else available:
        rel = f"tasks/{name}.parquet"
        for i, row in enumerate(_read_parquet(root, rel, [TASK_COLUMN]), 1):
            where = f"{given / rel} row {i}"
            record = loads_json(_cell(where, row, TASK_COLUMN), f"{where} column {TASK_COLUMN!r}")
            if not isinstance(record, dict):
                got = {list: "a list", type(None): "null"}.get(type(record), type(record).__name__)
                raise DatasetFormatError(f"{where}: column {TASK_COLUMN!r} must hold a JSON object (a Task), got {got}")
            try:
                task = Task.from_dict(record)
            except KeyError as exc:
                raise DatasetFormatError(f"{where}: the task has no {exc.args[0]!r} field") from None
            except (TypeError, ValueError) as exc:
                raise DatasetFormatError(f"{where}: {exc}") from None
            missing = sorted(g for g in task.gold if g not in corpus)
            if missing:
                raise DatasetFormatError(f"{where}: gold tool ids not in {CORPUS_FILE}: {missing[:10]}")
            tasks.append(task)
    return corpus, tasks
