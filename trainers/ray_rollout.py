"""Rollouts on Ray actors for ``toolgym train`` (``rollout.backend: ray``, docs/scale.md).

* **Workers** (:class:`RolloutWorker`, one Ray actor each) hold a policy copy and their own envs
  and run :func:`toolgym.agents.rollout.collect_rollouts` on a contiguous chunk of the step's
  episodes: the token ids, loss masks and turn spans are built by the same code as locally.
* **Weights**: after each update :meth:`RayRollout.sync_weights` puts only what changed into
  the object store once (the LoRA adapter when LoRA is on, else the trainable parameters) and
  every worker loads it from there; a version number makes a stale worker fail loudly.
* **Retrieval**: one :class:`RetrievalServer` actor per node builds the env's index once and
  serves every worker's searches; requests that arrive while a batch runs are merged into the
  next ``search_batch`` call (``batches`` / ``requests`` in :meth:`RetrievalServer.stats`).
* **Faults**: a chunk whose worker dies is resubmitted to a live worker (a new one is started
  when none is left); results are kept per chunk index, so nothing is lost or duplicated.
* **Seeds**: chunk ``c`` samples after ``torch.manual_seed(torch.initial_seed() + c)`` of the
  caller, and env ``i`` resets with ``seed + i`` as locally. With one worker the rollouts equal
  the local backend's for the same seeds; with several, greedy rollouts are equal and sampled
  ones are reproducible for the same (seed, num_workers) (each chunk draws its own stream).

* **Network**: a local cluster (:func:`init_ray` with no address) stays on loopback and sends
  nothing off the machine (see :func:`init_ray`).

``ray.init(address="auto")`` (``rollout.address: auto``) joins a running cluster; see docs/scale.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

# Before Ray is imported: Ray reads it when it starts and when its processes start.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
import torch  # noqa: E402

from toolgym.agents.rollout import Rollout, collect_rollouts

if TYPE_CHECKING:
    from toolgym.trainers.config import ModelConfig, RolloutConfig, SamplingConfig

RETRIEVAL_PREFIX = "toolgym-retrieval"
MAX_CHUNK_RETRIES = 3


# -- a local cluster that stays on this machine ---------------------------------------------------
#: Environment of every process of a local cluster. Each line closes one way out, as found by
#: auditing the sockets of a default ``ray.init()`` (tests/test_ray_rollout.py keeps the audit):
LOCAL_RAY_ENV = {
    # no usage report
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray's single-machine mode: the node IP is 127.0.0.1 instead of the address a UDP "connect"
    # to a public DNS server reveals, so every server binds loopback (the name is Ray's)
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # The dashboard's usage module asks the cloud metadata address (169.254.169.254) which cloud
    # it runs on even with usage stats off (Ray 2.60, ``usage_stats_head.run``); HTTP through a
    # closed loopback port fails at once instead. Loopback traffic itself goes direct.
    "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "localhost,127.0.0.1,::1", "NO_PROXY": "localhost,127.0.0.1,::1",
}


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated for the duration (Ray's processes inherit it when they start)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def init_ray(address: str | None = None, **kwargs: Any) -> None:
    """Start (``address`` None or ``"local"``) or join (``"auto"``, ``"ray://..."``, ``host:port``) Ray.

    A local cluster is started with :data:`LOCAL_RAY_ENV`, node IP 127.0.0.1 and no dashboard:
    every Ray server listens on loopback and no process connects to, or looks up, anything off
    the machine. The driver's own environment is restored afterwards; Ray's processes keep it.
    Joining a cluster is the user's explicit choice and only turns usage stats off.
    ``kwargs`` go to ``ray.init`` (``num_cpus``, ``object_store_memory``...).
    """
    if ray.is_initialized():
        return
    if address not in (None, "local"):
        ray.init(address=address, **kwargs)
        return
    from ray._private import ray_constants  # the driver read the mode at import; children read the env

    single, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    try:
        with _environ(LOCAL_RAY_ENV):
            ray.init(address="local", _node_ip_address="127.0.0.1",
                     **{"include_dashboard": False, "log_to_driver": False, **kwargs})
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = single


# -- retrieval ----------------------------------------------------------------------------------
class RetrievalServer:
    """The env's index, built once per node; concurrent ``search_batch`` calls are batched together."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, max_batch: int = 512):
        env = _make_env(env_id, dict(env_kwargs or {}))
        self.index = env.unwrapped.index
        self.max_batch = int(max_batch)
        self._pending: list[tuple[list[str], list[str | None], int, asyncio.Future]] = []
        self._running = False
        self.requests = 0
        self.batches = 0
        self.queries = 0

    async def search_batch(self, queries: Sequence[str], categories: Sequence[str | None] | None, k: int) -> list[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queries = list(queries)
        self._pending.append((queries, list(categories) if categories is not None else [None] * len(queries), int(k), future))
        self.requests += 1
        if not self._running:
            self._running = True
            asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                await asyncio.sleep(0)  # let requests already on their way join this batch
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
                for k in sorted({item[2] for item in batch}):
                    items = [item for item in batch if item[2] == k]
                    qs = [q for item in items for q in item[0]]
                    cs = [c for item in items for c in item[1]]
                    try:
                        # in a thread: new requests keep queueing while this batch runs
                        results = await loop.run_in_executor(None, self.index.search_batch, qs, cs, k)
                    except Exception as exc:  # the callers get the error, the server keeps serving
                        for *_, fut in items:
                            fut.set_exception(exc)
                        continue
                    self.batches += 1
                    self.queries += len(qs)
                    start = 0
                    for q, _, _, fut in items:
                        fut.set_result(results[start:start + len(q)])
                        start += len(q)
        finally:
            self._running = False

    def stats(self) -> dict[str, float]:
        return {"requests": self.requests, "batches": self.batches, "queries": self.queries,
                "mean_batch_requests": self.requests / max(self.batches, 1)}


class RemoteIndex:
    """The env-side index: ``search``/``search_batch`` answered by the node's :class:`RetrievalServer`."""

    def __init__(self, server: Any):
        self.server = server

    def search_batch(self, queries: Sequence[str], categories: Sequence[str | None] | None = None, k: int = 10) -> list[Any]:
        return ray.get(self.server.search_batch.remote(list(queries), list(categories) if categories is not None else None, int(k)))

    def search(self, query: str, category: str | None = None, k: int = 10) -> Any:
        return self.search_batch([query], [category], k)[0]


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    return gymnasium.make(env_id, **env_kwargs)


def retrieval_actor_name(node_id: str, env_id: str) -> str:
    return f"{RETRIEVAL_PREFIX}-{env_id.replace('/', '_')}-{node_id[:16]}"


# -- weights --------------------------------------------------------------------------------------
def weights_payload(model: Any) -> dict[str, Any]:
    """What changes in an update: the LoRA adapter (with its config) or the trainable parameters, on CPU."""
    if hasattr(model, "peft_config"):
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(model)
        return {"kind": "lora", "config": model.peft_config["default"],
                "state": {k: v.detach().to("cpu").clone() for k, v in state.items()}}
    return {"kind": "params", "state": {n: p.detach().to("cpu").clone() for n, p in model.named_parameters() if p.requires_grad}}


def load_weights_payload(model: Any, payload: dict[str, Any]) -> Any:
    """Apply :func:`weights_payload` to a worker's model; returns the (possibly LoRA-wrapped) model."""
    if payload["kind"] == "lora":
        from peft import get_peft_model, set_peft_model_state_dict

        if not hasattr(model, "peft_config"):
            model = get_peft_model(model, payload["config"])
        set_peft_model_state_dict(model, payload["state"])
        return model
    params = dict(model.named_parameters())
    missing = [n for n in payload["state"] if n not in params]
    if missing:
        raise ValueError(f"weights for unknown parameters {missing[:3]}: the worker's model differs from the trainer's")
    with torch.no_grad():
        for name, value in payload["state"].items():
            params[name].copy_(value.to(params[name].device))
    return model


# -- workers --------------------------------------------------------------------------------------
class RolloutWorker:
    """A policy copy and its envs; runs chunks of episodes with :func:`collect_rollouts`."""

    def __init__(self, policy_factory: Callable[[], Any], env_id: str, env_kwargs: dict[str, Any] | None,
                 retrieval: str | None, threads: int = 1):
        torch.set_num_threads(max(1, int(threads)))
        self.policy = policy_factory()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        if retrieval:  # this node's shared index instead of one per worker
            self.env_kwargs["index"] = RemoteIndex(ray.get_actor(retrieval))
        self.envs: list[Any] = []
        self.version = 0

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def attach_retrieval(self, name: str) -> None:
        """Search through the named retrieval server (this node's) from now on."""
        self.env_kwargs["index"] = RemoteIndex(ray.get_actor(name))
        self.envs = []

    def load_weights(self, payload: dict[str, Any], version: int) -> int:
        self.policy.model = load_weights_payload(self.policy.model, payload)
        self.version = int(version)
        return self.version

    def run(self, task_refs: list[Any], seeds: list[int | None], torch_seed: int, version: int,
            kwargs: dict[str, Any]) -> list[Rollout]:
        if version != self.version:
            raise RuntimeError(f"worker holds weights version {self.version}, the step needs {version}")
        while len(self.envs) < len(task_refs):
            self.envs.append(_make_env(self.env_id, self.env_kwargs))
        torch.manual_seed(int(torch_seed))
        return collect_rollouts(self.policy, self.envs[: len(task_refs)], task_refs, seeds, **kwargs)


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, balanced ``[start, end)`` ranges over ``n`` items (no empty range)."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


class RayRollout:
    """Ray rollout backend with the call shape of :func:`toolgym.agents.rollout.rollout_groups`.

    ``policy_factory()`` builds a worker's policy (e.g. ``functools.partial(build_policy, ...)``);
    call :meth:`sync_weights` with the trainer's model before the first step and after each update.
    """

    def __init__(self, policy_factory: Callable[[], Any], env_id: str, env_kwargs: dict[str, Any] | None = None,
                 num_workers: int = 2, *, address: str | None = None, init_kwargs: dict[str, Any] | None = None,
                 worker_cpus: float = 1, worker_gpus: float = 0, threads_per_worker: int = 1,
                 shared_retrieval: bool = True):
        if int(num_workers) < 1:
            raise ValueError(f"rollout.num_workers must be >= 1, got {num_workers}")
        init_ray(address, **(init_kwargs or {}))
        self.policy_factory = policy_factory
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.num_workers = int(num_workers)
        self.worker_options = {"num_cpus": worker_cpus, "num_gpus": worker_gpus}
        self.threads = int(threads_per_worker)
        self.shared_retrieval = bool(shared_retrieval)
        self.servers: dict[str, Any] = {}
        if self.shared_retrieval:
            for node in ray.nodes():
                if node.get("Alive"):
                    self._server_for(node["NodeID"])
        self.version = 0
        self._weights_ref: Any = None
        self.workers: list[Any] = [self._start_worker() for _ in range(self.num_workers)]
        self.retries = 0

    @classmethod
    def from_config(cls, rollout: "RolloutConfig", model: "ModelConfig", sampling: "SamplingConfig", env_id: str,
                    env_kwargs: dict[str, Any]) -> "RayRollout":
        """The backend ``toolgym train`` builds for ``rollout.backend: ray``: every worker builds the
        trainer's policy (``model.init_from`` wins over ``model.name``, as in ``build_policy``) on
        cuda when ``rollout.worker_gpus > 0``, else on cpu."""
        import functools

        device = "cuda" if rollout.worker_gpus > 0 else "cpu"
        return cls(functools.partial(_worker_policy, model, sampling, device), env_id, env_kwargs,
                   rollout.num_workers, address=rollout.address, worker_cpus=rollout.worker_cpus,
                   worker_gpus=rollout.worker_gpus, threads_per_worker=rollout.threads_per_worker)

    def _server_for(self, node_id: str) -> str:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = retrieval_actor_name(node_id, self.env_id)
        if node_id not in self.servers:
            self.servers[node_id] = ray.remote(RetrievalServer).options(
                name=name, get_if_exists=True, num_cpus=0, max_concurrency=1000,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            ).remote(self.env_id, {k: v for k, v in self.env_kwargs.items() if k != "index"})
        return name

    def _start_worker(self) -> Any:
        worker = ray.remote(RolloutWorker).options(**self.worker_options, max_restarts=0).remote(
            self.policy_factory, self.env_id, self.env_kwargs, None, self.threads)
        if self.shared_retrieval:
            # Ray places the worker; it is then pointed at its node's server (started on demand)
            node = ray.get(worker.node_id.remote())
            ray.get(worker.attach_retrieval.remote(self._server_for(node)))
        if self._weights_ref is not None:
            ray.get(worker.load_weights.remote(self._weights_ref, self.version))
        return worker

    def sync_weights(self, model: Any) -> int:
        """Ship the changed weights to every worker through the object store; returns the bytes shipped."""
        payload = weights_payload(model)
        nbytes = sum(v.numel() * v.element_size() for v in payload["state"].values())
        self.version += 1
        self._weights_ref = ray.put(payload)  # one copy per node, read by every worker there
        alive = []
        for worker in self.workers:
            try:
                ray.get(worker.load_weights.remote(self._weights_ref, self.version))
                alive.append(worker)
            except ray.exceptions.RayActorError:
                alive.append(self._start_worker())  # replaced; it loads the new weights on start
        self.workers = alive
        return int(nbytes)

    def collect(self, task_refs: Sequence[Any], seeds: Sequence[int | None], **kwargs: Any) -> list[Rollout]:
        """One episode per ``task_refs[i]`` (env seed ``seeds[i]``), spread over the workers in order."""
        n = len(task_refs)
        if n == 0:
            return []
        base = torch.initial_seed()
        ranges = _chunks(n, len(self.workers))
        results: dict[int, list[Rollout]] = {}
        attempts = {c: 0 for c in range(len(ranges))}
        pending: dict[Any, tuple[int, Any]] = {}

        def submit(c: int, worker: Any) -> None:
            start, end = ranges[c]
            ref = worker.run.remote(list(task_refs[start:end]), list(seeds[start:end]), base + c, self.version, dict(kwargs))
            pending[ref] = (c, worker)

        for c in range(len(ranges)):
            submit(c, self.workers[c % len(self.workers)])
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                c, worker = pending.pop(ref)
                try:
                    results[c] = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                    attempts[c] += 1
                    if attempts[c] > MAX_CHUNK_RETRIES:
                        raise RuntimeError(f"rollout chunk {c} failed on {attempts[c]} workers") from None
                    self.retries += 1
                    if worker in self.workers:
                        self.workers.remove(worker)
                    busy = {w for _, w in pending.values()}
                    idle = [w for w in self.workers if w not in busy]
                    target = idle[0] if idle else (self.workers[0] if self.workers else None)
                    if target is None:
                        target = self._start_worker()
                        self.workers.append(target)
                    submit(c, target)
        while len(self.workers) < self.num_workers:  # replace the dead for the next step
            self.workers.append(self._start_worker())
        return [r for c in range(len(ranges)) for r in results[c]]

    def rollout_groups(self, policy: Any, envs: Sequence[Any], task_refs: Sequence[Any], group_size: int,
                       seed: int = 0, **kwargs: Any) -> list[list[Rollout]]:
        """Same call and result as :func:`~toolgym.agents.rollout.rollout_groups`; ``policy`` and
        ``envs`` are the trainer's and unused here (each worker holds its own)."""
        need = len(task_refs) * group_size
        flat_refs = [ref for ref in task_refs for _ in range(group_size)]
        flat = self.collect(flat_refs, [seed + i for i in range(need)], **kwargs)
        return [flat[i * group_size:(i + 1) * group_size] for i in range(len(task_refs))]

    def retrieval_stats(self) -> dict[str, dict[str, float]]:
        return {node: ray.get(ray.get_actor(retrieval_actor_name(node, self.env_id)).stats.remote()) for node in self.servers}

    def shutdown(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
        for node in list(self.servers):
            try:
                ray.kill(ray.get_actor(retrieval_actor_name(node, self.env_id)))
            except ValueError:
                pass
        self.workers, self.servers = [], {}



def _worker_policy(model: "ModelConfig", sampling: "SamplingConfig", device: str) -> Any:
    """A rollout worker's policy: the trainer's model config, on the worker's device."""
    import dataclasses

    from toolgym.agents.model import build_policy

    return build_policy(dataclasses.replace(model, device=device), sampling)
