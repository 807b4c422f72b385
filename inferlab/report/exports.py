"""The data exports named by the seed page: c13-inference.json and precomputed.json.

Schemas (documented in docs/report.md, "Export schemas"): every table is a list of row objects with the
Parquet table's own columns; NaN becomes null; a section whose table is missing is null.
"""

from __future__ import annotations

import json
import math

from inferlab import experiments
from inferlab.report.inputs import ReportInputs
from inferlab.training.spec import MODEL_FIELDS

INFERENCE_SCHEMA = "inferlab/c13-inference@1"
PRECOMPUTED_SCHEMA = "inferlab/precomputed@1"


def _rows(data: ReportInputs, key: str):
    """A table's rows as JSON-ready objects (NaN -> None, numpy scalars -> Python numbers), or a JSON
    input as it is (the sampling logits)."""
    if key not in data.tables:
        return data.json.get(key)
    if data.table(key) is None:
        return None
    rows = json.loads(data.table(key).to_json(orient="records", force_ascii=False))
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


def _head(file: str, stamps: dict, generated: dict) -> dict:
    """stamps: every milestone's; the file carries those of the experiments it exports."""
    return {
        "generated": generated,
        "stamps": {spec.milestone: stamps[spec.milestone] for spec in experiments.SPECS
                   if spec.milestone and any(export.file == file for export in spec.exports)},
        "note": "our numbers, measured by this workflow; the seed page's published figures are in "
        "config/seed-reference.json and are not part of this file",
    }


def _sections(data: ReportInputs, file: str) -> dict:
    """Every spec's export block for `file`, in the specs' order."""
    return {export.section: (_rows(data, export.tables) if isinstance(export.tables, str)
                             else {name: _rows(data, key) for name, key in export.tables.items()})
            for spec in experiments.SPECS for export in spec.exports if export.file == file}


def inference_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """KV-cache speeds and the sampling distributions / repetition (the seed's c13-inference.json)."""
    return {"schema": INFERENCE_SCHEMA, **_head("inference", stamps, generated), **_sections(data, "inference")}


def precomputed_export(data: ReportInputs, stamps: dict, generated: dict) -> dict:
    """The models, the noise floor, speculative sampling and quantization (the seed's precomputed.json)."""
    models = {name: {k: meta.get(k) for k in MODEL_FIELDS} for name, meta in data.metas.items()}
    return {"schema": PRECOMPUTED_SCHEMA, **_head("precomputed", stamps, generated), "models": models,
            **_sections(data, "precomputed")}
