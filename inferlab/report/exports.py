"""The data exports named by the seed page: c13-inference.json and precomputed.json.

Schemas (documented in docs/report.md, "Export schemas"): every table is a list of row objects with the
Parquet table's own columns; NaN becomes null; a section whose table is missing is null.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from inferlab import experiments
from inferlab.report.inputs import ReportInputs
from inferlab.training.spec import MODEL_FIELDS

INFERENCE_SCHEMA = "inferlab/c13-inference@1"
PRECOMPUTED_SCHEMA = "inferlab/precomputed@1"


def records(df: pd.DataFrame | None, drop: tuple[str, ...] = ()) -> list[dict] | None:
    """JSON-ready rows; NaN -> None, numpy scalars -> Python numbers."""
    if df is None:
        return None
    out = json.loads(df.drop(columns=[c for c in drop if c in df.columns]).to_json(orient="records", force_ascii=False))
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in out]


def _head(stamps: dict, generated: dict) -> dict:
    return {
        "generated": generated,
        "stamps": stamps,
        "note": "our numbers, measured by this workflow; the seed page's published figures are in "
        "config/seed-reference.json and are not part of this file",
    }


def _rows(data: ReportInputs, key: str):
    """A table's rows, or a JSON input as it is (the sampling logits)."""
    return records(data.table(key)) if key in data.tables else data.json.get(key)


def _sections(data: ReportInputs, file: str) -> dict:
    """Every spec's export block for `file`, in the specs' order."""
    return {export.section: (_rows(data, export.tables) if isinstance(export.tables, str)
                             else {name: _rows(data, key) for name, key in export.tables.items()})
            for spec in experiments.SPECS for export in spec.exports if export.file == file}


def inference_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """KV-cache speeds and the sampling distributions / repetition (the seed's c13-inference.json)."""
    return {"schema": INFERENCE_SCHEMA, **_head(stamps, generated), **_sections(data, "inference")}


def precomputed_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """The models, the noise floor, speculative sampling and quantization (the seed's precomputed.json)."""
    models = {name: {k: meta.get(k) for k in MODEL_FIELDS} for name, meta in data.metas.items()}
    return {"schema": PRECOMPUTED_SCHEMA, **_head(stamps, generated), "models": models,
            **_sections(data, "precomputed")}
