"""Training and scoring time of the ``toolgym fit-*`` models in float32 and under bf16 autocast.

The fit commands train MiniLM (the bi-encoder of ``fit-retriever``, the cross-encoder of
``fit-reranker``) for a wall-clock budget, so a faster step is more steps, and the reranker's
held-out scoring between stages is cross-encoder passes. ``precision: auto`` runs the forward
passes under ``torch.autocast(bfloat16)`` where the CPU multiplies bf16 matrices natively
(AMX-BF16 / AVX512-BF16); weights, gradients and the optimiser state stay float32. This measures
what that buys on the machine it runs on, with real Seal-Tools text, in one run:

* a cross-encoder training step (``BinaryCrossEntropyLoss``, 32 (query, tool) pairs, 128 tokens),
* a bi-encoder training step (``MultipleNegativesRankingLoss``, 32 (query, gold, negative) triples),
* cross-encoder scoring (``CrossEncoderReranker.score_pairs`` of 640 pairs: 32 queries x top 20),

each timed as the median of ``--steps`` after two warm-up steps, float32 and bf16 interleaved
(the same batches, the same starting weights), and the loss of the first step both ways (the two
must agree to bf16 rounding). Writes ``benchmarks/results/fit_precision.json`` and a section of
docs/benchmarks.md.

Run: ``python -m benchmarks.fit_precision [--steps 6]``.
"""
from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import time

import torch

from toolgym.agents.decoding import cpu_has_bf16_matmul
from toolgym.data import load_dataset
from toolgym.fitting.common import mixed_precision
from toolgym.fitting.reranker import load_reranker
from toolgym.retrieval import build_index
from toolgym.retrieval.models import resolve_embedding_model

from benchmarks._report import markdown_table, write_report  # noqa: E402


def _median_seconds(fn, steps: int) -> float:
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.util import batch_to_device

    seal = load_dataset("seal_tools")
    rng = random.Random(0)
    tasks = rng.sample(list(seal.tasks), 32)
    texts = {tool.id: seal.corpus.text(tool) for tool in seal.corpus}
    ids = list(texts)
    index = build_index(seal.corpus, "bm25")
    pools = index.search_batch([t.query for t in tasks], k=20)
    pairs = [(t.query, texts[i]) for t, r in zip(tasks, pools) for i in r.ids]
    point_batch = [[q for q, _ in pairs[:32]], [d for _, d in pairs[:32]]], torch.tensor([1.0, 0.0] * 16)
    triples = [[t.query for t in tasks], [texts[min(t.gold)] for t in tasks], [texts[rng.choice(ids)] for _ in tasks]]

    rows, first_losses = [], {}
    base_ce = load_reranker("minilm", 128)
    base_bi = SentenceTransformer(resolve_embedding_model(None), device="cpu", local_files_only=True)
    for precision in ("float32", "bfloat16"):
        ce = copy.deepcopy(base_ce)
        ce_loss = BinaryCrossEntropyLoss(ce.model)
        ce_opt = torch.optim.AdamW(ce.model.parameters(), lr=2e-5)
        bi = copy.deepcopy(base_bi)
        bi_loss = MultipleNegativesRankingLoss(bi, scale=20.0)
        bi_opt = torch.optim.AdamW(bi.parameters(), lr=2e-5)

        def ce_step() -> float:
            ce.model.train()
            with mixed_precision(precision):
                loss = ce_loss(*point_batch)
            loss.backward()
            ce_opt.step()
            ce_opt.zero_grad()
            return float(loss.item())

        def bi_step() -> float:
            bi.train()
            features = [batch_to_device(bi.preprocess(c), bi.device) for c in triples]
            with mixed_precision(precision):
                loss = bi_loss(features, None)
            loss.backward()
            bi_opt.step()
            bi_opt.zero_grad()
            return float(loss.item())

        def score() -> None:
            ce.model.eval()
            with mixed_precision(precision):
                ce.score_pairs(pairs)

        first_losses[precision] = {"cross_encoder": ce_step(), "bi_encoder": bi_step()}
        ce_step(), bi_step(), score()  # warm-up
        rows.append({"precision": precision,
                     "cross_encoder_step_s": _median_seconds(ce_step, args.steps),
                     "bi_encoder_step_s": _median_seconds(bi_step, args.steps),
                     "score_640_pairs_s": _median_seconds(score, max(args.steps // 2, 1))})
        print(rows[-1], flush=True)
    f32, bf16 = rows
    speedup = {k: f32[k] / bf16[k] for k in f32 if k.endswith("_s")}
    load = os.getloadavg()
    body = (f"MiniLM from the packaged all-MiniLM-L6-v2, Seal-Tools text, {torch.get_num_threads()} torch threads, "
            f"CPU bf16 matrix units: {'yes' if cpu_has_bf16_matmul() else 'no'}; median of {args.steps} steps after "
            f"two warm-up steps; load average {load[0]:.1f} at the end. First-step loss float32 / bf16: "
            f"cross-encoder {first_losses['float32']['cross_encoder']:.4f} / {first_losses['bfloat16']['cross_encoder']:.4f}, "
            f"bi-encoder {first_losses['float32']['bi_encoder']:.4f} / {first_losses['bfloat16']['bi_encoder']:.4f}.\n\n"
            + markdown_table(["precision", "cross-encoder step (32 pairs) s", "bi-encoder step (32 triples) s", "score 640 pairs s"],
                             [[r["precision"], r["cross_encoder_step_s"], r["bi_encoder_step_s"], r["score_640_pairs_s"]] for r in rows]
                             + [["float32 / bf16", speedup["cross_encoder_step_s"], speedup["bi_encoder_step_s"],
                                 speedup["score_640_pairs_s"]]]))
    write_report("fit_precision", {"rows": rows, "speedup": speedup, "first_step_loss": first_losses,
                                   "bf16_matmul": cpu_has_bf16_matmul(), "threads": torch.get_num_threads(),
                                   "load_average": load}, "fit-*: float32 against bf16 autocast", body)
    print(body)


if __name__ == "__main__":
    main()
