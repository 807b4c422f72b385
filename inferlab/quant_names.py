"""The quantization scheme names, torch-free, so the workflow can check the config at parse time.

inferlab/quant.py builds its scheme table from this grid; nothing else lists the names.
"""

from __future__ import annotations

BITS = (8, 4, 3)

# name suffix -> (method, granularity, symmetric, group size); GPTQ is per-channel asymmetric.
LAYOUTS: dict[str, tuple[str, str, bool, int | None]] = {
    "per_tensor_sym": ("rtn", "tensor", True, None),
    "per_channel_sym": ("rtn", "channel", True, None),
    "per_channel_asym": ("rtn", "channel", False, None),
    "g128_sym": ("rtn", "group", True, 128),
    "g64_sym": ("rtn", "group", True, 64),
    "g32_sym": ("rtn", "group", True, 32),
    "gptq": ("gptq", "channel", False, None),
}

UNQUANTISED = ("bf16",)


def integer_scheme_name(bits: int, suffix: str) -> str:
    return f"int{bits}_{suffix}"


def scheme_names() -> list[str]:
    """Every scheme the table in inferlab/quant.py defines."""
    return [integer_scheme_name(bits, suffix) for bits in BITS for suffix in LAYOUTS] + list(UNQUANTISED)
