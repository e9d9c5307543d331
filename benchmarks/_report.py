"""Shared output for benchmarks: a JSON file and a section of docs/benchmarks.md.

Each benchmark owns one section, delimited by HTML comments, and rewrites only that section,
so several benchmarks can write the same markdown file.
"""
from __future__ import annotations

import hashlib
import json
import platform
import re
import struct
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nWritten by the scripts in `benchmarks/`; every ratio compares two paths measured in the same run.\n"


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def host_info() -> dict[str, object]:
    """Where a number was measured: host, CPU model and the flags that change numerics or speed
    (bf16 / AMX matrix units, AVX-512), thread settings and library versions. A learning run's
    outcome can differ across machines (other kernels, other float rounding): every run file says
    which it came from."""
    import os

    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace")[:200_000].splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine(), platform.processor()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    info: dict[str, object] = {
        "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    try:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
    except ImportError:
        pass
    return info


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    def fmt(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(name: str, payload: dict, title: str, body_markdown: str, script: str | None = None) -> None:
    """Write ``benchmarks/results/<name>.json`` and replace the ``name`` section of the doc.

    ``script`` is the command that wrote it when that is not ``benchmarks/<name>.py`` (e.g.
    ``ladder.py --name ladder_rerank``, or a path from the repository root such as
    ``examples/trl_grpo.py --report``), so the section cites a file that exists.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **payload}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    cite = script if script and "/" in script.split()[0] else f"benchmarks/{script or name + '.py'}"
    section = (
        f"<!-- {name}:start -->\n## {title}\n\n_{payload['machine']}, {payload['date']}_ "
        f"(`{cite}`, raw numbers in `benchmarks/results/{name}.json`)\n\n"
        f"{body_markdown.strip()}\n<!-- {name}:end -->"
    )
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    pattern = re.compile(rf"<!-- {re.escape(name)}:start -->.*?<!-- {re.escape(name)}:end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


def weights_fingerprint(model_dir: str | Path) -> str:
    """sha256 over every tensor of the folder's ``*.safetensors`` (name, dtype, shape, raw bytes,
    sorted by name): the same weights give the same hash whatever the file's metadata or order."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors weights to fingerprint")
    entries = []
    for path in files:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            n = struct.unpack("<Q", raw)[0]
            if n > 100_000_000:  # a header this large is a corrupt or hostile file, not weights
                raise ValueError(f"{path}: safetensors header of {n} bytes")
            header = json.loads(fh.read(n))
        entries += [(name, path, 8 + n, meta) for name, meta in header.items() if name != "__metadata__"]
    digest = hashlib.sha256()
    for name, path, base, meta in sorted(entries, key=lambda e: e[0]):
        start, end = (int(x) for x in meta["data_offsets"])
        digest.update(json.dumps([name, meta["dtype"], list(meta["shape"])]).encode())
        with open(path, "rb") as fh:
            fh.seek(base + start)
            left = end - start
            while left > 0:
                chunk = fh.read(min(left, 1 << 24))
                if not chunk:
                    raise ValueError(f"{path}: tensor {name!r} runs past the end of the file")
                digest.update(chunk)
                left -= len(chunk)
    return "sha256:" + digest.hexdigest()
