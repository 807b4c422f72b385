"""The roofline anchor description (config/anchor-model.json): reading and checking it, torch-free.

The workflow checks the anchor when it is parsed (inferlab/jobs/configcheck.py); the roofline job reads
it again through the same function, so both name the file when it is missing or malformed.
"""

from __future__ import annotations

import json
from pathlib import Path

ANCHOR_ARCH_FIELDS = ("n_layer", "d_model", "n_head", "n_kv_head", "head_dim", "ffn_hidden", "ffn_kind",
                      "vocab_size", "tied_embeddings")
# Weight matrices per FFN: SwiGLU has gate, up and down; a plain GELU MLP has up and down.
FFN_MATRICES = {"swiglu": 3, "gelu": 2}
_SECTIONS = {
    "architecture": ANCHOR_ARCH_FIELDS,
    "weights": ("bytes_per_param",),
    "kv_cache": ("bytes_per_element",),
    "hardware": ("name", "memory_bandwidth_bytes_per_s", "peak_flops_per_s"),
}


def _require(section, fields, where: str) -> None:
    if not isinstance(section, dict):
        raise ValueError(f"anchor {where}: expected a JSON object, got {type(section).__name__}")
    missing = [f for f in fields if f not in section]
    if missing:
        raise ValueError(f"anchor {where}: missing field(s) {missing}")


def validate_anchor(anchor: dict) -> None:
    _require(anchor, ("name", *_SECTIONS), "description")
    for section, fields in _SECTIONS.items():
        _require(anchor[section], fields, section)
    if anchor["architecture"]["ffn_kind"] not in FFN_MATRICES:
        raise ValueError(f"anchor architecture.ffn_kind: {anchor['architecture']['ffn_kind']!r} is not one of "
                         f"{sorted(FFN_MATRICES)}")


def load_anchor(path: str | Path) -> dict:
    """The parsed, checked anchor; every error names the file."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise ValueError(f"anchor file {path} {what}")
    try:
        anchor = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"anchor file {path} is not valid JSON: {err}") from err
    try:
        validate_anchor(anchor)
    except ValueError as err:
        raise ValueError(f"anchor file {path}: {err}") from err
    return anchor
