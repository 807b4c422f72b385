"""The setup section: corpus, models and the training-noise floor."""

from __future__ import annotations

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.render import Document
from inferlab.report.sections.common import select_columns


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
