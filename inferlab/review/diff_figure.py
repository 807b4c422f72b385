"""The diff's figure: a few headline metrics of the old run over the new one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferlab.experiments import CHANGES_FIGURE, FIGURES, OVERLAYS


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
    """PNG: one panel per spec overlay, old vs new with their noise (rep ranges, ± the floor)."""
    # imported when drawing, not with the module: the diff's tables and text need no matplotlib
    from inferlab.png import plt, to_png

    fig, axes = plt.subplots(1, len(OVERLAYS), figsize=(5.5 * len(OVERLAYS), 4), squeeze=False)
    for ax, (experiment, metric, title) in zip(axes[0], OVERLAYS, strict=True):
        _overlay(ax, old, new, experiment, metric, title)
        ax.axhline(0.0, color="black", linewidth=0.6)
    fig.suptitle(FIGURES[CHANGES_FIGURE].title, fontsize=10)
    fig.tight_layout()
    return to_png(fig)
