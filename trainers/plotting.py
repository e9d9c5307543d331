"""A PNG of a run's training curves from its JSONL metrics."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.trainers.metrics import read_metrics  # tolerates a half-written last line

PANELS = [
    ("reward", "reward (mean over rollouts)"),
    ("adv_abs", "|advantage| (policy tokens)"),
    ("kl", "KL to reference (k3)"),
    ("clip_frac", "clip fraction"),
    ("search_turns", "search turns / episode"),
    ("invalid_rate", "invalid action rate"),
]


def plot_curves(metrics_path: str | Path, out_png: str | Path, title: str | None = None,
                panels: list[tuple[str, str]] | None = None) -> Path:
    """Plot ``panels`` (default: the GRPO panels; those present in the metrics) against the step; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(metrics_path) if "step" in r]
    wanted = panels or PANELS
    panels = [(k, label) for k, label in wanted if any(k in r for r in rows)] or wanted[:1]
    cols = 3
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_png)


def save_figure(fig: Any, out_png: str | Path, dpi: int = 100) -> Path:
    """Lay out, write atomically (parent folders made) and close a matplotlib figure; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    from toolgym.data.atomic import atomic_open

    try:
        with atomic_open(out, "wb") as f:  # never a half-written png over the last good one
            fig.savefig(f, dpi=dpi, format=out.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return out
