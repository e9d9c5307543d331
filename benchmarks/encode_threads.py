"""Query-encoding time vs torch threads and batch size (the knobs ``build_index`` exposes).

Encodes the 700 Seal-Tools dev queries with the packaged MiniLM through ``ToolIndex.embed``
for each (encode_threads, encode_batch_size) setting, best of ``--repeat`` runs, and prints a
markdown table. It measures the machine it runs on: on a shared box the numbers depend on
what else runs, so record the load (``os.getloadavg``) next to them.

Run: ``python benchmarks/encode_threads.py [--threads 1,2] [--batch 8,64] [--repeat 1]``.
"""
from __future__ import annotations

import argparse
import os
import time

from toolgym.data import load_dataset
from toolgym.retrieval import build_index
from toolgym.retrieval.index import available_cpus


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
    print(f"{len(queries)} queries, {available_cpus()} cores, load average {os.getloadavg()}")
    print("| threads | batch | seconds | ms/query |\n|---|---|---|---|")
    for threads in (int(x) for x in args.threads.split(",")):
        for batch in (int(x) for x in args.batch.split(",")):
            index.encode_threads, index.encode_batch_size = threads, batch
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                index.embed(queries)
                best = min(best, time.perf_counter() - t)
            print(f"| {threads} | {batch} | {best:.1f} | {1000 * best / len(queries):.1f} |", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
