"""The data exports named by the seed page: c13-inference.json and precomputed.json.

Schemas (documented in docs/report.md, "Export schemas"): every table is a list of row objects with the
Parquet table's own columns; NaN becomes null; a section whose table is missing is null.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from inferlab.report.inputs import ReportInputs

INFERENCE_SCHEMA = "inferlab/c13-inference@1"
PRECOMPUTED_SCHEMA = "inferlab/precomputed@1"


def records(df: pd.DataFrame | None, drop: tuple[str, ...] = ()) -> list[dict] | None:
    """JSON-ready rows; NaN -> None, numpy scalars -> Python numbers."""
    if df is None:
        return None
    out = json.loads(df.drop(columns=[c for c in drop if c in df.columns]).to_json(orient="records", force_ascii=False))
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in out]


def _section(data: ReportInputs, keys: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    return {name: records(data.table(key), drop) for name, key in keys.items()}


def _head(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    return {
        "generated": generated,
        "stamps": stamps,
        "note": "our numbers, measured by this workflow; the seed page's published figures are in "
        "config/seed-reference.json and are not part of this file",
    }


def inference_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """KV-cache speeds and the sampling distributions / repetition (the seed's c13-inference.json)."""
    logits = data.json.get("sp_logits")
    return {
        "schema": INFERENCE_SCHEMA,
        **_head(data, stamps, generated),
        "kvcache": _section(
            data,
            {
                "timings": "kv_timings",
                "summary": "kv_summary",
                "fit": "kv_fit",
                "profile": "kv_profile",
                "roofline": "roofline",
            },
        ),
        "sampling": {
            **_section(
                data, {"distribution": "sp_distribution", "repetition": "sp_repetition", "default": "sp_default",
                       "distance": "sp_distance"}
            ),
            "logits": logits,  # {"prompt","model","checkpoint_sha256","vocab":[V],"logits":[V], ...}
        },
    }


def precomputed_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """Speculative sampling and quantization results (the seed's precomputed.json)."""
    return {
        "schema": PRECOMPUTED_SCHEMA,
        **_head(data, stamps, generated),
        "models": {
            name: {
                k: meta.get(k)
                for k in (
                    "params",
                    "val_loss",
                    "weights_sha256",
                    "tokens_per_s",
                    "train_seconds",
                    "steps",
                    "tokens_seen",
                    "precision",
                )
            }
            for name, meta in data.metas.items()
        },
        "noise_floor": records(data.table("noise_floor")),
        "speculative": _section(
            data, {"summary": "spec_summary", "greedy_identity": "spec_identity", "best": "spec_best"}
        ),
        "quantization": _section(data, {"summary": "quant_summary", "choice": "quant_choice"}),
    }
