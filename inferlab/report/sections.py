"""Report sections: the milestone table, setup, KV cache and sampling (blocks of a Document)."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.document import Document
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones import Milestone, kv_ratio_by_length
from inferlab.report.verdicts import contended

ENGINE_COLUMNS = ["engine", "engine_used"]  # shown first in every table with one block per engine
HUMAN_CELL = "human"  # repetition.HUMAN
ROW_KINDS = {"greedy": "greedy (baseline)", HUMAN_CELL: "reference: validation text (human)"}


def status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "headline": m.headline, "verdict": m.verdict}
                         for m in milestones])


def select_columns(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def missing_note(doc: Document, data: ReportInputs, *keys: str) -> bool:
    missing = data.missing(*keys)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
    return bool(missing)


def section_setup(doc: Document, data: ReportInputs, seed: dict) -> None:
    doc.add("h2", "Setup: corpus, models, noise floor")
    stats = data.json.get("corpus_stats")
    if stats:
        rows = [{"quantity": k, "value": v} for k, v in stats.items()]
        doc.add("table", pd.DataFrame(rows), "Corpus statistics (results/corpus/stats.json)")
    else:
        doc.add("p", "MISSING: results/corpus/stats.json.")
    seed_params = {data.target: seed.get("model", {}).get("params"), **seed.get("speculative", {}).get("drafts", {})}
    rows = []
    for name, meta in data.metas.items():
        theirs = seed_params.get(name)
        rows.append(
            {
                "model": name,
                "params": meta.get("params"),
                "params, seed page (theirs)": theirs,
                "difference": (meta.get("params") - theirs) if theirs and meta.get("params") else None,
                "val loss (full split)": meta.get("val_loss"),
                "steps": meta.get("steps"),
                "tokens seen": meta.get("tokens_seen"),
                "train s": meta.get("train_seconds"),
                "tokens/s": meta.get("tokens_per_s"),
                "precision": meta.get("precision"),
                "weights sha256": str(meta.get("weights_sha256", ""))[:16] + "…",
            }
        )
    if rows:
        doc.add(
            "table", pd.DataFrame(rows), "The three models (ours) with the seed page's parameter counts beside them"
        )
        for row in rows:
            if row["difference"]:
                doc.add(
                    "note",
                    f"{row['model']} has {row['params']:,} parameters against the seed page's "
                    f"{row['params, seed page (theirs)']:,}: a difference of {abs(row['difference']):,}. "
                    "Ours is what this architecture gives; it is reported as measured, not adjusted.",
                )
        doc.add(
            "note",
            f"The seed page's target ended at validation loss {seed.get('model', {}).get('val_loss')} "
            "(their model, their machine, their training budget).",
        )
    doc.add("figure", "training_curves", F.FIGURES["training_curves"])
    nf = data.table("noise_floor")
    if nf is not None:
        t = select_columns(
            nf,
            [
                "run",
                "seed",
                "val_loss",
                "n_runs",
                "std",
                "range",
                "sigmas",
                "floor_measured",
                "floor_fixed",
                "floor_source",
                "floor",
                "floor_reliable",
                "floor_reliability_note",
            ],
        ).copy()
        t["floor, seed page (theirs)"] = seed.get("noise_floor", {}).get("floor")
        doc.add("table", t, "Noise floor: final validation loss of reruns that differ only in seed")
        snf = seed.get("noise_floor", {})
        doc.add(
            "p",
            f"Our floor: {float(nf['floor'].iloc[0]):.4f} ({nf['floor_source'].iloc[0]}; measured "
            f"{nf['sigmas'].iloc[0]:g} sigma = {float(nf['floor_measured'].iloc[0]):.4f} over {len(nf)} runs, "
            f"std {float(nf['std'].iloc[0]):.4f}, range {float(nf['range'].iloc[0]):.4f}). The seed page's floor: "
            f"{snf.get('floor')} ({snf.get('sigmas')} sigma over their {snf.get('runs')} runs, std {snf.get('std')}, "
            f"range {snf.get('range')}; their model, their machine).",
        )
        if "floor_reliable" in nf.columns and not bool(nf["floor_reliable"].iloc[0]):
            doc.add("note", f"Unreliable floor: {nf['floor_reliability_note'].iloc[0]}.")
    else:
        doc.add("p", "MISSING: results/noise_floor.parquet.")


def section_kvcache(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 1: KV cache against no cache")
    kv = seed.get("kvcache", {})
    fit = data.table("kv_fit")
    doc.add("h3", "Prediction (written before the measurement, from theory)")
    if fit is not None and "flop_estimate_ratio" in fit.columns:
        pred = ", ".join(
            f"{int(r.length)}: {r.flop_estimate_ratio:.1f}x" for r in fit.sort_values("length").itertuples()
        )
        doc.add(
            "p",
            "Lesson 1's FLOP count predicts these cache/no-cache ratios (no-cache FLOPs / cache FLOPs for the "
            f"whole generation): {pred}. A roofline view predicts the same direction.",
        )
    else:
        doc.add("p", "MISSING: results/kvcache/fit.parquet (FLOP estimate).")
    if missing_note(doc, data, "kv_timings", "kv_summary"):
        doc.add("milestone", m)
        return
    ratios = kv_ratio_by_length(data.table("kv_summary"))
    if int(ratios["length"].max()) >= kv.get("max_length", 256):
        # their CPU number sits beside our eager (seed-faithful) row only
        eager = ratios["engine"] == "eager" if "engine" in ratios.columns else pd.Series(True, index=ratios.index)
        ratios["ratio at 256, seed page (theirs, CPU)"] = [
            kv.get("cpu_ratio_at_256") if int(v) == 256 and e else None
            for v, e in zip(ratios["length"], eager, strict=True)
        ]
    doc.add("h3", "Measured")
    doc.add(
        "table",
        ratios,
        "Speed ratio no-cache / cache per engine and generated length (median of paired reps, min-max); "
        "eager is the seed-faithful engine, compiled removes per-step overhead",
    )
    if contended(data, "kv_timings", "kv_summary", "kv_steps", "kv_profile"):
        doc.add("note", "CONTENDED: other work loaded the machine while these timings ran (contended = True); "
                "they are not comparable with an idle run.")
    summ = data.table("kv_summary")
    doc.add(
        "table",
        select_columns(
            summ,
            [
                *ENGINE_COLUMNS,
                "length",
                "mode",
                "reps",
                "ms_per_token_median",
                "ms_per_token_min",
                "ms_per_token_max",
                "total_ms_median",
                "same_output_all",
                "kv_bytes_per_token",
                "device",
                "threads",
                "contended",
            ],
        ),
        "Per-engine, per-mode timings (results/kvcache/summary.parquet)",
    )
    doc.add(
        "note",
        f"Seed page (their model, their machine): MPS {kv.get('mps_ratio_min')}-{kv.get('mps_ratio_max')}x "
        f"flat with length; CPU {kv.get('cpu_ratio_shortest')}x rising to {kv.get('cpu_ratio_at_256')}x; "
        f"cached step {kv.get('mps_cached_ms_per_token')} ms vs {kv.get('mps_uncached_ms_per_token_min')}-"
        f"{kv.get('mps_uncached_ms_per_token_max')} ms uncached on MPS; {kv.get('kv_bytes_per_token')} "
        "KV bytes per token.",
    )
    if fit is not None:
        doc.add(
            "table",
            select_columns(
                fit,
                [
                    *ENGINE_COLUMNS,
                    "length",
                    "a_ms",
                    "b_ms_per_position",
                    "a_cache_ms",
                    "r2",
                    "fixed_share_no_cache",
                    "predicted_ratio",
                    "measured_ratio",
                    "flop_estimate_ratio",
                ],
            ),
            "Fit of the no-cache step time as a + b*positions per engine, and the ratios it predicts",
        )
    prof = data.table("kv_profile")
    if prof is not None:
        doc.add(
            "table",
            select_columns(
                prof.groupby("engine", sort=False).head(10) if "engine" in prof.columns else prof.head(10),
                [*ENGINE_COLUMNS, "rank", "op", "calls_per_step", "op_ms_per_step", "share_of_wall", "wall_ms",
                 "op_ms", "op_share"],
            ),
            "torch.profiler on cached decode steps per engine: top operators and operator time vs wall time",
        )
    roof = data.table("roofline")
    if roof is not None:
        doc.add(
            "table",
            select_columns(
                roof,
                [
                    "subject",
                    *ENGINE_COLUMNS,
                    "model",
                    "device",
                    "context_tokens",
                    "params",
                    "bytes_per_token",
                    "kv_bytes_per_token",
                    "memory_bound_ms_per_token",
                    "compute_bound_ms_per_token",
                    "lower_bound_ms_per_token",
                    "upper_bound_tokens_per_s",
                    "limited_by",
                    "measured_ms_per_token",
                    "measured_over_bound",
                ],
            ),
            "Roofline: the anchor (spec-sheet upper bound, not run) and our model on this machine (stamp below)",
        )
    doc.add("figure", "kvcache_ratio", F.FIGURES["kvcache_ratio"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)


def section_sampling(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 2: temperature x top-p (and min-p)")
    ref = seed.get("sampling", {}).get("reference_cell", {})
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "Raising T flattens the distribution, so entropy and kept count grow with T at fixed top-p; the "
        "entropy of a truncated distribution is at most ln(kept) nats. Lower repetition should come with a "
        "lower in-corpus 4-gram share (text drifting into nonsense).",
    )
    if missing_note(doc, data, "sp_distribution"):
        pass
    else:
        dist = data.table("sp_distribution").copy()
        dist["ln(kept) bound, nats"] = [math.log(k) if k > 0 else float("nan") for k in dist["kept"]]
        # Their one published cell (T and top-p of the seed page); every other row stays empty.
        is_their_cell = [
            abs(t - ref.get("temperature", -1)) < 1e-9 and abs(p - ref.get("top_p", -1)) < 1e-9 and mp == 0
            for t, p, mp in zip(dist["temperature"], dist["top_p"], dist["min_p"], strict=True)
        ]
        dist["entropy, seed page (theirs)"] = [ref.get("entropy") if hit else None for hit in is_their_cell]
        dist["kept, seed page (theirs)"] = [ref.get("kept") if hit else None for hit in is_their_cell]
        doc.add("h3", "Measured")
        doc.add(
            "table",
            select_columns(
                dist,
                [
                    "cell",
                    "truncation",
                    "temperature",
                    "top_p",
                    "min_p",
                    "entropy_nats",
                    "entropy_bits",
                    "kept",
                    "ln(kept) bound, nats",
                    "entropy, seed page (theirs)",
                    "kept, seed page (theirs)",
                ],
            ),
            "Next-token distribution after the prompt (truncated, renormalised; float64)",
        )
        doc.add(
            "note",
            f"The seed page's reference cell (T={ref.get('temperature'):g}, top-p {ref.get('top_p'):g}: entropy "
            f"{ref.get('entropy')}, {ref.get('kept')} kept) is their model's; "
            "their entropy unit is not stated. The sampling workbench (sampling-workbench.html) recomputes "
            "every row of this table in the browser.",
        )
        doc.add("figure", "sampling_heatmaps", F.FIGURES["sampling_heatmaps"])
    rep = data.table("sp_repetition")
    if rep is not None:
        w = F.repetition_wide(rep)
        w.insert(1, "row", [ROW_KINDS.get(str(c), "sampled") for c in w["cell"]])
        doc.add(
            "table",
            select_columns(
                w,
                [
                    "cell",
                    "row",
                    "temperature",
                    "top_p",
                    "min_p",
                    "seq_rep_4",
                    "seq_rep_4_ci_low",
                    "seq_rep_4_ci_high",
                    "distinct_1",
                    "distinct_2",
                    "in_corpus_4gram_share",
                    "in_corpus_4gram_share_ci_low",
                    "in_corpus_4gram_share_ci_high",
                    "nll_per_token",
                    "zipf_coefficient",
                ],
            ),
            "Repetition per cell: mean and bootstrap 95% CI over prompts x samples; the 'human' row is held-out "
            "validation text scored the same way, the reference the cells are measured against (not model output)",
        )
        sr = seed.get("sampling", {})
        doc.add(
            "note",
            f"Seed page (their model): repetition {sr.get('repetition_greedy'):.0%} under greedy, "
            f"{sr.get('repetition_t13'):.0%} at T=1.3 where samples read as nonsense."
            if sr.get("repetition_greedy") is not None
            else "",
        )
        doc.add("figure", "sampling_repetition", F.FIGURES["sampling_repetition"])
    else:
        missing_note(doc, data, "sp_repetition")
    distances = data.table("sp_distance")
    if distances is not None:
        terms = [c for c in distances.columns if c.startswith("term_")]
        doc.add(
            "table",
            select_columns(
                distances.sort_values("distance"),
                ["cell", "truncation", "temperature", "top_p", "min_p", "distance", "distance_ci_low",
                 "distance_ci_high", "eligible", "chosen", *terms],
            ),
            "Distance of each cell to held-out human text (sum of |cell - human| / spread over the metrics; "
            "95% bootstrap CI), closest first; greedy is scored but not eligible as a default",
        )
    samples = data.table("sp_samples")
    if samples is not None and "text" in samples.columns:
        ex = samples.drop_duplicates("cell")
        human = ex[ex["cell"] == HUMAN_CELL]
        ex = pd.concat([ex[ex["cell"] != HUMAN_CELL].head(8), human]).copy()
        ex["text"] = ex["text"].astype(str).str.slice(0, 60)
        ex.insert(1, "source", ["validation text (human, not model output)" if c == HUMAN_CELL else "model output"
                                for c in ex["cell"]])
        doc.add(
            "table",
            select_columns(ex, ["cell", "source", "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share", "text"]),
            "Example texts (first 60 characters): model output per cell, and the held-out validation text "
            "(the human reference) they are measured against",
        )
    default = data.table("sp_default")
    if default is not None:
        doc.add(
            "table",
            default.T.reset_index().set_axis(["field", "value"], axis=1),
            "The default setting and the min-p decision",
        )
    doc.add("h3", "Verdict")
    doc.add("milestone", m)
