"""Attack surface: the network. A local Ray cluster started by toolgym stays on this machine.

A subprocess starts the project's local Ray (:func:`toolgym.trainers.ray_rollout.init_ray`) with
every Python process of the cluster audited (a ``sitecustomize`` on ``PYTHONPATH``: the driver
and every process Ray starts inherit it) for ``connect`` / ``sendto`` / ``bind`` / name look-ups
of any non-loopback address; the C++ servers (GCS, raylet) are checked by their sockets. On a
default ``ray.init()`` the audit sees the cloud metadata address 169.254.169.254 and servers
bound to the external interface.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")

AUDIT = textwrap.dedent('''
    import ipaddress, os, sys
    LOG = os.environ["TOOLGYM_NET_AUDIT"]
    def _loopback(host):
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if host in ("localhost", "", None) or not isinstance(host, str):
            return True
        try:
            return ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return False  # a name to resolve: a DNS query leaves the machine
    def _hook(event, args):
        if event in ("socket.connect", "socket.bind", "socket.sendto"):
            addr = args[-1] if event == "socket.sendto" else args[1]
            host = addr[0] if isinstance(addr, tuple) and addr else None
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
            host = args[0]
        else:
            return
        if not _loopback(host):
            with open(LOG, "a") as f:
                f.write(f"{os.getpid()} {' '.join(sys.argv[:1])} {event} {host!r}\\n")
    sys.addaudithook(_hook)
''')

DRIVER = textwrap.dedent('''
    import json, os, sys
    import psutil
    from toolgym.trainers.ray_rollout import init_ray
    import ray

    init_ray(num_cpus=1, object_store_memory=80 * 1024 * 1024)

    @ray.remote
    def pid():
        return os.getpid()

    @ray.remote
    class Echo:
        def ping(self, x):
            return x

    worker_pid = ray.get(pid.remote())
    assert ray.get(Echo.remote().ping.remote(3)) == 3
    ours = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid(), worker_pid}
    sockets = []
    for c in psutil.net_connections(kind="inet"):
        if c.pid in ours:
            sockets.append({"pid": c.pid, "status": c.status,
                            "laddr": c.laddr.ip if c.laddr else None, "raddr": c.raddr.ip if c.raddr else None})
    print(json.dumps({"node_ip": ray.util.get_node_ip_address(), "sockets": sockets}))
    ray.shutdown()
''')


def _is_loopback(ip: str | None) -> bool:
    import ipaddress

    if not ip:
        return True
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


@pytest.mark.slow
def test_local_ray_sends_nothing_off_the_machine(tmp_path: Path):
    (tmp_path / "sitecustomize.py").write_text(AUDIT)
    log = tmp_path / "audit.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k.lower() not in
           ("http_proxy", "https_proxy", "no_proxy")}
    env.update(PYTHONPATH=str(tmp_path) + os.pathsep + env.get("PYTHONPATH", ""), TOOLGYM_NET_AUDIT=str(log))
    out = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    audited = log.read_text() if log.exists() else ""
    assert audited == "", f"a local Ray process reached off the machine:\n{audited}"
    assert report["node_ip"] == "127.0.0.1"
    assert report["sockets"], "psutil saw none of the cluster's sockets: the check would be vacuous"
    off = [s for s in report["sockets"] if not (_is_loopback(s["laddr"]) and _is_loopback(s["raddr"]))]
    assert off == [], f"sockets bound or connected off loopback: {off}"


def test_init_ray_restores_the_drivers_environment(monkeypatch):
    """The proxy lines that close the metadata probe are for Ray's processes, not the caller's."""
    import ray

    from toolgym.trainers import ray_rollout

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append((dict(os.environ), kw)))
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "example.internal")
    ray_rollout.init_ray(num_cpus=1)
    env, kwargs = calls[0]
    assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env["http_proxy"].startswith("http://127.0.0.1")
    assert kwargs["address"] == "local" and kwargs["_node_ip_address"] == "127.0.0.1"
    assert kwargs["include_dashboard"] is False and kwargs["num_cpus"] == 1
    assert "http_proxy" not in os.environ and os.environ["NO_PROXY"] == "example.internal"
    ray_rollout.init_ray("auto")  # joining a cluster: the user's address, nothing else forced
    assert calls[1][1] == {"address": "auto"}
