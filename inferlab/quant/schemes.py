"""The quantization scheme table: one row per scheme, torch-free.

The workflow imports it at parse time (quant.smk asks SCHEMES[s].method which jobs calibrate);
quant.py re-exports it beside the grids and methods. Storage conventions are in quant.py's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

SCALE_BITS = 16  # one 16-bit float per scale
# How a scheme's speed cell reads when it has no low-bit kernel: the bench writes it, the choice
# sentence counts it.
QUALITY_ONLY = "quality only"



@dataclass(frozen=True)
class Scheme:
    name: str
    method: str              # key of METHODS: "rtn", "gptq" or "bf16"
    bits: int                # nominal bits per weight; bf16 counts as 16
    granularity: str         # "tensor", "channel", "group" or "none" (bf16)
    symmetric: bool
    group_size: int | None = None
    kernel: str | None = None  # key of KERNELS for the speed measurement; None = quality only

    @property
    def simplicity(self) -> tuple[int, int, int]:
        """Tie-break order: per-tensor < per-channel < group < GPTQ, symmetric < asymmetric."""
        return (METHOD_RANK[self.method], GRANULARITY_RANK[self.granularity], int(not self.symmetric))

    def storage_bits(self, n: int, k: int) -> int:
        """Bits to store one (N, K) weight: codes, 16-bit scales and b-bit zero points."""
        grids = GRID_COUNT[self.granularity](n, k, self.group_size)
        zero_bits = 0 if self.symmetric else self.bits
        return n * k * self.bits + grids * (SCALE_BITS + zero_bits)


METHOD_RANK = {"bf16": 0, "rtn": 0, "gptq": 1}
GRANULARITY_RANK = {"none": 0, "tensor": 0, "channel": 1, "group": 2}
GRID_COUNT: dict[str, Callable[[int, int, int | None], int]] = {
    "none": lambda n, k, g: 0,
    "tensor": lambda n, k, g: 1,
    "channel": lambda n, k, g: n,
    "group": lambda n, k, g: n * (k // min(g, k)),
}

# name suffix -> (method, granularity, symmetric, group size); GPTQ is per-channel asymmetric.
_LAYOUTS: dict[str, tuple[str, str, bool, int | None]] = {
    "per_tensor_sym": ("rtn", "tensor", True, None),
    "per_channel_sym": ("rtn", "channel", True, None),
    "per_channel_asym": ("rtn", "channel", False, None),
    "g128_sym": ("rtn", "group", True, 128),
    "g64_sym": ("rtn", "group", True, 64),
    "g32_sym": ("rtn", "group", True, 32),
    "gptq": ("gptq", "channel", False, None),
}


INT4_KERNEL_GROUPS = (256, 128, 64, 32)  # group sizes aten's CPU int4 kernel accepts

# Kernel name -> can it run this scheme's integer layout? In order: the first match is the
# scheme's kernel. quant_kernels.KERNELS builds the modules for exactly these names.
KERNEL_SUPPORT: dict[str, Callable[[Scheme], bool]] = {
    "int8_weight_only": lambda s: s.bits == 8 and s.granularity in ("tensor", "channel"),
    "int4_groupwise": lambda s: s.bits == 4 and (s.group_size is None or s.group_size in INT4_KERNEL_GROUPS),
    "bf16_matmul": lambda s: s.method == "bf16",
}


def _kernel_for(scheme: Scheme) -> str | None:
    """The first kernel that can run this scheme's integer layout, if any."""
    return next((name for name, supports in KERNEL_SUPPORT.items() if supports(scheme)), None)


def _build_schemes() -> dict[str, Scheme]:
    table = {f"int{bits}_{suffix}": Scheme(f"int{bits}_{suffix}", method, bits, gran, sym, group)
             for bits in (8, 4, 3)
             for suffix, (method, gran, sym, group) in _LAYOUTS.items()}
    table["bf16"] = Scheme("bf16", "bf16", 16, "none", True)
    return {name: replace(s, kernel=_kernel_for(s)) for name, s in table.items()}


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown quantization scheme {name!r}; known: {sorted(SCHEMES)}") from None



def effective_bits_per_weight(scheme: Scheme, shapes: list[tuple[int, int]]) -> float:
    """Stored bits / quantised weights over all layers, scales and zero points included."""
    return sum(scheme.storage_bits(n, k) for n, k in shapes) / sum(n * k for n, k in shapes)


SCHEMES: dict[str, Scheme] = _build_schemes()
