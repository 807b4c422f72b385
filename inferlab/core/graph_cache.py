"""Frozen graphs that inductor's on-disk graph cache can keep, keyed by the weights frozen into them.

Every job of the workflow and every test process used to compile each of its graphs from
nothing: inductor bypasses its FX graph cache for a frozen graph whose constants include
MKL-packed weights ("mkldnn tensors unpickleable"), and its CPU weight-pack pass packs every
frozen linear that way, even when the C++ GEMM template then replaces the packed copy with its
own (autotuning prunes it). So:

1. ``pin_cacheable_freezing`` initialises inductor's freezing patterns once per process with
   oneDNN switched off, so that the weight-pack pass is never registered. The template still
   packs each weight itself; a linear outside it stays an ATen GEMM on the plain weight.
2. ``WeightsKey`` adds the weights themselves to the cache key. Inductor keys a frozen
   parameter by its shape and dtype only, yet the template's packed copy of it is stored with
   the graph by value: without this, a second model of the same shape loaded the first one's
   packed weights and returned its logits (measured: max |logit difference| 1.01 on a two-layer
   d=64 model). Its uuid, a digest of every parameter and buffer, enters inductor's key as any
   custom post-grad pass's does, and the pass itself does nothing to the graph.

Loading a graph from the cache costs a fraction of compiling it (docs/engines.md).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.fx_passes import freezing_patterns


def pin_cacheable_freezing() -> bool:
    """Registers inductor's freezing patterns without the oneDNN/MKL weight-pack pass, once per
    process. Returns False when they were already registered by an earlier compile (then frozen
    graphs still compile correctly, but every one bypasses the on-disk cache)."""
    if freezing_patterns.lazy_init.cache_info().currsize:
        return _weight_pack_absent()
    # torch.backends.mkldnn.flags() would also reset its TF32 setting, which warns on a CPU build
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        freezing_patterns.lazy_init()
    finally:
        torch._C._set_mkldnn_enabled(enabled)
    return _weight_pack_absent()


def _weight_pack_absent() -> bool:
    return not any(entry.extra_check.__name__ == "_is_packable_linear"
                   for patterns in freezing_patterns.pass_patterns
                   for entries in patterns.patterns.values() for entry in entries
                   if hasattr(entry, "extra_check"))


def weights_digest(model: nn.Module) -> str:
    """sha256 over every parameter and buffer: name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict(keep_vars=False).items():
        data = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{data.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class WeightsKey(CustomGraphPass):
    """A post-grad pass that leaves the graph as it is; its uuid names the frozen weights."""

    def __init__(self, digests: tuple[str, ...]):
        self.key = hashlib.sha256("+".join(digests).encode()).hexdigest()

    def __call__(self, graph: torch.fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return self.key
