"""A checkpoint's meta.json: reading it and the model stamp taken from it, without torch (the
aggregation jobs read it and never load weights)."""

from __future__ import annotations

import json
from pathlib import Path

META_NAME = "meta.json"


class CheckpointError(RuntimeError):
    pass


# Fields every reader relies on; save_checkpoint always writes them.
REQUIRED_META = ("name", "model_config", "params", "weights_sha256", "val_loss")


def _recovery(path: Path) -> str:
    return f"rerun its training with: snakemake --cores all --forcerun {path}"


def read_meta(directory: str | Path) -> dict:
    """meta.json, or a CheckpointError naming the file and the command that rebuilds it.

    A checkpoint whose meta.json is absent, unreadable or incomplete is corrupt, never "missing".
    """
    path = Path(directory) / META_NAME
    if not path.exists():
        raise CheckpointError(f"{path}: no meta.json, so this checkpoint is incomplete (interrupted training?); "
                              f"{_recovery(path)}")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: unreadable ({err}); {_recovery(path)}") from err
    missing = [key for key in REQUIRED_META if not isinstance(meta, dict) or key not in meta]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {missing}; {_recovery(path)}")
    return meta


def model_stamp(meta: dict, name: str) -> dict:
    """The 'model' stamp of every conclusion."""
    return {"model": name, "params": meta["params"], "checkpoint_sha256": meta["weights_sha256"],
            "val_loss": meta["val_loss"]}
