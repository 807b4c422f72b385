"""What inductor generated for a graph, read from its output code: the kernels one call launches,
which of them are the C++ GEMM template, and the calls left to libraries. The compiled engine
stamps these counts per graph (``engines.compiled.kernels``), so a reader can see that the
template engaged without trusting a flag."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

_KERNEL_DEF = re.compile(r"^(cpp_fused_\w+) = async_compile\.cpp_pybinding\(", re.M)
_KERNEL_LAUNCH = re.compile(r"^\s+(cpp_fused_\w+)\(", re.M)
# library calls: inductor's extern kernels (ATen/MKL GEMM) and ops it left to ATen, MKL or oneDNN,
# from Python or (cpp_wrapper) through the AOTI shim
_ATEN_CALL = re.compile(r"\b(?:extern_kernels\.\w+|torch\.ops\.(?!inductor\.)\w+\.\w+)(?:\.default)?\(")
_ATEN_CALL_CPP = re.compile(r"\baoti_torch_(?:cpu_\w+|call_dispatcher|proxy_executor_call_function)\(")
_CPP_WRAPPER_BODY = ("void inductor_entry_impl(", "} // inductor_entry_impl")


def _graph_launches(source: str) -> tuple[list[str], set[str], int]:
    """One graph's generated code: the kernels one call launches, in order, which of them are the
    C++ GEMM template (a micro-GEMM over packed weights), and how many library calls it makes.
    Reads either form inductor writes: a Python wrapper calling each kernel through a binding, or
    (cpp_wrapper) one C++ source whose inductor_entry_impl calls them."""
    if _CPP_WRAPPER_BODY[0] in source:
        body = source[source.find(_CPP_WRAPPER_BODY[0]):source.find(_CPP_WRAPPER_BODY[1])]
        called = _KERNEL_LAUNCH.findall(body)
        return called, {name for name in called if f"{name}_micro_gemm" in source}, len(_ATEN_CALL_CPP.findall(body))
    call_body = source[source.find("def call("):]
    bodies = dict(zip(_KERNEL_DEF.findall(source), _KERNEL_DEF.split(source)[2::2], strict=True))
    called = _KERNEL_LAUNCH.findall(call_body)
    return called, {name for name in called if "kernel_micro_gemm" in bodies.get(name, "")}, \
        len(_ATEN_CALL.findall(call_body))


def count_kernels(generated: Sequence[ModuleType]) -> dict[str, int]:
    """What inductor generated for one graph, read from its output code: kernel launches per
    call, how many of them are its C++ GEMM template, and the calls left to libraries (extern
    kernels such as MKL's GEMM, SDPA, oneDNN's packed linear)."""
    launches = gemm = aten = 0
    for module in generated:
        called, template, library = _graph_launches(Path(module.__file__).read_text())
        launches += len(called)
        gemm += sum(name in template for name in called)
        aten += library
    return {"kernel_launches": launches, "cpp_gemm_template": gemm, "aten_calls": aten}
