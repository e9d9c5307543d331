"""Does one bi-encoder trained on every training split hold on a corpus it never saw? Leave-one-out.

Runs ``toolgym fit-retriever`` on ``configs/fit_retriever_mixture.yaml`` (or ``--config``):
``all`` trains on every source; ``minus_<name>`` on every source but ``name``, which it then meets
zero-shot. Every trained model, and the reference rows (BM25 and the packaged MiniLM, untrained),
is evaluated on every source's held-out part with the dense and the hybrid index: C@10 and N@5
per query. Each finished run writes ``benchmarks/results/retriever_mixture/<run>.json`` (its
settings, the model's weight hash and per-query rows per source) and, with ``--commit``, commits
it at once, so a benchmark that takes hours loses nothing to an interruption: a run whose file is
there (same settings) is not trained again. ``--report`` rebuilds the matrix (rows: trained on;
columns: evaluated on) in docs/benchmarks.md from those files alone. Not run in CI.

Each file records, per source, the BM25 weight its hybrid index used and why
(``hybrid_weights``: the weight tuned for the encoder on a library it trained on, its zero-shot
weight on the left-out one). ``--reevaluate`` brings finished runs up to the current rule without
training: a model folder saved before ``fit-retriever`` recorded its training libraries or a weight
per library, or with another zero-shot weight than its config now gives, is re-tuned (deterministic: the same set-aside
queries give the same weight, checked) so that it records them, and every source whose hybrid
weight now differs from the one in the file is evaluated again.

    python -m benchmarks.retriever_mixture --budget-minutes 40 --commit           # every run, hours
    python -m benchmarks.retriever_mixture --runs all minus_api_bank --budget-minutes 2 --limit 50   # a smoke run
    python -m benchmarks.retriever_mixture --report
    python -m benchmarks.retriever_mixture --reevaluate --results benchmarks/results/retriever_mixture_tuned --commit
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import RESULTS, ROOT, markdown_table, weights_fingerprint, write_report  # noqa: E402

OUT = RESULTS / "retriever_mixture"
KS = (5, 10)
REFERENCES = ("bm25", "packaged")  # rows of models nobody trained here


def per_query_rows(index: Any, tasks: list[Any]) -> list[dict[str, Any]]:
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    ranked = index.search_batch([t.context_text() for t in tasks], k=max(KS))
    return [{"task_id": t.id, **{f"N@{k}": 100.0 * ndcg_at_k(r.ids, t.gold, k) for k in KS},
             **{f"C@{k}": 100.0 * completeness_at_k(r.ids, t.gold, k) for k in KS}} for t, r in zip(tasks, ranked)]


def evaluate_model(model: str | None, sources: list[Any], methods: tuple[str, ...],
                   weights: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, list]]:
    """``{source: {method: per-query rows}}`` of one encoder (``None``: the packaged MiniLM) on every
    held-out part; ``weights`` (when given) gets each source's hybrid weight and its origin."""
    from toolgym.retrieval import build_index

    out: dict[str, dict[str, list]] = {}
    for s in sources:
        out[s.name] = {}
        for m in methods:
            index = build_index(s.corpus, m, model=model)
            out[s.name][m] = per_query_rows(index, s.heldout)
            if m == "hybrid" and weights is not None:
                weights[s.name] = {"bm25_weight": index.bm25_weight, "from": index.bm25_weight_source}
    return out


def load_mixture(config: Path, limit: int | None, load: bool = True) -> tuple[Any, list[Any]]:
    """The mixture config (``limit``: first N train and held-out tasks per source) and, with ``load``, its sources."""
    import dataclasses

    from toolgym.fitting.common import load_sources
    from toolgym.fitting.retriever import FitRetrieverConfig
    from toolgym.trainers.config import load_config

    cfg = load_config(FitRetrieverConfig, config)
    if limit:
        cfg.sources = [dataclasses.replace(src, train_limit=limit, eval_limit=limit) for src in cfg.sources]
    return cfg, load_sources(cfg) if load else []


def leave_one_out_models(runs: Path, sources: list[Any]) -> list[tuple[Any, Path]]:
    """``(source, runs/minus_<source>/model)`` for every source whose leave-one-out model is there
    (the others are skipped, with a line saying so)."""
    found = []
    for s in sources:
        model = runs / f"minus_{s.name}" / "model"
        if model.is_dir():
            found.append((s, model))
        else:
            print(f"skipping minus_{s.name}: no {model}", flush=True)
    return found


def run_one(name: str, args: argparse.Namespace, sources: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    out = Path(args.results)
    path = out / f"{name}.json"
    def own(s: dict[str, Any]) -> dict[str, Any]:  # nobody trains a reference row: the budget is not its setting
        return {k: v for k, v in s.items() if k != "budget_minutes"} if name in REFERENCES else s

    settings = own(settings)
    if path.exists():
        got = json.loads(path.read_text())
        if own(got["settings"]) == settings:
            return got
        raise SystemExit(f"{path} holds a run with other settings; move it away or use the same ones")
    if name in REFERENCES:
        weights: dict[str, dict[str, Any]] = {}
        rows = evaluate_model(None, sources, ("bm25",) if name == "bm25" else ("dense", "hybrid"), weights)
        result = {"run": name, "settings": settings, "trained_on": [], "rows": rows, "hybrid_weights": weights}
    else:
        from toolgym.trainers.config import config_yaml

        left_out = name.removeprefix("minus_") if name != "all" else None
        keep = [i for i, s in enumerate(sources) if s.name != left_out]
        run_dir = Path(args.out) / name
        cfg_path = run_dir.with_suffix(".yaml")
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        cfg, _ = load_mixture(Path(args.config), args.limit, load=False)
        cfg.sources = [src for src in cfg.sources if src.dataset != left_out]  # without the left-out source
        text = config_yaml(cfg)
        summary_path = run_dir / "summary.json"
        # A training run that finished (same config and budget) but whose evaluation did not is
        # evaluated, not trained again.
        finished = (summary_path.exists() and cfg_path.exists() and cfg_path.read_text() == text
                    and json.loads(summary_path.read_text()).get("budget_minutes") == float(args.budget_minutes))
        if finished:
            print(f"{run_dir}: training finished earlier, evaluating it", flush=True)
        else:
            cfg_path.write_text(text)
            overrides = [f"output_dir={run_dir}", f"budget_minutes={args.budget_minutes}", "progress=false"]
            cmd = [sys.executable, "-m", "toolgym.cli.main", "fit-retriever", str(cfg_path), *overrides]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)
        summary = json.loads(summary_path.read_text())
        model_dir = Path(summary["model_dir"])
        weights = {}
        rows = evaluate_model(str(model_dir), sources, ("dense", "hybrid"), weights)
        result = {"run": name, "settings": settings, "trained_on": [sources[i].name for i in keep],
                  "weights_sha256": weights_fingerprint(model_dir), "train_summary": summary, "rows": rows,
                  "hybrid_weights": weights}
    budget = "reference, untrained" if name in REFERENCES else f"{settings['budget_minutes']} min"  # a reference has no budget
    _save(path, result, args.commit, f"retriever_mixture: {name} ({budget})")
    return result


def _save(path: Path, result: dict[str, Any], commit: bool, message: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result) + "\n")
    changed = subprocess.run(["git", "status", "--porcelain", "--", str(path)], capture_output=True, text=True,
                             cwd=ROOT).stdout.strip() if commit else ""
    if changed:  # an unchanged file has nothing to commit
        subprocess.run(["git", "add", str(path)], check=True, cwd=ROOT)
        subprocess.run(["git", "commit", "-q", "-m", message, "--", str(path)], check=True, cwd=ROOT)


def recorded_hybrid_weight(result: dict[str, Any], source: str) -> float:
    """The BM25 weight ``result``'s hybrid rows of ``source`` were measured with (files written before
    ``hybrid_weights`` existed: the run's one tuned weight, or the packaged model's 0.44)."""
    from toolgym.retrieval.index import HYBRID_BM25_WEIGHT

    if source in result.get("hybrid_weights", {}):
        return float(result["hybrid_weights"][source]["bm25_weight"])
    tuned = result.get("train_summary", {}).get("hybrid_bm25_weight")
    return HYBRID_BM25_WEIGHT if tuned is None else float(tuned)


def reevaluate(path: Path, args: argparse.Namespace, sources: list[Any]) -> list[str]:
    """Bring one finished run's file up to the current hybrid-weight rule (module docstring); returns
    the sources evaluated again."""
    from toolgym.fitting.retriever import FitRetrieverConfig, retune_hybrid_weight
    from toolgym.retrieval import build_index
    from toolgym.retrieval.index import hybrid_bm25_weight
    from toolgym.retrieval.models import HYBRID_SETTINGS_FILE, LIBRARY_WEIGHTS_KEY, read_model_settings
    from toolgym.trainers.config import load_config

    result = json.loads(path.read_text())
    if result["run"] == "bm25":
        return []
    model = None
    if result["run"] != "packaged":
        model_dir = Path(result["train_summary"]["model_dir"])
        try:
            same = model_dir.is_dir() and weights_fingerprint(model_dir) == result["weights_sha256"]
        except FileNotFoundError:  # a folder without weights
            same = False
        if not same:
            raise SystemExit(f"{path}: its model {model_dir} is not here (or holds other weights); it cannot be re-evaluated")
        run_dir = model_dir.parent
        cfg = load_config(FitRetrieverConfig, run_dir.with_suffix(".yaml"), [f"output_dir={run_dir}", "progress=false"])
        saved = read_model_settings(model_dir, HYBRID_SETTINGS_FILE, "bm25_weight")
        if saved is not None and ("trained_corpora" not in saved or LIBRARY_WEIGHTS_KEY not in saved
                                  or saved.get("zero_shot_bm25_weight") != cfg.zero_shot_bm25_weight):
            before = saved["bm25_weight"]
            after = retune_hybrid_weight(cfg, evaluate=False)["hybrid_bm25_weight"]
            if after != before:
                raise SystemExit(f"{model_dir}: re-tuning gave w = {after}, the run had {before}; not the same tuning")
        model = str(model_dir)
    redone, weights = [], dict(result.get("hybrid_weights", {}))
    for s in sources:
        w, origin = hybrid_bm25_weight(s.corpus, model)  # what build_index would use, without building it
        weights[s.name] = {"bm25_weight": w, "from": origin}
        if w != recorded_hybrid_weight(result, s.name):
            result["rows"][s.name]["hybrid"] = per_query_rows(build_index(s.corpus, "hybrid", model=model), s.heldout)
            redone.append(s.name)
    result["hybrid_weights"] = weights
    if redone:
        print(f"{path.name}: hybrid of {', '.join(redone)} evaluated again", flush=True)
    _save(path, result, args.commit, f"retriever_mixture: {result['run']} re-evaluated at the current hybrid weights"
          + (f" ({', '.join(redone)})" if redone else " (no change)"))
    return redone


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / max(len(rows), 1)


def section_name(results_dir: str | Path) -> str:
    """The docs/benchmarks.md section (and results/<name>.json) of a results folder: another folder
    (runs made another way, e.g. before fit-retriever tuned the hybrid weight) gets its own."""
    folder = Path(results_dir).resolve()
    return "retriever_mixture" if folder == OUT.resolve() else f"retriever_mixture_{folder.name.removeprefix('retriever_mixture_')}"


def _shown(path: str | Path) -> str:
    folder = Path(path).resolve()
    return str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(path)


def fusion_margins(results: list[dict[str, Any]], metric: str = "C@10") -> dict[str, dict[str, tuple[float, float]]]:
    """Per trained run and source: mean and standard error of the per-query ``metric`` difference
    between the run's hybrid and the better (by mean of ``metric``) of BM25 (the ``bm25`` reference
    row) and the run's dense index: how far the hybrid sits above or below its better part."""
    from toolgym.evaluation.evaluate import paired_gain

    bm25 = next((r for r in results if r["run"] == "bm25"), None)
    out: dict[str, dict[str, tuple[float, float]]] = {}
    if bm25 is None:
        return out
    for res in results:
        if res["run"] in REFERENCES or "hybrid" not in next(iter(res["rows"].values())):
            continue
        out[res["run"]] = {}
        for src, methods in res["rows"].items():
            parts = [bm25["rows"][src]["bm25"], methods["dense"]]
            best = {r["task_id"]: r[metric] for r in max(parts, key=lambda rows: mean(rows, metric))}
            hybrid = methods["hybrid"]
            gain = paired_gain([best[r["task_id"]] for r in hybrid], [r[metric] for r in hybrid])
            out[res["run"]][src] = (gain["gain"], gain["se"])
    return out


def per_library(result: dict[str, Any]) -> bool:
    """Whether ``result``'s hybrid rows used a weight per training library (``library_weights``)."""
    from toolgym.retrieval.models import IN_DOMAIN_LIBRARY

    prefix = IN_DOMAIN_LIBRARY.split("{")[0]
    return any(v["from"].startswith(prefix) for v in result.get("hybrid_weights", {}).values())


def report(results: list[dict[str, Any]], results_dir: str | Path = OUT) -> str:
    """The matrix from the run files alone: one row per (run, method), one column per evaluated source."""
    from toolgym.retrieval.models import ZERO_SHOT
    if not results:
        return "No run yet."
    sources = list(results[0]["rows"])
    table = []
    for res in results:
        for method in res["rows"][sources[0]]:
            cells = []
            for s in sources:
                rows = res["rows"][s][method]
                zero_shot = res["run"] not in REFERENCES and s not in res["trained_on"]
                cell = f"{mean(rows, 'C@10'):.1f} / {mean(rows, 'N@5'):.1f}"
                cells.append(f"**{cell}**" if zero_shot else cell)
            steps = res.get("train_summary", {}).get("steps")  # runs differ: the budget is wall time
            w = res.get("train_summary", {}).get("hybrid_bm25_weight")  # tuned for this encoder on set-aside queries
            zero = sorted({v["bm25_weight"] for v in res.get("hybrid_weights", {}).values() if v["from"] == ZERO_SHOT})
            label = method + (f" ({'w per library' if per_library(res) else f'w = {w:g}'}"
                              + "".join(f"; zero-shot {z:g}" for z in zero) + ")" if method == "hybrid" and w is not None else "")
            table.append([res["run"] + (f" ({steps} steps)" if steps is not None else ""), label, *cells])
    s0 = results[0]["settings"]
    budgets = sorted({r["settings"]["budget_minutes"] for r in results if r["run"] not in REFERENCES})
    legend = (f"C@10 / N@5 on each source's held-out part (per-query rows in `{_shown(results_dir)}/`); "
              f"bold: a source the row's model never trained on (zero-shot); hybrid (w = x): the BM25 weight `fit-retriever` "
              f"tuned for that encoder on set-aside training queries, and (zero-shot z) the one it uses on a library it "
              f"never trained on (no w: the packaged model's 0.44). Training budget "
              f"{' / '.join(f'{b:g}' for b in budgets) or 'none'} min per run, config `{s0['config']}`"
              + (f", {s0['limit']} tasks per source" if s0.get("limit") else "") + ".")
    body = legend + "\n\n" + markdown_table(["trained on", "index", *sources], table)
    with_libraries = [r for r in results if per_library(r)]
    if with_libraries:
        rows = [[r["run"], *(f"**{r['hybrid_weights'][s]['bm25_weight']:g}**" if s not in r["trained_on"]
                             else f"{r['hybrid_weights'][s]['bm25_weight']:g}" for s in sources)] for r in with_libraries]
        body += ("\n\nThe hybrid's BM25 weight per source (w per library): on a library the model trained on, the weight "
                 "`fit-retriever` tuned on that library's set-aside training queries; bold: the zero-shot weight.\n\n"
                 + markdown_table(["trained on", *sources], rows))
    for metric in ("C@10", "N@5"):
        margins = fusion_margins(results, metric)
        if margins:
            rows = [[run, *(f"{m[s][0]:+.1f} ± {m[s][1]:.1f}" for s in sources)] for run, m in margins.items()]
            body += (f"\n\nHybrid {metric} − the better of BM25 and the run's dense index (by mean), ± the paired se "
                     "over the held-out queries:\n\n" + markdown_table(["trained on", *sources], rows))
    return body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "fit_retriever_mixture.yaml"))
    ap.add_argument("--runs", nargs="*", default=None, help="runs to do (default: bm25 packaged all minus_<each source>)")
    ap.add_argument("--budget-minutes", type=float, default=40.0)
    ap.add_argument("--limit", type=int, default=None, help="first N train and held-out tasks per source (smoke runs)")
    ap.add_argument("--out", default="runs/retriever_mixture", help="training run folders")
    ap.add_argument("--results", default=str(OUT), help="where each run's result file goes")
    ap.add_argument("--commit", action="store_true", help="git-commit each run's result file when it finishes")
    ap.add_argument("--no-report", action="store_true", help="print the table; leave docs/benchmarks.md alone")
    ap.add_argument("--report", action="store_true", help="only rebuild the table from the result files")
    ap.add_argument("--reevaluate", action="store_true",
                    help="re-evaluate finished runs whose hybrid weight the current rule changes (no training)")
    args = ap.parse_args(argv)
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*.json"))]
        order = {name: i for i, name in enumerate(REFERENCES + ("all",))}
        results.sort(key=lambda r: (order.get(r["run"], len(order)), r["run"]))
        body = report(results, args.results)
        if args.no_report:
            print(body)
            return 0
        name = section_name(args.results)
        write_report(name, {"runs": [r["run"] for r in results], "results_dir": _shown(args.results)},
                     "Retriever mixture: leave-one-dataset-out" + ("" if name == "retriever_mixture" else f" (`{_shown(args.results)}`)"),
                     body, script="retriever_mixture.py --report" + ("" if name == "retriever_mixture" else f" --results {_shown(args.results)}"))
        print(body)
        return 0
    _, sources = load_mixture(Path(args.config), args.limit)
    if args.reevaluate:
        for path in sorted(Path(args.results).glob("*.json")):
            if not args.runs or path.stem in args.runs:
                reevaluate(path, args, sources)
        return main(["--report", "--results", args.results, *(["--no-report"] if args.no_report else [])])
    runs = args.runs or [*REFERENCES, "all", *(f"minus_{s.name}" for s in sources)]
    settings = {"config": str(Path(args.config).relative_to(ROOT)) if Path(args.config).is_absolute() else args.config,
                "budget_minutes": args.budget_minutes, "limit": args.limit, "sources": [s.name for s in sources]}
    for name in runs:
        if name not in (*REFERENCES, "all") and name.removeprefix("minus_") not in {s.name for s in sources}:
            ap.error(f"unknown run {name!r}")
        run_one(name, args, sources, settings)
    return main(["--report", "--results", args.results, *(["--no-report"] if args.no_report else [])])


if __name__ == "__main__":
    sys.exit(main())
