"""The diff's figure: a few headline metrics of the old run over the new one."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd


def _overlay(ax, old: pd.DataFrame, new: pd.DataFrame, experiment: str, metric: str, title: str) -> None:
    keys = list(dict.fromkeys([*old.loc[(old.experiment == experiment) & (old.metric == metric), "key"],
                               *new.loc[(new.experiment == experiment) & (new.metric == metric), "key"]]))
    ax.set_title(title)
    if not keys:
        ax.text(0.5, 0.5, "not in either run", ha="center", va="center", transform=ax.transAxes)
        return
    x, width = np.arange(len(keys)), 0.38
    for offset, (label, table) in zip((-width / 2, width / 2), (("old", old), ("new", new)), strict=True):
        rows = table[(table.experiment == experiment) & (table.metric == metric)].set_index("key").reindex(keys)
        values = rows["value"].to_numpy(dtype=float)
        errors = np.vstack([values - rows["low"].to_numpy(dtype=float), rows["high"].to_numpy(dtype=float) - values])
        ax.bar(x + offset, values, width, label=label, yerr=np.nan_to_num(np.abs(errors)), capsize=3,
               alpha=0.6 if label == "old" else 0.9)
    ax.set_xticks(x, keys, rotation=30, ha="right", fontsize=8)
    ax.legend()


def diff_figure(old: pd.DataFrame, new: pd.DataFrame) -> bytes:
    """PNG: old vs new KV-cache speed ratios (rep ranges) and quant Δloss bars (± the floor)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _overlay(axes[0], old, new, "kvcache", "speed_ratio", "KV cache: no-cache / cache time, by length")
    _overlay(axes[1], old, new, "quant", "delta_loss", "Quantization: Δ validation loss, ± noise floor")
    axes[1].axhline(0.0, color="black", linewidth=0.6)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
