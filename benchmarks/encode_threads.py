"""Query-encoding time vs torch threads and batch size (the knobs ``build_index`` exposes).

Encodes the 700 Seal-Tools dev queries with the packaged MiniLM through ``ToolIndex.embed``
for each (encode_threads, encode_batch_size) setting, best of ``--repeat`` runs, and prints a
markdown table. It measures the machine it runs on: on a shared box the numbers depend on
what else runs, so record the load (``os.getloadavg``) next to them.

Writes ``benchmarks/results/encode_threads.json`` (every setting's seconds and the load average
before and after) and a docs/benchmarks.md section.

Run: ``python -m benchmarks.encode_threads [--threads 1,2] [--batch 8,64] [--repeat 1]``.
"""
from __future__ import annotations

import argparse
import os
import time

from toolgym.data import load_dataset
from toolgym.retrieval import build_index
from toolgym.retrieval.index import available_cpus

from benchmarks._report import markdown_table, write_report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batch", default="8,64")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--limit", type=int, default=700)
    args = parser.parse_args()
    seal = load_dataset("seal_tools")
    queries = [t.query for t in seal.tasks][: args.limit]
    index = build_index(seal.corpus, "bm25")
    index.embed(queries[:8])  # load the encoder outside the timings
    load_before = os.getloadavg()
    print(f"{len(queries)} queries, {available_cpus()} cores, load average {load_before}")
    rows = []
    for threads in (int(x) for x in args.threads.split(",")):
        for batch in (int(x) for x in args.batch.split(",")):
            index.encode_threads, index.encode_batch_size = threads, batch
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                index.embed(queries)
                best = min(best, time.perf_counter() - t)
            rows.append({"threads": threads, "batch": batch, "seconds": best, "ms_per_query": 1000 * best / len(queries)})
            print(rows[-1], flush=True)
    load_after = os.getloadavg()
    body = (f"{len(queries)} Seal-Tools dev queries through `ToolIndex.embed` (packaged MiniLM, loaded beforehand, "
            f"best of {args.repeat}), {available_cpus()} usable cores; 1/5/15-minute load average "
            f"{'/'.join(f'{x:.1f}' for x in load_before)} before, {'/'.join(f'{x:.1f}' for x in load_after)} after.\n\n"
            + markdown_table(["torch threads", "batch", "seconds", "ms/query"],
                             [[r["threads"], r["batch"], f"{r['seconds']:.1f}", f"{r['ms_per_query']:.1f}"] for r in rows]))
    write_report("encode_threads", {"queries": len(queries), "cores": available_cpus(), "load_before": load_before,
                                    "load_after": load_after, "rows": rows}, "Query encoding: torch threads and batch size", body)
    print(body)


if __name__ == "__main__":
    main()
