"""The report's matplotlib figures. Each drawing takes the report's inputs and returns PNG bytes; missing data ->
a placeholder. A spec's `Figure(draw="inferlab.report.figures:<function>")` names the drawing of each figure.

PNG writing (and matplotlib's backend) is inferlab.png's, shared with the review's changes figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.png import plt, to_png
from inferlab.quant.spec import SEED_SCHEMES
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.kvcache import kv_ratio_by_length
from inferlab.review.numbers import fmt
from inferlab.sampling.grid import GREEDY as GREEDY_CELL
from inferlab.sampling.grid import HUMAN as HUMAN_CELL
from inferlab.sampling.summary_table import wide_summary


def placeholder(title: str, why: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.6, title, ha="center", va="center", fontsize=11, weight="bold")
    ax.text(0.5, 0.25, f"missing: {why}", ha="center", va="center", fontsize=9, color="#b00020")
    return to_png(fig)


def legend_below(fig, axes, ncol: int = 3) -> None:
    """One legend for all panels, below them: never over the data."""
    handles = {}
    for ax in np.atleast_1d(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=ncol, fontsize=8,
               frameon=False)


def kvcache_ratio(data: ReportInputs) -> bytes:
    """One panel per engine: measured ratio (median, min-max), the fit's prediction, the FLOP estimate,
    and the seed page's CPU value as a marker on the seed-faithful (first) engine."""
    summary = data.table("kv_summary")
    ratios = kv_ratio_by_length(summary) if summary is not None else None
    if ratios is None or ratios.empty:
        return placeholder(FIGURES["kvcache_ratio"].title, "results/kvcache/summary.parquet")
    fit = data.table("kv_fit")
    blocks = list(ratios.groupby("engine", sort=False))
    fig, axes = plt.subplots(1, len(blocks), figsize=(4.0 * len(blocks), 2.9), sharey=True, squeeze=False,
                             layout="constrained")
    kv = data.seed_reference.get("kvcache", {})
    flops = fit.sort_values("length").drop_duplicates("length") if fit is not None and "length" in fit else None
    for i, (ax, (name, block)) in enumerate(zip(axes[0], blocks, strict=True)):
        y = block["ratio"].to_numpy()
        err = np.vstack([y - block["ratio_min"].fillna(block["ratio"]).to_numpy(),
                         block["ratio_max"].fillna(block["ratio"]).to_numpy() - y])
        ax.errorbar(block["length"], y, yerr=np.clip(err, 0, None), marker="o", capsize=3, color="tab:blue",
                    label="measured (median, min-max)")
        if fit is not None and "predicted_ratio" in fit.columns:
            f = fit[fit["engine"] == name].sort_values("length")
            ax.plot(f["length"], f["predicted_ratio"], "s--", color="tab:orange", label="fit a + b·positions")
        if flops is not None and "flop_estimate_ratio" in flops.columns:
            ax.plot(flops["length"], flops["flop_estimate_ratio"], "^:", color="tab:grey", label="FLOP estimate")
        # their CPU value sits at its own length, on the seed-faithful engine, when our lengths reach it
        if i == 0 and kv.get("cpu_ratio_at_256") and kv.get("max_length", 256) in set(block["length"]):
            ax.plot([kv.get("max_length", 256)], [kv["cpu_ratio_at_256"]], "X", color="k", markersize=8,
                    label=f"seed page, their CPU ({kv['cpu_ratio_at_256']}×)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(block["length"], [str(v) for v in block["length"]])
        ax.minorticks_off()
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("generated tokens")
    axes[0][0].set_ylabel("no-cache / cache time (×)")
    legend_below(fig, axes[0], ncol=4)
    fig.suptitle(FIGURES["kvcache_ratio"].title, fontsize=10)
    return to_png(fig)


def _grid_matrix(dist: pd.DataFrame, value: str) -> pd.DataFrame:
    """Rows T, columns 'top-p x' then 'min-p x'."""
    d = dist.copy()
    trunc = d["truncation"] if "truncation" in d.columns else np.where(d["min_p"] > 0, "min_p", "top_p")
    d["column"] = [
        f"min-p {fmt(m)}" if t == "min_p" else f"top-p {fmt(p)}"
        for t, p, m in zip(trunc, d["top_p"], d["min_p"], strict=True)
    ]
    order = [f"top-p {fmt(p)}" for p in sorted(d.loc[np.asarray(trunc) != "min_p", "top_p"].unique())] + [
        f"min-p {fmt(m)}" for m in sorted(d.loc[np.asarray(trunc) == "min_p", "min_p"].unique())
    ]
    return d.pivot_table(index="temperature", columns="column", values=value, aggfunc="first")[order]


def sampling_heatmaps(data: ReportInputs) -> bytes:
    dist = data.table("sp_distribution")
    if dist is None or dist.empty:
        return placeholder(FIGURES["sampling_heatmaps"].title, "results/sampling/distribution.parquet")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, value, label in ((axes[0], "entropy_nats", "entropy (nats)"), (axes[1], "kept", "kept tokens")):
        m = _grid_matrix(dist, value)
        data = m.to_numpy(dtype=float)
        im = ax.imshow(np.log10(data) if value == "kept" else data, aspect="auto", cmap="viridis")
        ax.set_xticks(range(m.shape[1]), m.columns, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(m.shape[0]), [f"T={fmt(t)}" for t in m.index], fontsize=8)
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, fmt(float(data[i, j])), ha="center", va="center", fontsize=7, color="w")
        ax.set_title(label + (" (colour: log10)" if value == "kept" else ""), fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(FIGURES["sampling_heatmaps"].title, fontsize=10)
    return to_png(fig)


def repetition_rows(w: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(greedy, human reference, sampled cells) of the wide repetition table.

    By cell name, not by temperature: the human row has no temperature (NaN) and is not greedy."""
    special = w["cell"].isin([GREEDY_CELL, HUMAN_CELL])
    return w[w["cell"] == GREEDY_CELL], w[w["cell"] == HUMAN_CELL], w[~special]


def sampling_repetition(data: ReportInputs) -> bytes:
    """Each cell's 4-gram repetition against its in-corpus 4-gram share, coloured by temperature; human
    text, greedy and the chosen default marked: the default is the cell nearest the human point."""
    rep, default, seed = data.table("sp_repetition"), data.table("sp_default"), data.seed_reference
    if rep is None or rep.empty:
        return placeholder(FIGURES["sampling_repetition"].title, "results/sampling/repetition.parquet")
    w = wide_summary(rep).reset_index()
    greedy, human, sampled = repetition_rows(w)
    fig, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
    trunc = sampled["truncation"] if "truncation" in sampled.columns else np.where(sampled["min_p"] > 0, "min_p",
                                                                                   "top_p")
    scale = plt.Normalize(float(sampled["temperature"].min()), float(sampled["temperature"].max()) + 1e-9)
    for kind, marker, label in (("top_p", "o", "top-p cells"), ("min_p", "D", "min-p cells")):
        g = sampled[np.asarray(trunc) == kind]
        if len(g):
            points = ax.scatter(g["seq_rep_4"], g["in_corpus_4gram_share"], c=g["temperature"], cmap="viridis",
                                norm=scale, marker=marker, s=28, label=label)
    fig.colorbar(points, ax=ax, label="temperature", shrink=0.85)
    if len(human):
        ax.plot(human["seq_rep_4"], human["in_corpus_4gram_share"], "*", color="tab:red", markersize=14,
                label="human text (validation)")
    if len(greedy):
        ax.plot(greedy["seq_rep_4"], greedy["in_corpus_4gram_share"], "kx", markersize=9, label="greedy (ours)")
    if seed.get("sampling", {}).get("repetition_greedy") is not None:
        ax.axvline(seed["sampling"]["repetition_greedy"], color="grey", linestyle="-.",
                   label="greedy, seed page (theirs)")
    if default is not None and len(default):
        chosen = w[w["cell"] == str(default["cell"].iloc[0])]
        if len(chosen):
            ax.annotate(f"default {chosen['cell'].iloc[0]}", (chosen["seq_rep_4"].iloc[0],
                        chosen["in_corpus_4gram_share"].iloc[0]), xytext=(12, -14), textcoords="offset points",
                        fontsize=8, arrowprops={"arrowstyle": "->", "lw": 0.8})
    ax.set_xlabel("4-gram repetition (share of repeated 4-grams)")
    ax.set_ylabel("in-corpus 4-gram share")
    fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    ax.set_title(FIGURES["sampling_repetition"].title, fontsize=10)
    return to_png(fig)


def speculative_yield(data: ReportInputs) -> bytes:
    """Small multiples: the yield per target forward, measured against the formula (it does not depend on
    the engine), then per engine the wall-clock speedup against the theory with c by parameters and
    against the forward model with every forward at its roofline bound."""
    summary = data.table("spec_summary")
    if summary is None or summary.empty:
        return placeholder(FIGURES["speculative_yield"].title, "results/speculative/summary.parquet")
    measured, formula = "tokens_per_target_forward", "formula_tokens_per_target_forward"
    blocks = list(summary.groupby("engine", sort=False))
    fig, axes = plt.subplots(1, 1 + len(blocks), figsize=(3.4 * (1 + len(blocks)), 2.9), squeeze=False,
                             layout="constrained")
    colours = {d: f"C{i}" for i, d in enumerate(sorted(summary["draft"].unique()))}
    for draft, g in blocks[0][1].groupby("draft"):
        g = g.sort_values("k")
        axes[0][0].plot(g["k"], g[measured], "o", color=colours[draft], label=f"{draft}: measured")
        axes[0][0].plot(g["k"], g[formula], "--", color=colours[draft], label=f"{draft}: formula / theory")
    axes[0][0].set_title("yield per round", fontsize=9)
    axes[0][0].set_ylabel("tokens per target forward")
    for ax, (engine, rows) in zip(axes[0][1:], blocks, strict=True):
        for draft, g in rows.groupby("draft"):
            g = g.sort_values("k")
            ax.plot(g["k"], g["wall_speedup"], "o-", color=colours[draft], label=f"{draft}: measured")
            ax.plot(g["k"], g["speedup_theory_params"], "--", color=colours[draft], label=f"{draft}: formula / theory")
            ax.plot(g["k"], g["speedup_at_bound"], ":", color=colours[draft], label=f"{draft}: at the roofline")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_title(f"wall-clock speedup, {engine} (×)", fontsize=9)
    for ax in axes[0]:
        ax.set_xlabel("k (drafted tokens per round)")
        ax.set_xticks(sorted(summary["k"].unique()))
    legend_below(fig, axes[0], ncol=3)
    fig.suptitle(FIGURES["speculative_yield"].title, fontsize=10)
    return to_png(fig)


def quant_delta(data: ReportInputs) -> bytes:
    """Each scheme's Δ validation loss, coloured by whether it is within our noise floor, against our floor
    and the seed page's floor and Δ values."""
    summary = data.table("quant_summary")
    if summary is None or summary.empty:
        return placeholder(FIGURES["quant_delta"].title, "results/quant/summary.parquet")
    from matplotlib.patches import Patch

    noise = data.table("noise_floor")
    floor = float(noise["floor"].iloc[0]) if noise is not None else None
    seed_floor = data.seed_reference.get("noise_floor", {}).get("floor")
    seed_quant = data.seed_reference.get("quantization", {})
    s = summary.sort_values("delta_loss", ascending=False)
    fig, ax = plt.subplots(figsize=(6.4, 0.15 * len(s) + 1.4), layout="constrained")
    within = s["within_noise"].astype(bool)
    ax.barh(s["scheme"].astype(str), s["delta_loss"], color=np.where(within, "#2e8b57", "#c0392b"), height=0.7)
    handles = [Patch(color="#2e8b57", label="within our noise floor"), Patch(color="#c0392b", label="above it")]
    if floor is not None:
        handles.append(ax.axvspan(-floor, floor, color="#ccc", alpha=0.5, label=f"our floor ±{fmt(floor)}"))
    if seed_floor is not None:
        handles.append(ax.axvline(seed_floor, color="grey", linestyle="--", label=f"seed page's floor {seed_floor}"))
    theirs = {scheme: seed_quant.get(key) for scheme, key in SEED_SCHEMES.items()}
    marks = [(scheme, value) for scheme, value in theirs.items() if value is not None and scheme in set(s["scheme"])]
    if marks:
        handles.append(ax.plot([v for _, v in marks], [k for k, _ in marks], "kD", markersize=5,
                               label="seed page's Δ (theirs)")[0])
    ax.axvline(0, color="k", linewidth=0.8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("validation loss − fp32 validation loss (nats)")
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    ax.set_title(FIGURES["quant_delta"].title, fontsize=10)
    return to_png(fig)


def training_curves(data: ReportInputs) -> bytes:
    curves = data.loss_curves
    if not curves:
        return placeholder(FIGURES["training_curves"].title, "results/models/*/loss_curve.parquet")
    fig, ax = plt.subplots(figsize=(6.4, 2.3))
    for i, (name, c) in enumerate(curves.items()):
        x = c["tokens_seen"] if "tokens_seen" in c.columns else c["step"]
        ax.plot(x, c["train_loss"], linewidth=0.8, color=f"C{i}", label=name)
        if "val_loss_sample" in c.columns:
            v = c.dropna(subset=["val_loss_sample"])
            ax.plot(x.loc[v.index], v["val_loss_sample"], "o", markersize=3, color=f"C{i}")
    ax.plot([], [], "o", color="grey", markersize=3, label="validation (sample)")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(FIGURES["training_curves"].title, fontsize=10)
    return to_png(fig)
