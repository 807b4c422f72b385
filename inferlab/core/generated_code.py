"""What inductor generated for a package, read from its C++ source: the kernels one call launches,
which of them are the C++ GEMM template, and the calls left to libraries. The compile rules record
these counts per package, so a reader can see that the template engaged without trusting a flag."""

from __future__ import annotations

import re
from collections.abc import Sequence

_KERNEL_LAUNCH = re.compile(r"^\s+(cpp_fused_\w+)\(", re.M)
# library calls through the AOTI shim: ATen/MKL GEMM, SDPA, ops inductor left to ATen or oneDNN
_LIBRARY_CALL = re.compile(r"\baoti_torch_(?:cpu_\w+|call_dispatcher|proxy_executor_call_function)\(")
_RUN_BODY = ("void AOTInductorModel::run_impl(", "} // AOTInductorModel::run_impl")


def count_kernels(sources: Sequence[str]) -> dict[str, int]:
    """One package's kernel launches per call (in its run_impl), how many of them are the C++ GEMM
    template (a kernel with a micro-GEMM of its own), and its library calls."""
    source = "\n".join(sources)
    start = source.find(_RUN_BODY[0])
    body = source[start:source.find(_RUN_BODY[1], start)] if start >= 0 else ""
    called = _KERNEL_LAUNCH.findall(body)
    template = {name for name in called if f"{name}_micro_gemm" in source}
    return {"kernel_launches": len(called), "cpp_gemm_template": sum(name in template for name in called),
            "aten_calls": len(_LIBRARY_CALL.findall(body))}
