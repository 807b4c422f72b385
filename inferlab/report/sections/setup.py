"""The setup section: the models and the training-noise floor (the corpus and the reruns in the appendix)."""

from __future__ import annotations

import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.report.inputs import ReportInputs
from inferlab.report.render import Document
from inferlab.review.numbers import fmt
from inferlab.training.spec import SEED_PARAMS


def model_rows(data: ReportInputs, seed: dict) -> list[dict]:
    seed_params = {data.target: seed.get("model", {}).get("params"), **seed.get("speculative", {}).get("drafts", {})}
    rows = []
    for name, meta in data.metas.items():
        theirs = seed_params.get(name)
        rows.append({
            "model": name,
            "params": meta.get("params"),
            SEED_PARAMS: theirs,
            "difference": (meta.get("params") - theirs) if theirs and meta.get("params") else None,
            "val_loss": meta.get("val_loss"),
            "steps": meta.get("steps"),
            "tokens_seen": meta.get("tokens_seen"),
            "tokens_per_s": meta.get("tokens_per_s"),
            "weights_sha256": str(meta.get("weights_sha256", ""))[:12] + "…",
        })
    return rows


def section_setup(doc: Document, data: ReportInputs, seed: dict) -> None:
    doc.add("h2", "Setup: models and noise floor")
    rows = model_rows(data, seed)
    left: list[tuple] = []
    if rows:
        full = doc.full_table("models", "The models: training and checkpoints", pd.DataFrame(rows).assign(
            precision=[m.get("precision") for m in data.metas.values()],
            train_seconds=[m.get("train_seconds") for m in data.metas.values()]))
        doc.add("table", pd.DataFrame(rows).drop(columns=["tokens_seen"]),
                "The three models (ours) with the seed page's parameter counts beside them", full)
        differences = [r for r in rows if r["difference"]]
        if differences:
            left.append(("note", "; ".join(
                f"{r['model']} has {fmt(r['params'])} parameters against the seed page's "
                f"{fmt(r[SEED_PARAMS])}: a difference of {fmt(abs(r['difference']))}" for r in differences)
                + ". Ours is what this architecture gives; it is reported as measured, not adjusted. The seed page's "
                f"target ended at validation loss {seed.get('model', {}).get('val_loss')} (their model, their machine, "
                "their training budget)."))
    curves = ("figure", "training_curves", FIGURES["training_curves"].title)
    doc.add("pair", [*left, noise_floor_block(data, seed)], [curves])


def noise_floor_block(data: ReportInputs, seed: dict) -> tuple:
    nf = data.table("noise_floor")
    if nf is None:
        return ("p", "MISSING: results/noise_floor.parquet.")
    snf = seed.get("noise_floor", {})
    return (
        "p",
        f"Noise floor: {fmt(nf['floor'].iloc[0])} nats ({nf['floor_source'].iloc[0]}; measured "
        f"{fmt(nf['sigmas'].iloc[0])} σ = {fmt(nf['floor_measured'].iloc[0])} over {len(nf)} runs that differ "
        f"only in seed, std {fmt(nf['std'].iloc[0])}, range {fmt(nf['range'].iloc[0])}). The seed page's "
        f"floor: {snf.get('floor')} ({snf.get('sigmas')} σ over their {snf.get('runs')} runs, std {snf.get('std')}, "
        f"range {snf.get('range')}). A difference below the floor is not a finding. The reruns and the corpus "
        "statistics are in the appendix."
        + (f" Unreliable floor: {nf['floor_reliability_note'].iloc[0]}."
           if "floor_reliable" in nf.columns and not bool(nf["floor_reliable"].iloc[0]) else ""),
    )
