"""Weight quantisation: the scheme table, the grids and the methods (round-to-nearest, bf16, GPTQ).

Every scheme is one row of ``SCHEMES``; nothing below branches on a scheme's name. A scheme
quantises every Linear inside the transformer blocks; the tied embedding (also the output head)
stays fp32 and is reported as such.

Conventions (those of the GPTQ reference code):
- a weight is stored as unsigned integer codes q in [0, 2^b - 1] with a scale s and a zero code z,
  and dequantises to (q - z) * s;
- symmetric grids fix z = 2^(b-1) and s = 2 * max|w| / (2^b - 1), so all 2^b levels are used
  (levels -2^(b-1) .. 2^(b-1)-1); nothing but the scale is stored;
- asymmetric grids span [min(w, 0), max(w, 0)] with s = (max - min) / (2^b - 1) and an integer
  zero code z = round(-min / s), which is stored;
- the evaluation uses the dequantised fp32 weights, so quality numbers do not depend on a kernel.

Storage assumed by the effective-bits column: each scale is a 16-bit float (fp16 in a file; the
CPU kernels take bf16, also 16 bits) and each zero point is an integer of the weight's own width
(b bits, as GPTQ packs them). Symmetric schemes store no zero point. bf16 weights cost 16 bits.

Where the rest lives (one concern per file, as in gpt-fast): the torch-free scheme table in
schemes.py, the grids of one matrix in grids.py (shared with gptq.py, so quant and gptq never
import each other), the low-bit Linear kernels in quant_kernels.py, quality against fp32 in
evaluation.py and decode timing in quant_bench.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TextIO

import torch
from torch import nn

from inferlab.quant.gptq import gptq_quantize_model
from inferlab.quant.grids import GROUPINGS, QuantizedWeight, grid_params, quantize_codes, rtn_quantize
from inferlab.quant.schemes import (
    SCALE_BITS,
    SCHEMES,
    Scheme,
    effective_bits_per_weight,
    get_scheme,
)

__all__ = ["EMBEDDING_NOTE", "GROUPINGS", "METHODS", "SCALE_BITS", "SCHEMES", "QuantizedWeight", "Scheme",
           "effective_bits_per_weight", "get_scheme", "grid_params", "quantize_codes", "quantize_model",
           "quantized_linears", "rtn_quantize"]

EMBEDDING_NOTE = "tok_emb (tied with the output head) kept in fp32, not quantised"


def quantized_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """Every Linear inside the transformer blocks, in execution order (the scope of all schemes)."""
    return [(f"blocks.{i}.{name}", mod) for i, block in enumerate(model.blocks)
            for name, mod in block.named_modules() if isinstance(mod, nn.Linear)]



# --------------------------------------------------------------------------------------------
# Methods: each quantises the model's block Linears in place (dequantised fp32 weights) and
# returns the integer form per layer (None where there is none, i.e. bf16).

QuantResult = dict[str, QuantizedWeight | None]


@torch.no_grad()
def _rtn_method(model: nn.Module, scheme: Scheme, **_) -> QuantResult:
    out: QuantResult = {}
    for name, linear in quantized_linears(model):
        qw = rtn_quantize(linear.weight, scheme.bits, scheme.granularity, scheme.symmetric, scheme.group_size)
        linear.weight.copy_(qw.dequantize())
        out[name] = qw
    return out


@torch.no_grad()
def _bf16_method(model: nn.Module, scheme: Scheme, **_) -> QuantResult:
    out: QuantResult = {}
    for name, linear in quantized_linears(model):
        linear.weight.copy_(linear.weight.to(torch.bfloat16).float())
        out[name] = None
    return out


def _gptq_method(model: nn.Module, scheme: Scheme, *, calibration: torch.Tensor | None = None,
                 damp: float, block_size: int, progress_file: TextIO | None = None) -> QuantResult:
    """GPTQ; damp and block_size have no defaults here: they come from config (quantization.gptq)."""
    if calibration is None:
        raise ValueError(f"{scheme.name}: GPTQ needs calibration windows of training text")
    return gptq_quantize_model(model, calibration, scheme.bits, scheme.symmetric, scheme.group_size,
                               damp=damp, block_size=block_size, progress_file=progress_file)


METHODS: dict[str, Callable[..., QuantResult]] = {
    "rtn": _rtn_method,
    "bf16": _bf16_method,
    "gptq": _gptq_method,
}


def quantize_model(model: nn.Module, scheme_name: str, **method_options) -> tuple[nn.Module, QuantResult]:
    """A quantised deep copy of model (dequantised fp32 weights) and the per-layer integer form.

    method_options go to the method (GPTQ: calibration, damp, block_size, progress_file).
    """
    scheme = get_scheme(scheme_name)
    quantised = copy.deepcopy(model).eval()
    return quantised, METHODS[scheme.method](quantised, scheme, **method_options)

