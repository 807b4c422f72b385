"""The model's shape (GPTConfig), apart from the model so jobs that only read a checkpoint's
meta.json need no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
