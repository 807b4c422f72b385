"""Integer grids for one weight matrix: the stored form, round-to-nearest, and the grid of a row.

Shared by the round-to-nearest methods (quant.py) and GPTQ (gptq.py); it imports neither, so
the two never import each other. Conventions are in quant.py's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# --------------------------------------------------------------------------------------------
# Integer representation of one weight matrix


@dataclass
class QuantizedWeight:
    """Codes, scales and zero codes of one (N, K) weight; rows are output channels."""

    codes: torch.Tensor   # (N, K) int32 in [0, 2^bits - 1]
    scale: torch.Tensor   # (N, G) float32; G = K // group_size
    zero: torch.Tensor    # (N, G) float32 holding integer zero codes
    bits: int
    group_size: int       # input columns sharing one (scale, zero); K for per-channel and per-tensor

    def dequantize(self) -> torch.Tensor:
        scale = self.scale.repeat_interleave(self.group_size, dim=1)  # (N, K)
        zero = self.zero.repeat_interleave(self.group_size, dim=1)
        return (self.codes.float() - zero) * scale


def grid_params(w: torch.Tensor, bits: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One grid per row of w (R, C): returns scale (R, 1) and zero code (R, 1)."""
    maxq = 2 ** bits - 1
    # The grid always contains 0, so exact zeros (e.g. dead columns) stay exact.
    lo = w.amin(dim=1, keepdim=True).clamp(max=0.0)
    hi = w.amax(dim=1, keepdim=True).clamp(min=0.0)
    if symmetric:
        amax = torch.maximum(-lo, hi)
        scale = 2.0 * amax / maxq
        zero = torch.full_like(scale, float((maxq + 1) // 2))
    else:
        scale = (hi - lo) / maxq
        zero = torch.round(-lo / scale.clamp(min=torch.finfo(scale.dtype).tiny))
    # An all-zero row has no range; any positive scale represents it exactly.
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale, zero.clamp(0, maxq)


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Round-to-nearest codes of w under a grid broadcastable to it."""
    return torch.clamp(torch.round(w / scale) + zero, 0, 2 ** bits - 1)


# How each granularity groups a (N, K) weight: a function returning (rows of the grid view,
# columns per grid). One grid is found per row of w.reshape(rows, columns).
GROUPINGS: dict[str, Callable[[int, int, int | None], tuple[int, int]]] = {
    "tensor": lambda n, k, g: (1, n * k),
    "channel": lambda n, k, g: (n, k),
    "group": lambda n, k, g: (n * k // g, g),
}


def rtn_quantize(weight: torch.Tensor, bits: int, granularity: str, symmetric: bool,
                 group_size: int | None = None) -> QuantizedWeight:
    """Round-to-nearest quantisation of a (N, K) weight at the given granularity."""
    w = weight.detach().float()
    n, k = w.shape
    if granularity == "group":
        group_size = min(group_size, k)  # a group wider than the row is the row (as in the reference)
    if granularity == "group" and k % group_size:
        raise ValueError(f"group size {group_size} does not divide the {k} input columns")
    rows, cols = GROUPINGS[granularity](n, k, group_size)
    view = w.reshape(rows, cols)
    scale, zero = grid_params(view, bits, symmetric)  # (rows, 1)
    codes = quantize_codes(view, scale, zero, bits).reshape(n, k)
    # Express every granularity as per-row groups of `group` columns: per-tensor repeats the one
    # grid on every row, per-channel is a single group of K.
    group = group_size if granularity == "group" else k
    groups = k // group
    scale = scale.reshape(-1, 1).expand(-1, n * groups // rows).reshape(n, groups)
    zero = zero.reshape(-1, 1).expand(-1, n * groups // rows).reshape(n, groups)
    return QuantizedWeight(codes.to(torch.int32), scale.contiguous(), zero.contiguous(), bits, group)
