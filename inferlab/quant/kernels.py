"""Low-bit Linear kernels, used only for the speed measurement, and the model that runs on them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from inferlab.quant.grids import QuantizedWeight
from inferlab.quant.methods import QuantResult, get_scheme, quantized_linears
from inferlab.quant.schemes import INT4_KERNEL_GROUPS, KERNEL_SUPPORT, Scheme

# The CPU kernels' fast paths take bf16
# activations, so each wrapper casts its input to compute_dtype and returns float32; with
# compute_dtype=float32 they reproduce the dequantised matmul to fp32 rounding (tested).


class Int8WeightOnlyLinear(nn.Module):
    """aten._weight_int8pack_mm: int8 weight (N, K) times per-row scales.

    Asymmetric rows (zero code z != 128) are handled exactly with one extra row-sum:
    w = (q - z) s = (q - 128) s + (128 - z) s, so y = int8mm(x, q - 128, s) + sum(x) * (128 - z) s.
    """

    def __init__(self, qw: QuantizedWeight, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if qw.bits != 8 or qw.scale.size(1) != 1:
            raise ValueError("the int8 kernel needs 8-bit codes with one scale per output row")
        self.compute_dtype = compute_dtype
        self.register_buffer("weight", (qw.codes - 128).to(torch.int8))  # (N, K)
        self.register_buffer("scales", qw.scale[:, 0].to(compute_dtype))  # (N,)
        offset = (128.0 - qw.zero[:, 0]) * qw.scale[:, 0]  # (N,)
        self.register_buffer("offset", offset if bool(offset.ne(0).any()) else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        y = torch.ops.aten._weight_int8pack_mm(x2.to(self.compute_dtype), self.weight, self.scales).float()
        if self.offset is not None:
            y = y + x2.float().sum(-1, keepdim=True) * self.offset
        return y.reshape(*shape[:-1], -1)


class Int4GroupwiseLinear(nn.Module):
    """aten._weight_int4pack_mm_for_cpu: 4-bit codes packed two per byte, (scale, zero) per group.

    The kernel dequantises as (q - 8) * s + zf, so our (q - z) * s needs zf = (8 - z) * s. Per-channel
    and per-tensor grids are passed as the kernel's largest group size with the scale repeated.
    """

    def __init__(self, qw: QuantizedWeight, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        n, k = qw.codes.shape
        if qw.bits != 4:
            raise ValueError("the int4 kernel needs 4-bit codes")
        kernel_group = next((g for g in INT4_KERNEL_GROUPS if qw.group_size % g == 0 and k % g == 0), None)
        if kernel_group is None or n % 8:
            raise ValueError(f"int4 kernel cannot take a ({n}, {k}) weight with groups of {qw.group_size}")
        inner_k_tiles = next(t for t in (8, 4, 2) if k % (16 * t) == 0)
        self.compute_dtype, self.group, self.out_features = compute_dtype, kernel_group, n
        self.register_buffer("weight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            qw.codes.to(torch.int32).contiguous(), inner_k_tiles))
        repeat = qw.group_size // kernel_group
        scale = qw.scale.repeat_interleave(repeat, dim=1)                   # (N, K / group)
        zero_float = (8.0 - qw.zero.repeat_interleave(repeat, dim=1)) * scale
        self.register_buffer("scales_and_zeros", torch.stack([scale, zero_float], dim=-1)
                             .transpose(0, 1).contiguous().to(compute_dtype))  # (K / group, N, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]).to(self.compute_dtype), self.weight, self.group, self.scales_and_zeros)
        return y.float().reshape(*shape[:-1], self.out_features)


class Bf16Linear(nn.Module):
    """bf16 weights and activations through the ordinary (oneDNN) matmul; output back in fp32."""

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.compute_dtype = compute_dtype
        self.register_buffer("weight", weight.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.compute_dtype), self.weight.to(self.compute_dtype)).float()


@dataclass(frozen=True)
class Kernel:
    name: str
    op: str                                   # aten op whose presence makes the kernel available
    description: str
    supports: Callable[[Scheme], bool]        # can this scheme's integer layout run on it?
    build: Callable[[nn.Linear, QuantizedWeight | None, torch.dtype], nn.Module]
    devices: tuple[str, ...] = ("cpu",)

    def available(self, device: str) -> bool:
        return device in self.devices and hasattr(torch.ops.aten, self.op)


KERNELS: dict[str, Kernel] = {
    "int8_weight_only": Kernel(
        "int8_weight_only", "_weight_int8pack_mm",
        "aten._weight_int8pack_mm (int8 weight, one scale per output row; asym via a row-sum term)",
        supports=KERNEL_SUPPORT["int8_weight_only"],
        build=lambda lin, qw, dt: Int8WeightOnlyLinear(qw, dt)),
    "int4_groupwise": Kernel(
        "int4_groupwise", "_weight_int4pack_mm_for_cpu",
        "aten._weight_int4pack_mm_for_cpu (4-bit packed weight, bf16 scale and zero per group)",
        supports=KERNEL_SUPPORT["int4_groupwise"],
        build=lambda lin, qw, dt: Int4GroupwiseLinear(qw, dt)),
    "bf16_matmul": Kernel(
        "bf16_matmul", "mm", "bf16 weights and activations through torch's matmul (oneDNN on CPU)",
        supports=KERNEL_SUPPORT["bf16_matmul"],
        build=lambda lin, qw, dt: Bf16Linear(lin.weight, dt)),
}

def kernel_model(quantised: nn.Module, result: QuantResult, scheme_name: str,
                 compute_dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A copy of the dequantised model whose block Linears run on the scheme's low-bit kernel."""
    scheme = get_scheme(scheme_name)
    if scheme.kernel is None:
        raise ValueError(f"{scheme_name} has no low-bit kernel")
    kern = KERNELS[scheme.kernel]
    fast = copy.deepcopy(quantised).eval()
    for name, linear in quantized_linears(fast):
        parent_name, _, child = name.rpartition(".")
        setattr(fast.get_submodule(parent_name), child, kern.build(linear, result[name], compute_dtype))
    return fast


@torch.no_grad()
def kernel_max_rel_error(quantised: nn.Module, fast: nn.Module, seed: int = 0) -> float:
    """Largest relative error of any kernel Linear against the dequantised matmul on random inputs."""
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for name, linear in quantized_linears(quantised):
        x = torch.randn(4, linear.in_features, generator=generator)
        ref = linear(x)
        worst = max(worst, ((fast.get_submodule(name)(x) - ref).abs().max() / ref.abs().max()).item())
    return worst
