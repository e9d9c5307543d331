"""Training examples for the trainable retrieval pieces (MagicSelector §4, §3.3).

Plain data building, no torch: the training loops live in ``toolgym.fitting.*``.

- retriever / reranker: positive (query, tool) pairs, random negatives (Algorithm 1, line 2),
  hard negatives = a teacher's top-scored wrong tools (eq. 22), contrastive triples, point-wise
  examples (eq. 16), list-wise groups (eq. 17-19), batches without duplicate texts;
- preference model: a reference decomposition y* against corruptions of it along the paper's
  quality criteria (merged / dropped intents, duplicated subtasks, unresolved references,
  invented tasks).

A query is always :meth:`Task.context_text` (what ``toolgym eval`` searches with) and a tool
is ``corpus.text(tool)`` (what the index embeds), so training sees what evaluation sees.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from toolgym.data.records import Task
from toolgym.retrieval.corpus import ToolCorpus


def seeded_sample(tasks: Sequence[Task], cap: int | None, seed: int = 0) -> list[Task]:
    """At most ``cap`` tasks: a sample drawn with ``seed``, kept in input order (all of them when
    ``cap`` is ``None``, not positive, or at least their number)."""
    tasks = list(tasks)
    if cap is None or not 0 < cap < len(tasks):
        return tasks
    return [tasks[i] for i in sorted(random.Random(seed).sample(range(len(tasks)), cap))]


def split_tasks(tasks: Sequence[Task], heldout_fraction: float, seed: int = 0) -> tuple[list[Task], list[Task]]:
    """Deterministic (train, held-out) partition: a ``random.Random(seed)`` sample of the ids, sorted.

    Tasks with the same query text (``context_text``) fall on the same side: each such group is
    drawn as one, by its smallest id (a dataset without repeated texts gets exactly the sample of
    its sorted ids), so :func:`check_disjoint` holds by construction. Input order is kept inside
    each part. ``heldout_fraction`` in [0, 1).
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    group_of: dict[str, str] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        group_of.setdefault(t.context_text(), t.id)
    ids = sorted(set(group_of.values()))
    held = set(random.Random(seed).sample(ids, int(round(heldout_fraction * len(ids)))))
    return ([t for t in tasks if group_of[t.context_text()] not in held],
            [t for t in tasks if group_of[t.context_text()] in held])


def check_disjoint(train: Iterable[Task], evaluated: Iterable[Task]) -> None:
    """Raise if a query that is evaluated on is also trained on (by id or by text)."""
    train = list(train)
    ids, texts = {t.id for t in train}, {t.context_text() for t in train}
    leaked = [t.id for t in evaluated if t.id in ids or t.context_text() in texts]
    if leaked:
        raise ValueError(f"{len(leaked)} evaluated tasks are also training tasks (e.g. {leaked[0]!r})")


def positive_pairs(tasks: Sequence[Task], corpus: ToolCorpus) -> list[tuple[Task, str]]:
    """One (task, gold tool id) per gold tool, gold ids in sorted order; unknown ids are an error."""
    out = []
    for task in tasks:
        for tool_id in sorted(task.gold):
            if tool_id not in corpus:
                raise ValueError(f"task {task.id!r}: gold tool {tool_id!r} is not in corpus {corpus.name!r}")
            out.append((task, tool_id))
    return out


def random_negatives(gold: Iterable[str], tool_ids: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """``k`` distinct tool ids drawn uniformly from ``tool_ids`` minus ``gold`` (fewer if the pool is small)."""
    gold = set(gold)
    if len(tool_ids) <= 2 * (k + len(gold)):  # small pool: enumerate (rejection sampling could stall)
        pool = [t for t in dict.fromkeys(tool_ids) if t not in gold]
        return rng.sample(pool, min(k, len(pool)))
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < k:
        t = tool_ids[rng.randrange(len(tool_ids))]
        if t not in gold and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def top_k_hard_negatives(
    candidates: Sequence[str], scores: Sequence[float] | None, gold: Iterable[str], k: int
) -> list[str]:
    """MagicSelector eq. 22: T⁻_hard(q) = Top-k { t ∈ C_q, t ∉ G_q } ranked by the teacher score s_r(q, t).

    ``scores`` None: ``candidates`` are already ranked by the teacher. Ties keep candidate
    order; repeated ids count once.
    """
    if scores is not None and len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} teacher scores for {len(candidates)} candidates")
    order = range(len(candidates)) if scores is None else np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    gold = set(gold)
    out: list[str] = []
    for i in order:
        t = candidates[int(i)]
        if t not in gold and t not in out:
            out.append(t)
            if len(out) == k:
                break
    return out


@dataclass(frozen=True)
class Triple:
    """A contrastive example: the query, one gold tool's text, and negative tool texts."""

    query: str
    positive: str
    negatives: tuple[str, ...]


def contrastive_triples(
    tasks: Sequence[Task],
    corpus: ToolCorpus,
    negatives: Mapping[str, Sequence[str]],
    per_query: int,
) -> list[Triple]:
    """(q, t⁺, t⁻_1..t⁻_m) per gold tool; negatives come from ``negatives[task.id]`` (first ``per_query``).

    Every triple gets the same number of negatives (MultipleNegativesRankingLoss needs equal
    columns): a task with fewer mined negatives than ``per_query`` is skipped.
    """
    out = []
    for task, tool_id in positive_pairs(tasks, corpus):
        negs = list(negatives.get(task.id, ()))[:per_query]
        if len(negs) < per_query:
            continue
        out.append(Triple(task.context_text(), corpus.text(corpus[tool_id]), tuple(corpus.text(corpus[n]) for n in negs)))
    return out


def no_duplicate_batches(
    items: Sequence[object], batch_size: int, keys: Callable[[object], Iterable[str]], rng: random.Random
) -> list[list[int]]:
    """Shuffle ``items`` into batches where no key (e.g. a query text, a tool text) repeats.

    With in-batch negatives a repeated query or tool inside a batch is a false negative (the
    idea of sentence-transformers' ``NoDuplicatesBatchSampler``). Greedy: an item that clashes
    waits for a later batch. Every item lands in exactly one batch.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    pending = list(range(len(items)))
    rng.shuffle(pending)
    batches: list[list[int]] = []
    while pending:
        batch, used, rest = [], set(), []
        for i in pending:
            ks = set(keys(items[i]))
            if len(batch) < batch_size and not (ks & used):
                batch.append(i)
                used |= ks
            else:
                rest.append(i)
        batches.append(batch)
        pending = rest
    return batches


def pointwise_examples(
    tasks: Sequence[Task], corpus: ToolCorpus, negatives: Mapping[str, Sequence[str]]
) -> list[tuple[str, str, float]]:
    """(query, tool text, label) for eq. 16: label 1 for each gold tool, 0 for each listed negative."""
    out = []
    for task in tasks:
        q = task.context_text()
        out += [(q, corpus.text(corpus[t]), 1.0) for t in sorted(task.gold)]
        out += [(q, corpus.text(corpus[t]), 0.0) for t in negatives.get(task.id, ()) if t not in task.gold]
    return out


def listwise_groups(
    tasks: Sequence[Task],
    corpus: ToolCorpus,
    candidates: Mapping[str, Sequence[str]],
    size: int,
    rng: random.Random,
) -> list[tuple[str, list[str], list[float]]]:
    """(query, tool texts, binary labels) lists for eq. 17-19.

    Each list holds every gold tool and the first ``size - |G|`` non-gold ``candidates`` (in
    their order), then is shuffled so a position never gives the label away. A task with no
    non-gold candidate is skipped (a list of positives only has nothing to order).
    """
    out = []
    for task in tasks:
        gold = sorted(task.gold)
        negs = [t for t in dict.fromkeys(candidates.get(task.id, ())) if t not in task.gold][: max(size - len(gold), 0)]
        if not negs:
            continue
        ids = gold + negs
        rng.shuffle(ids)
        out.append((task.context_text(), [corpus.text(corpus[t]) for t in ids], [float(t in task.gold) for t in ids]))
    return out


# ---------------------------------------------------------------------------------------
# Preference pairs: a reference decomposition against its corruptions
# ---------------------------------------------------------------------------------------
CORRUPTIONS = ("merged_intents", "dropped_intent", "duplicated_subtask", "unresolved_reference", "invented_task")
MAX_SUBTASK_CHARS = 2_000  # longer subtasks are cut before any regex runs (bounded work per text)
_WORD = re.compile(r"\S+")
_NAME_RUN = re.compile(r"(?:(?<=\s)|^)(?:[A-Z0-9][\w'\-.:]*)(?:\s+[A-Z0-9][\w'\-.:]*)*")


def _cut(text: str) -> str:
    return text[:MAX_SUBTASK_CHARS].strip()


def _unresolve(subtask: str, rng: random.Random) -> str | None:
    """Replace the named things in a subtask (capitalised / numeric runs after the first word)
    by a pronoun, or, with none, everything after the verb by "it": the subtask now points back
    into the dialogue instead of naming what it is about."""
    words = _WORD.findall(subtask)
    if len(words) < 2:
        return None
    head, tail = words[0], " ".join(words[1:])
    replaced = _NAME_RUN.sub(lambda m: rng.choice(("it", "that", "there")), tail)
    if replaced != tail:
        return f"{head} {replaced}"
    return f"{head} it"


def corrupt_decomposition(
    subtasks: Sequence[str], kind: str, rng: random.Random, foreign: Sequence[str] = ()
) -> list[str] | None:
    """A worse version of the reference ``subtasks`` along one quality criterion, or None if ``kind``
    cannot apply (e.g. merging needs two subtasks).

    - ``merged_intents``: two adjacent subtasks joined by "and" (one subtask, two intents);
    - ``dropped_intent``: one subtask removed (needs two);
    - ``duplicated_subtask``: one subtask repeated right after itself;
    - ``unresolved_reference``: a subtask's named things replaced by it / that / there;
    - ``invented_task``: a subtask of ``foreign`` (another task) inserted at a random place.
    """
    ys = [_cut(s) for s in subtasks if s and s.strip()]
    if not ys:
        return None
    if kind == "merged_intents":
        if len(ys) < 2:
            return None
        i = rng.randrange(len(ys) - 1)
        second = ys[i + 1]
        merged = ys[i].rstrip(" .") + " and " + second[:1].lower() + second[1:]
        return ys[:i] + [merged] + ys[i + 2 :]
    if kind == "dropped_intent":
        if len(ys) < 2:
            return None
        i = rng.randrange(len(ys))
        return ys[:i] + ys[i + 1 :]
    if kind == "duplicated_subtask":
        i = rng.randrange(len(ys))
        return ys[: i + 1] + [ys[i]] + ys[i + 1 :]
    if kind == "unresolved_reference":
        order = list(range(len(ys)))
        rng.shuffle(order)
        for i in order:
            new = _unresolve(ys[i], rng)
            if new is not None and new != ys[i]:
                return ys[:i] + [new] + ys[i + 1 :]
        return None
    if kind == "invented_task":
        pool = [_cut(s) for s in foreign if s and s.strip() and _cut(s) not in ys]
        if not pool:
            return None
        i = rng.randrange(len(ys) + 1)
        return ys[:i] + [rng.choice(pool)] + ys[i:]
    raise ValueError(f"unknown corruption {kind!r}; choose one of {CORRUPTIONS}")


@dataclass(frozen=True)
class PreferencePair:
    """The reference decomposition (preferred) and one corruption of it (rejected)."""

    task: Task
    chosen: tuple[str, ...]
    rejected: tuple[str, ...]
    kind: str


def preference_pairs(
    tasks: Sequence[Task], rng: random.Random, kinds: Sequence[str] = CORRUPTIONS, per_task: int | None = None
) -> list[PreferencePair]:
    """Pairs (y*, corruption) for every task with reference subtasks and every applicable kind.

    ``per_task``: keep at most this many kinds per task (a random subset). The invented task
    comes from another task's reference (never the same task's).
    """
    with_ref = [t for t in tasks if t.subtasks and any(s.strip() for s in t.subtasks)]
    unknown = [k for k in kinds if k not in CORRUPTIONS]
    if unknown:
        raise ValueError(f"unknown corruption {unknown[0]!r}; choose from {CORRUPTIONS}")
    out = []
    for n, task in enumerate(with_ref):
        chosen = tuple(_cut(s) for s in task.subtasks if s.strip())
        task_kinds = list(kinds)
        if per_task is not None and per_task < len(task_kinds):
            task_kinds = rng.sample(task_kinds, per_task)
        for kind in task_kinds:
            foreign: Sequence[str] = ()
            if kind == "invented_task" and len(with_ref) > 1:
                other = with_ref[(n + 1 + rng.randrange(len(with_ref) - 1)) % len(with_ref)]
                foreign = other.subtasks or ()
            bad = corrupt_decomposition(chosen, kind, rng, foreign)
            if bad is not None and tuple(bad) != chosen:
                out.append(PreferencePair(task, chosen, tuple(bad), kind))
    return out
