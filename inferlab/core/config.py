"""The model's shape (GPTConfig) and the sizes that follow from it, apart from the model so jobs
that only read a checkpoint's meta.json need no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 2112
    d_model: int = 256
    n_layer: int = 4
    head_dim: int = 64
    max_seq_len: int = 512
    mlp_ratio: int = 4
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def n_head(self) -> int:
        # d=64 gives one head of 64; wider models keep heads of head_dim.
        return max(1, self.d_model // self.head_dim)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> GPTConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown GPTConfig fields: {sorted(unknown)}")
        return cls(**values)


def dtype_bytes(dtype: torch.dtype | None = None) -> int:
    """Bytes per element of dtype; None is fp32, the dtype of the checkpoints and the timed model."""
    if dtype is None:
        return 4
    import torch  # a dtype was passed, so the caller has torch already

    return torch.empty((), dtype=dtype).element_size()


def kv_bytes_per_token(config: GPTConfig, dtype: torch.dtype | None = None) -> int:
    """Theoretical KV-cache size per token: K and V, every layer, d_model wide."""
    return 2 * config.n_layer * config.d_model * dtype_bytes(dtype)
