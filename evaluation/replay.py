"""``toolgym replay``: re-score saved rollouts under several reward schemes, without re-rolling.

    toolgym replay ROLLOUTS.jsonl --scheme toolsearcher --scheme grpo_f1 [--out DIR]
    toolgym replay DECOMP.jsonl --scheme magicselector --dataset seal_tools   # schemes that retrieve

``--scheme`` takes a registered scheme or module name or a YAML reward config (``reward:`` or top
level: ``{modules: ...}`` or ``{name, options}``; the shapes ``toolgym train`` takes, built by
:func:`toolgym.rewards.build_reward`). Writes ``replay.json``, ``replay.md`` and ``replay.png`` under
``--out``: per-component means per scheme (a ``zero_var`` mean is the share of zero-variance
groups), and for every pair of schemes the per-turn advantage sign agreement and Spearman rank
correlation over the (rollout, turn) cells both scored.

A rollouts file is input from anywhere, and its gold decides every reward. With ``--dataset``
each group is checked before scoring (:func:`verify_groups`): its task id must name a task of
the dataset, its gold must be that task's gold, every trajectory must belong to it and every
search result must be a tool of the corpus; a group that fails is refused, and scored groups use
the dataset's own task. ``--corpus`` checks the results only. Refused and skipped groups are
said on stdout; without ``--dataset`` the output says that the file's own gold is trusted.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.data.records import Task, Trajectory, read_rollouts
from toolgym.rewards import GroupCredit, aggregate_components, build_reward, runtime_needs


@dataclass
class SchemeScores:
    """One scheme's credit on every group it could score (skipped groups keep their reason)."""

    name: str
    credits: dict[int, GroupCredit] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)


def load_reference(dataset: str | None, corpus_path: str | None) -> tuple[Any, Any]:
    """(the dataset or None, the tool corpus or None) that ``--dataset`` / ``--corpus`` name
    (``--corpus`` is the corpus when both are given)."""
    loaded = corpus = None
    if dataset is not None:
        from toolgym.data.loaders import load_dataset

        loaded = load_dataset(dataset)
        corpus = loaded.corpus
    if corpus_path is not None:
        from toolgym.data import load_corpus

        corpus = load_corpus(corpus_path)
    return loaded, corpus


def make_index(dataset: str | None, corpus_path: str | None, method: str, corpus: Any = None) -> Any:
    """The :class:`~toolgym.retrieval.index.ToolIndex` over a dataset's (or a JSONL file's, or
    ``corpus``) tools that schemes which retrieve search, or None if none is given."""
    if corpus is None:
        if dataset is None and corpus_path is None:
            return None
        corpus = load_reference(dataset, corpus_path)[1]
    from toolgym.retrieval.index import build_index

    return build_index(corpus, method)


def load_reward_config(path: Path) -> Any:
    """A YAML reward config (``reward:`` or top level), read with the size / alias / nesting caps of
    every toolgym config (:func:`~toolgym.data.readers.read_yaml_mapping`); its shape is checked by
    :func:`~toolgym.rewards.build_reward`. Bad YAML is one clear ``ValueError`` line."""
    from omegaconf import OmegaConf

    from toolgym.data.readers import read_yaml_mapping

    node = read_yaml_mapping(path)
    try:
        plain = OmegaConf.to_container(node, resolve=True)
    except Exception as exc:  # omegaconf's interpolation errors: say where, not a traceback
        first = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: not a valid YAML reward config ({type(exc).__name__}: {first})") from None
    plain = plain.get("reward", plain)
    if not isinstance(plain, dict):
        raise ValueError(f"{path}: a reward config must be a mapping ('reward: {{modules: [...]}}'), got {type(plain).__name__}")
    return plain


def build_scheme(spec: str, index: Any = None) -> tuple[str, Any]:
    """(label, reward) for a scheme (or module) name or a YAML config path; ``index`` is what
    modules that retrieve search."""
    if spec.endswith((".yaml", ".yml")):
        path = Path(spec)
        label, config = path.stem, load_reward_config(path)
    else:
        label, config = spec, spec
    try:
        if "retrieve" in runtime_needs(config) and index is None:
            raise ValueError("it retrieves tools: give --dataset NAME or --corpus PATH")
        return label, build_reward(config, index=index)
    except (KeyError, ValueError) as exc:  # one line naming the --scheme it came from (KeyError without quotes)
        raise ValueError(f"--scheme {spec}: {exc.args[0] if exc.args else exc}") from None


def _group_problem(task: Task, trajs: list[Trajectory], dataset: Any, corpus: Any) -> tuple[Task, str | None]:
    """(the task to score with, why the group is refused or None)."""
    from toolgym.envs.actions import clip

    if dataset is not None:
        try:
            known = dataset.task(task.id)
        except KeyError:
            return task, f"task id {clip(task.id)!r} is not a task of dataset {dataset.name!r}"
        if known.gold != task.gold:
            return task, (f"task {clip(task.id)!r}: the file's gold {sorted(task.gold)[:5]} is not dataset "
                          f"{dataset.name!r}'s {sorted(known.gold)[:5]}")
        task = known
    foreign = sorted({t.task_id for t in trajs} - {task.id, task.source_id or task.id})
    if dataset is not None and foreign:
        return task, f"task {clip(task.id)!r}: trajectories of another task ({clip(foreign[0])!r})"
    if corpus is not None:
        unknown = sorted({r for t in trajs for e in t.events for r in e.results if r not in corpus})
        if unknown:
            return task, (f"task {clip(task.id)!r}: {len(unknown)} search result id(s) not in corpus "
                          f"{corpus.name!r} (e.g. {clip(unknown[0])!r})")
    return task, None


def verify_groups(groups: list[tuple[Task, list[Trajectory]]], dataset: Any = None,
                  corpus: Any = None) -> tuple[list[tuple[Task, list[Trajectory]]], dict[int, str]]:
    """The groups to score and the refused ones (index -> reason), checked against ``dataset``
    (task ids, gold, trajectories' task ids; scored with the dataset's task) and ``corpus``
    (every search result id must exist). Neither given: every group, unchecked."""
    kept: list[tuple[Task, list[Trajectory]]] = []
    refused: dict[int, str] = {}
    for gi, (task, trajs) in enumerate(groups):
        task, problem = _group_problem(task, trajs, dataset, corpus)
        if problem is None:
            kept.append((task, trajs))
        else:
            refused[gi] = problem
    return kept, refused


def score_all(name: str, reward: Any, groups: list[tuple[Task, list[Trajectory]]]) -> SchemeScores:
    out = SchemeScores(name)
    try:
        from tqdm import tqdm

        it = tqdm(list(enumerate(groups)), desc=f"replay {name}", leave=False, disable=len(groups) < 200)
    except ImportError:  # pragma: no cover
        it = enumerate(groups)
    for gi, (task, trajs) in it:
        try:
            out.credits[gi] = reward.score_group(trajs, task)
        except ValueError as exc:  # e.g. no reference decomposition for R_pref: skip, say why
            out.skipped[gi] = str(exc)
    return out


def turn_matrix(credit: GroupCredit, trajs: list[Trajectory]) -> list[np.ndarray]:
    """Per rollout the advantage of each of its ``num_turns`` turns (:meth:`GroupCredit.rollout_turn_advantages`)."""
    return [credit.rollout_turn_advantages(i, max(t.num_turns, 0)) for i, t in enumerate(trajs)]


def paired_cells(a: SchemeScores, b: SchemeScores, groups: list[tuple[Task, list[Trajectory]]]) -> tuple[np.ndarray, np.ndarray]:
    """The per-turn advantages of two schemes over every (rollout, turn) cell both scored, flattened."""
    xa: list[np.ndarray] = []
    xb: list[np.ndarray] = []
    for gi in sorted(a.credits.keys() & b.credits.keys()):
        trajs = groups[gi][1]
        xa += turn_matrix(a.credits[gi], trajs)
        xb += turn_matrix(b.credits[gi], trajs)
    flat = lambda cells: np.concatenate(cells) if cells else np.zeros(0)  # noqa: E731
    return flat(xa), flat(xb)


def compare(a: SchemeScores, b: SchemeScores, groups: list[tuple[Task, list[Trajectory]]]) -> dict[str, Any]:
    """Sign agreement and Spearman ρ of per-turn advantages over the cells both schemes scored."""
    from scipy.stats import spearmanr

    x, y = paired_cells(a, b, groups)
    result: dict[str, Any] = {"schemes": [a.name, b.name], "cells": int(x.size)}
    if x.size == 0:
        return {**result, "sign_agreement": None, "sign_agreement_nonzero": None, "spearman": None}
    sa, sb = np.sign(x), np.sign(y)
    either = (sa != 0) | (sb != 0)
    rho = float(spearmanr(x, y).statistic) if x.size > 1 and np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan
    return {
        **result,
        "sign_agreement": float(np.mean(sa == sb)),
        "sign_agreement_nonzero": float(np.mean(sa[either] == sb[either])) if either.any() else None,
        "spearman": None if math.isnan(rho) else rho,
    }


def summarise(scores: SchemeScores, groups: list[tuple[Task, list[Trajectory]]]) -> dict[str, Any]:
    credits = list(scores.credits.values())
    rewards = np.concatenate([c.rewards for c in credits]) if credits else np.zeros(0)
    cells = [a for gi, c in scores.credits.items() for a in turn_matrix(c, groups[gi][1])]
    flat = np.concatenate(cells) if cells else np.zeros(0)
    components = aggregate_components(credits)
    return {
        "groups_scored": len(credits),
        "groups_skipped": len(scores.skipped),
        "skip_reasons": sorted(set(scores.skipped.values()))[:5],
        "reward_mean": float(rewards.mean()) if rewards.size else None,
        "turn_credit_nonzero_share": float(np.mean(flat != 0)) if flat.size else None,
        "zero_variance_share": {k[: -len("/zero_var")]: v for k, v in components.items() if k.endswith("/zero_var")},
        "components": components,
    }


def markdown_report(path: str, report: dict[str, Any]) -> str:
    lines = [f"# Replay of `{path}`", "", f"{report['groups']} groups, {report['rollouts']} rollouts.", ""]
    if report.get("gold_trusted"):
        lines += ["The file's own task ids and gold were trusted (no `--dataset`).", ""]
    elif report.get("checked_against"):
        lines += [f"Checked against {report['checked_against']}: {len(report['groups_refused'])} of "
                  f"{report['groups_in_file']} groups refused.", ""]
        lines += [f"- group {n}: {reason}" for n, reason in report["groups_refused"].items()] + [""]
    for name, s in report["schemes"].items():
        lines += [f"## {name}", "", f"scored {s['groups_scored']} groups, skipped {s['groups_skipped']}"
                  + (f" ({'; '.join(s['skip_reasons'])})" if s["skip_reasons"] else ""), "",
                  "| component | mean over groups |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in s["components"].items()]
        lines.append("")
    if report["comparisons"]:
        lines += ["## Per-turn advantages, scheme against scheme", "",
                  "| schemes | cells | sign agreement | sign agreement (either non-zero) | Spearman ρ |", "|---|---|---|---|---|"]
        for c in report["comparisons"]:
            fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
            lines.append(f"| {' vs '.join(c['schemes'])} | {c['cells']} | {fmt(c['sign_agreement'])} | "
                         f"{fmt(c['sign_agreement_nonzero'])} | {fmt(c['spearman'])} |")
    return "\n".join(lines) + "\n"


def plot_report(out: Path, report: dict[str, Any], scored: list[SchemeScores], groups: list) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    labels = sorted({k for s in report["schemes"].values() for k in s["zero_variance_share"]})
    width = 0.8 / max(len(report["schemes"]), 1)
    for j, (name, s) in enumerate(report["schemes"].items()):
        ax.bar(np.arange(len(labels)) + j * width, [s["zero_variance_share"].get(k, np.nan) for k in labels], width, label=name)
    ax.set_xticks(np.arange(len(labels)) + width * (len(report["schemes"]) - 1) / 2)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("share of zero-variance groups")
    ax.legend(fontsize=8)
    ax = axes[1]
    if len(scored) >= 2:
        a, b = scored[0], scored[1]
        xs, ys = paired_cells(a, b, groups)
        ax.scatter(xs, ys, s=8, alpha=0.5)
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlabel(f"{a.name} per-turn advantage")
        ax.set_ylabel(f"{b.name} per-turn advantage")
        ax.set_title("per-turn credit, first two schemes")
    else:
        ax.axis("off")
    fig.tight_layout()
    path = out / "replay.png"
    from toolgym.data.atomic import atomic_open

    try:
        with atomic_open(path, "wb") as f:
            fig.savefig(f, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def print_checks(report: dict[str, Any]) -> None:
    """What was checked and what was refused or skipped, on stdout (not only in the report files)."""
    if report["gold_trusted"]:
        print("note: no --dataset given: the file's own task ids and gold are trusted, unchecked"
              + (f"; results checked against {report['checked_against']}" if report["checked_against"] else "")
              + " (give --dataset NAME to check them)")
    else:
        print(f"checked {report['groups_in_file']} groups against {report['checked_against']}: "
              f"{report['groups']} kept, {len(report['groups_refused'])} refused")
    for number, reason in list(report["groups_refused"].items())[:10]:
        print(f"refused group {number}: {reason}")
    if len(report["groups_refused"]) > 10:
        print(f"... and {len(report['groups_refused']) - 10} more refused groups (replay.json lists them all)")
    for name, s in report["schemes"].items():
        if s["groups_skipped"]:
            print(f"{name}: skipped {s['groups_skipped']} of {s['groups_scored'] + s['groups_skipped']} groups "
                  f"({'; '.join(s['skip_reasons'])})")


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="toolgym replay")
    names = list(report["schemes"])
    table.add_column("component")
    for n in names:
        table.add_column(n, justify="right")
    keys = sorted({k for s in report["schemes"].values() for k in s["components"]})
    for k in keys:
        table.add_row(k, *[(f"{report['schemes'][n]['components'][k]:.4g}" if k in report["schemes"][n]["components"] else "")
                           for n in names])
    console = Console()
    console.print(table)
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    for c in report["comparisons"]:
        console.print(f"{' vs '.join(c['schemes'])}: per-turn sign agreement {fmt(c['sign_agreement'])}, "
                      f"Spearman ρ {fmt(c['spearman'])} over {c['cells']} (rollout, turn) cells")


def replay(path: str, schemes: list[str], out: str | Path, index: Any = None,
           dataset: Any = None, corpus: Any = None) -> dict[str, Any]:
    """Score ``path`` under ``schemes``; write the report files under ``out``; return the report.

    ``index``: the tool index that schemes which retrieve search (:func:`make_index`).

    ``dataset`` / ``corpus``: check the groups first (:func:`verify_groups`); refused groups are
    not scored, and when every group is refused it is an error."""
    groups = read_rollouts(path)
    if not groups:
        raise ValueError(f"{path} holds no rollout groups")
    total = len(groups)
    groups, refused = verify_groups(groups, dataset, corpus)
    if not groups:
        against = f"dataset {dataset.name!r}" if dataset is not None else f"corpus {corpus.name!r}"
        raise ValueError(f"{path}: all {total} groups refused against {against} (group 1: {next(iter(refused.values()))})")
    built = [build_scheme(s, index) for s in schemes]
    labels = [label for label, _ in built]
    if len(set(labels)) != len(labels):
        raise ValueError(f"the same scheme is named twice: {labels}")
    scored = [score_all(label, reward, groups) for label, reward in built]
    report = {
        "rollouts_file": str(path),
        "checked_against": (f"dataset {dataset.name}" if dataset is not None
                            else f"corpus {corpus.name} (results only)" if corpus is not None else None),
        "gold_trusted": dataset is None,
        "groups_in_file": total,
        "groups_refused": {str(gi + 1): reason for gi, reason in refused.items()},
        "groups": len(groups),
        "rollouts": sum(len(t) for _, t in groups),
        "schemes": {s.name: summarise(s, groups) for s in scored},
        "comparisons": [compare(a, b, groups) for a, b in combinations(scored, 2)],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from toolgym.data.atomic import write_text_atomic

    write_text_atomic(out / "replay.json", json.dumps(report, indent=2) + "\n")  # old or new, never half
    write_text_atomic(out / "replay.md", markdown_report(str(path), report))
    report["png"] = str(plot_report(out, report, scored, groups))
    return report
