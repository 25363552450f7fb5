"""Plots for evaluation results (matplotlib, written to PNG without a display)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_nll(results: list[dict], train_length: int | None, path: Path) -> None:
    """Mean NLL per position bucket, one curve per model, a marker at the training length."""
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for result in results:
        data = result["nll_position"]
        centres = [(a + b) / 2 for a, b in zip(data["bucket_start"], data["bucket_end"])]
        axis.plot(centres, data["mean_nll"], "o-", markersize=3, label=result["name"])
    if train_length:
        axis.axvline(train_length, color="grey", linestyle="--", label=f"training length {train_length}")
    axis.set_xlabel("position (tokens)")
    axis.set_ylabel("mean NLL (nats)")
    axis.set_title("Per-token NLL against position (state carried across segments)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_grid(grid: dict, title: str, path: Path) -> None:
    """Accuracy heatmap: depth (rows) x length (columns), each cell annotated."""
    accuracy = grid["accuracy"]
    figure, axis = plt.subplots(figsize=(1.2 + 0.9 * len(grid["lengths"]), 1.2 + 0.6 * len(grid["depths"])))
    image = axis.imshow(accuracy, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    axis.set_xticks(range(len(grid["lengths"])), [str(n) for n in grid["lengths"]])
    axis.set_yticks(range(len(grid["depths"])), [f"{d:.0%}" for d in grid["depths"]])
    axis.set_xlabel("context length (tokens)")
    axis.set_ylabel("needle depth")
    for row, values in enumerate(accuracy):
        for column, value in enumerate(values):
            axis.text(column, row, f"{value:.0%}", ha="center", va="center", fontsize=8)
    figure.colorbar(image, ax=axis, label="accuracy")
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_lines(series: dict[str, tuple[list, list]], title: str, xlabel: str, path: Path, log_x: bool = False) -> None:
    """Accuracy curves, one per entry of ``series`` (label -> (x values, accuracies))."""
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for label, (xs, ys) in series.items():
        axis.plot(xs, ys, "o-", label=label)
    if log_x:
        axis.set_xscale("log", base=2)
    axis.set_ylim(-0.05, 1.05)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("accuracy")
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_sweep(result, path: Path, title: str) -> None:
    """Log-log plot of max |logit diff| against beta scale, with a slope-1 guide and the value at 0."""
    rows = [r for r in result.rows if r["scale"] > 0]
    scales = [r["scale"] for r in rows]
    diffs = [max(r["max_abs_diff"], 1e-300) for r in rows]
    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    axis.loglog(scales, diffs, "o-", label="max |logit diff| vs beta-dropped Mamba2")
    if result.fitted_scales:
        anchor_scale = result.fitted_scales[0]
        anchor = next(r["max_abs_diff"] for r in rows if r["scale"] == anchor_scale)
        guide = [anchor * s / anchor_scale for s in scales]
        axis.loglog(scales, guide, "--", color="grey", label="slope 1")
    zero = result.rows[-1]["max_abs_diff"]
    if zero > 0:
        axis.axhline(zero, color="tab:red", linestyle=":", label=f"at scale 0: {zero:.2g}")
    slope = "n/a" if result.slope is None else f"{result.slope:.3f}"
    axis.set_title(f"{title}\nslope {slope}, limit {'OK' if result.limit_ok else 'FAILED'} ({result.dtype})")
    axis.set_xlabel("beta scale")
    axis.set_ylabel("max |logit difference|")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
