"""The report's matplotlib figures. Each function returns PNG bytes; missing data -> a placeholder.

The PNGs carry no 'Software' text chunk, so no URL ends up in the files either.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from inferlab.report.catalog import FIGURE_CATALOG  # noqa: E402
from inferlab.sampling.grid import GREEDY as GREEDY_CELL  # noqa: E402
from inferlab.sampling.grid import HUMAN as HUMAN_CELL  # noqa: E402
from inferlab.sampling.summary_table import wide_summary  # noqa: E402

FIGURES = {stem: figure.title for stem, figure in FIGURE_CATALOG.items()}  # stem -> title


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def placeholder(title: str, why: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.6, title, ha="center", va="center", fontsize=11, weight="bold")
    ax.text(0.5, 0.25, f"missing: {why}", ha="center", va="center", fontsize=9, color="#b00020")
    return to_png(fig)


def kvcache_ratio(ratios: pd.DataFrame | None, fit: pd.DataFrame | None, seed: dict) -> bytes:
    """Measured ratio (median, min-max) against the fit's prediction and the FLOP estimate."""
    if ratios is None or ratios.empty:
        return placeholder(FIGURES["kvcache_ratio"], "results/kvcache/summary.parquet")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for engine, block in _engine_blocks(ratios):
        x = block["length"].to_numpy()
        y = block["ratio"].to_numpy()
        err = np.vstack([y - block["ratio_min"].fillna(block["ratio"]).to_numpy(),
                         block["ratio_max"].fillna(block["ratio"]).to_numpy() - y])
        ax.errorbar(x, y, yerr=np.clip(err, 0, None), marker="o", capsize=3,
                    label=f"measured{engine} (median, min-max)")
    if fit is not None and "length" in fit.columns:
        for engine, f in _engine_blocks(fit):
            f = f.sort_values("length")
            if "predicted_ratio" in f.columns:
                ax.plot(f["length"], f["predicted_ratio"], "s--", label=f"predicted from fit a + b*positions{engine}")
        f = fit.sort_values("length").drop_duplicates("length")  # the FLOP estimate does not depend on the engine
        if "flop_estimate_ratio" in f.columns:
            ax.plot(f["length"], f["flop_estimate_ratio"], "^:", label="FLOP estimate")
    kv = seed.get("kvcache", {})
    if kv.get("mps_ratio_min"):
        ax.axhspan(
            kv["mps_ratio_min"],
            kv["mps_ratio_max"],
            color="#ddd",
            alpha=0.7,
            label=f"seed page, their MPS: {kv['mps_ratio_min']}-{kv['mps_ratio_max']}x",
        )
    if kv.get("cpu_ratio_at_256"):
        ax.plot(
            [256],
            [kv["cpu_ratio_at_256"]],
            "x",
            color="k",
            label=f"seed page, their CPU at 256: {kv['cpu_ratio_at_256']}x",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("no-cache time / cache time")
    ax.legend(fontsize=7)
    ax.set_title(FIGURES["kvcache_ratio"], fontsize=10)
    return to_png(fig)


def _grid_matrix(dist: pd.DataFrame, value: str) -> pd.DataFrame:
    """Rows T, columns 'top-p x' then 'min-p x'."""
    d = dist.copy()
    trunc = d["truncation"] if "truncation" in d.columns else np.where(d["min_p"] > 0, "min_p", "top_p")
    d["column"] = [
        f"min-p {m:g}" if t == "min_p" else f"top-p {p:g}"
        for t, p, m in zip(trunc, d["top_p"], d["min_p"], strict=True)
    ]
    order = [f"top-p {p:g}" for p in sorted(d.loc[np.asarray(trunc) != "min_p", "top_p"].unique())] + [
        f"min-p {m:g}" for m in sorted(d.loc[np.asarray(trunc) == "min_p", "min_p"].unique())
    ]
    return d.pivot_table(index="temperature", columns="column", values=value, aggfunc="first")[order]


def sampling_heatmaps(dist: pd.DataFrame | None) -> bytes:
    if dist is None or dist.empty:
        return placeholder(FIGURES["sampling_heatmaps"], "results/sampling/distribution.parquet")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, value, fmt, label in (
        (axes[0], "entropy_nats", "{:.2f}", "entropy (nats)"),
        (axes[1], "kept", "{:.0f}", "kept tokens"),
    ):
        m = _grid_matrix(dist, value)
        data = m.to_numpy(dtype=float)
        im = ax.imshow(np.log10(data) if value == "kept" else data, aspect="auto", cmap="viridis")
        ax.set_xticks(range(m.shape[1]), m.columns, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(m.shape[0]), [f"T={t:g}" for t in m.index], fontsize=8)
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, fmt.format(data[i, j]), ha="center", va="center", fontsize=7, color="w")
        ax.set_title(label + (" (colour: log10)" if value == "kept" else ""), fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(FIGURES["sampling_heatmaps"], fontsize=10)
    return to_png(fig)


def _engine_blocks(df: pd.DataFrame):
    """(label suffix, rows) per engine, in table order."""
    return [(f", {engine}", rows) for engine, rows in df.groupby("engine", sort=False)]


def repetition_rows(w: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(greedy, human reference, sampled cells) of the wide repetition table.

    By cell name, not by temperature: the human row has no temperature (NaN) and is not greedy."""
    special = w["cell"].isin([GREEDY_CELL, HUMAN_CELL])
    return w[w["cell"] == GREEDY_CELL], w[w["cell"] == HUMAN_CELL], w[~special]


def sampling_repetition(rep: pd.DataFrame | None, seed: dict) -> bytes:
    if rep is None or rep.empty:
        return placeholder(FIGURES["sampling_repetition"], "results/sampling/repetition.parquet")
    w = wide_summary(rep).reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    greedy, human, sampled = repetition_rows(w)
    for ax, metric, label in (
        (axes[0], "seq_rep_4", "seq-rep-4"),
        (axes[1], "in_corpus_4gram_share", "in-corpus 4-gram share"),
    ):
        if metric not in w.columns:
            ax.text(0.5, 0.5, f"no {metric}", ha="center")
            continue
        trunc = (
            sampled["truncation"]
            if "truncation" in sampled.columns
            else np.where(sampled["min_p"] > 0, "min_p", "top_p")
        )
        for (kind, knob), g in sampled.assign(_k=trunc).groupby(
            ["_k", np.where(np.asarray(trunc) == "min_p", sampled["min_p"], sampled["top_p"])]
        ):
            g = g.sort_values("temperature")
            yerr = (
                np.vstack([g[metric] - g[f"{metric}_ci_low"], g[f"{metric}_ci_high"] - g[metric]])
                if f"{metric}_ci_low" in g.columns
                else None
            )
            ax.errorbar(
                g["temperature"],
                g[metric],
                yerr=yerr,
                marker="o" if kind == "top_p" else "D",
                linestyle="-" if kind == "top_p" else ":",
                capsize=2,
                label=f"{'top-p' if kind == 'top_p' else 'min-p'} {knob:g}",
            )
        if len(greedy):
            ax.axhline(float(greedy[metric].iloc[0]), color="k", linestyle="--", label="greedy (ours)")
        if len(human):
            value = float(human[metric].iloc[0])
            ax.axhline(value, color="tab:green", linestyle="-", linewidth=2, alpha=0.6,
                       label="human reference (validation text)")
            low, high = f"{metric}_ci_low", f"{metric}_ci_high"
            if low in human.columns:
                ax.axhspan(float(human[low].iloc[0]), float(human[high].iloc[0]), color="tab:green", alpha=0.12)
        if metric == "seq_rep_4" and seed.get("sampling", {}).get("repetition_greedy") is not None:
            ax.axhline(
                seed["sampling"]["repetition_greedy"],
                color="grey",
                linestyle="-.",
                label="greedy, seed page (their model)",
            )
        ax.set_xlabel("temperature")
        ax.set_ylabel(label + " (mean, 95% CI)")
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle(FIGURES["sampling_repetition"], fontsize=10)
    return to_png(fig)


def speculative_yield(summary: pd.DataFrame | None) -> bytes:
    if summary is None or summary.empty:
        return placeholder(FIGURES["speculative_yield"], "results/speculative/summary.parquet")
    # columns of speculative_bench.summarise
    measured, formula = "tokens_per_target_forward", "formula_tokens_per_target_forward"
    speed, speed_p, wall = "speedup_theory_time", "speedup_theory_params", "wall_speedup"
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    blocks = _engine_blocks(summary)
    for engine, rows in blocks:
        for draft, g in rows.groupby("draft"):
            g = g.sort_values("k")
            if engine == blocks[0][0]:  # acceptance and yield do not depend on the engine: drawn once
                axes[0].plot(g["k"], g[measured], "o-", label=f"{draft} measured")
                axes[0].plot(g["k"], g[formula], "x--", label=f"{draft} formula E")
            for col, style, name in (
                (speed_p, "s:", "theory, c by params"),
                (speed, "^--", "theory, c by time"),
                (wall, "o-", "wall clock measured"),
            ):
                axes[1].plot(g["k"], g[col], style, label=f"{draft} {name}{engine}")
    axes[0].set_xlabel("k (draft tokens per round)")
    axes[0].set_ylabel("tokens per target forward")
    axes[1].axhline(1.0, color="k", linewidth=0.8)
    axes[1].set_xlabel("k")
    axes[1].set_ylabel("speedup over plain target sampling")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(FIGURES["speculative_yield"], fontsize=10)
    return to_png(fig)


def quant_delta(summary: pd.DataFrame | None, floor: float | None, seed_floor: float | None) -> bytes:
    if summary is None or summary.empty:
        return placeholder(FIGURES["quant_delta"], "results/quant/summary.parquet")
    scheme = "scheme"
    s = summary.sort_values("delta_loss")
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(s) + 1.5))
    colors = ["#2e8b57" if within else "#c0392b" for within in s["within_noise"].astype(bool)]
    ax.barh(s[scheme].astype(str), s["delta_loss"], color=colors)
    if floor is not None:
        ax.axvspan(-floor, floor, color="#ccc", alpha=0.5, label=f"our noise floor +/-{floor:.4f}")
    if seed_floor is not None:
        ax.axvline(seed_floor, color="grey", linestyle="--", label=f"seed page's floor {seed_floor} (their runs)")
    ax.axvline(0, color="k", linewidth=0.8)
    ax.set_xlabel("validation loss - fp32 validation loss")
    ax.legend(fontsize=7)
    ax.set_title(FIGURES["quant_delta"], fontsize=10)
    return to_png(fig)


def training_curves(curves: dict[str, pd.DataFrame]) -> bytes:
    if not curves:
        return placeholder(FIGURES["training_curves"], "results/models/*/loss_curve.parquet")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, c in curves.items():
        x = c["tokens_seen"] if "tokens_seen" in c.columns else c["step"]
        ax.plot(x, c["train_loss"], linewidth=0.8, label=f"{name} train")
        if "val_loss_sample" in c.columns:
            v = c.dropna(subset=["val_loss_sample"])
            ax.plot(x.loc[v.index], v["val_loss_sample"], "o", markersize=3, label=f"{name} val (sample)")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(fontsize=7)
    ax.set_title(FIGURES["training_curves"], fontsize=10)
    return to_png(fig)
