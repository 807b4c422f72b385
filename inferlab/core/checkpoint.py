"""Checkpoints: safetensors weights plus meta.json. Loading never executes code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from inferlab.core.checkpoint_meta import META_NAME, CheckpointError, read_meta
from inferlab.core.config import GPTConfig
from inferlab.core.model import GPT
from inferlab.jobs.lineage import current_job_lineage, file_sha256

WEIGHTS_NAME = "model.safetensors"


def save_checkpoint(model: GPT, meta: dict, directory: str | Path) -> dict:
    """Weights first, meta.json last: a directory without meta.json is not a checkpoint."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / WEIGHTS_NAME
    tmp_weights = weights.with_name(weights.name + ".tmp")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_weights))
    os.replace(tmp_weights, weights)
    meta = {**meta, "model_config": model.config.to_dict(), "params": model.num_params(),
            "weights_sha256": file_sha256(weights), "lineage": current_job_lineage()}
    tmp_meta = directory / (META_NAME + ".tmp")
    tmp_meta.write_text(json.dumps(meta, indent=2, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp_meta, directory / META_NAME)
    return meta


def load_checkpoint(directory: str | Path, device: str = "cpu",
                    expected_vocab_sha256: str | None = None) -> tuple[GPT, dict]:
    """Verifies the weights' sha256 against meta.json and the shapes against the recorded config."""
    directory = Path(directory)
    meta = read_meta(directory)
    weights = directory / WEIGHTS_NAME
    if not weights.exists():
        raise CheckpointError(f"{weights}: weights file missing")
    actual = file_sha256(weights)
    if actual != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights}: sha256 {actual[:12]}… does not match meta.json "
                              f"({str(meta.get('weights_sha256'))[:12]}…); the file is corrupt or was replaced")
    if expected_vocab_sha256 and meta.get("vocab_sha256") != expected_vocab_sha256:
        raise CheckpointError(f"{directory}: trained with a different vocabulary than the current corpus")
    model = GPT(GPTConfig.from_dict(meta["model_config"]))
    try:
        model.load_state_dict(load_file(str(weights)), strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{weights}: weights do not fit the config in meta.json: {err}") from err
    model.to(device).eval()
    return model, meta


def load_token_ids(path: str | Path) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.load(path, allow_pickle=False).astype("int64"))
