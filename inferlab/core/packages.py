"""Compiled graphs as AOTInductor packages: a function of models and tensors, exported once with
``torch.export``, compiled by ``torch._inductor.aoti_compile_and_package`` into a ``.pt2`` file,
and later loaded and called by the compiled engine (inferlab.core.engine).

A package is a file, so the workflow builds each one in a compile rule and every timing job only
loads (workflow/rules/graphs.smk). Its name says what it runs: the caller's label (the function,
the models' shapes, the row count, the context bucket, k), the first bytes of each model's weights
digest, and a hash of everything else that shapes the graph (the argument layout, every tensor's
shape, stride and dtype, the non-tensor values, the inductor options, the thread count).

What is frozen into a package (the weights, the RoPE tables, the thread count its C++ loops were
blocked for) is recorded in its metadata and checked when it is loaded, so a package of another
checkpoint is refused with both digests named, never run. Every call is checked too: load_package turns
on the input checks AOTInductor generates into every package (RUNTIME_CHECKS), so a tensor of
another shape, stride, dtype or device is refused by the package itself, in C++. Beside each package
a small JSON file keeps what compiling it cost and what it generated (kernel launches per call, read
from its C++ source).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import itertools
import json
import logging
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from inferlab.core.generated_code import count_kernels
from inferlab.jobs.lineage import file_sha256

# The torch release whose AOTInductor this module was written and checked against: its package format,
# its loader's call (loader.run on the flat input tensors) and the generated C++ that
# inferlab.core.generated_code reads. tests/test_engine.py fails on another release, so that an upgrade
# re-reads them before it is trusted.
WRITTEN_FOR_TORCH = "2.13"
PACKAGE_SUFFIX = ".pt2"
RECORD_SUFFIX = ".json"
METADATA_KEY = "inferlab"
# The environment variable the input checks AOTInductor generates into each package read, once, at the
# package's first call: set, every call compares each input's sizes, strides, dtype and device with the
# graph's and raises a RuntimeError naming the first that differs. The engine relies on it to call a package
# with no check in Python (CompiledSession.step).
RUNTIME_CHECKS = "AOTI_RUNTIME_CHECK_INPUTS"
# what a compile rule leaves, with the reason, when it could not compile: its timing jobs then run eager
UNAVAILABLE = "unavailable.txt"


log = logging.getLogger(__name__)


class PackageError(RuntimeError):
    """A package that is missing, damaged, or built from something other than this call's models."""


def weights_digest(model: nn.Module) -> str:
    """sha256 over every parameter and buffer a graph freezes (name, dtype, shape, bytes). The eager
    path's KV cache buffers are left out: no compiled graph reads them."""
    digest = hashlib.sha256()
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for name, tensor in sorted(tensors, key=lambda item: item[0]):
        if name.endswith(("k_cache", "v_cache")):
            continue
        data = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{data.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def flatten_arguments(value, leaves: list, nesting: list) -> None:
    """The leaves of nested lists and tuples into `leaves`, their types and lengths into `nesting`."""
    if isinstance(value, (list, tuple)):
        nesting.append((type(value).__name__, len(value)))
        for item in value:
            flatten_arguments(item, leaves, nesting)
    else:
        leaves.append(value)


def split_arguments(args: tuple) -> tuple[list[torch.Tensor], tuple]:
    """(the arguments' tensors in order; the layout of everything else): the nesting, and each
    leaf's value, or None where it is a tensor. A package serves calls of one layout."""
    leaves: list = []
    nesting: list = []
    flatten_arguments(args, leaves, nesting)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    values = tuple(None if isinstance(leaf, torch.Tensor) else (type(leaf).__name__, leaf) for leaf in leaves)
    return tensors, (tuple(nesting), values)


def tensor_signature(tensors: list[torch.Tensor], dynamic: dict[int, tuple[int, int, int]] | None = None) -> tuple:
    """What a compiled graph assumes of its tensor inputs: each one's shape, stride, dtype and device. A
    size left free (dynamic: {tensor index: (dimension, min, max)}) is None, with the strides it moves;
    every other size, the batch included, stays."""
    dynamic = dynamic or {}
    return tuple(_free_input(t, dynamic[i][0]) if i in dynamic else (tuple(t.shape), t.stride(), t.dtype, str(t.device))
                 for i, t in enumerate(tensors))


def _free_input(tensor: torch.Tensor, dimension: int) -> tuple:
    shape = tuple(None if d == dimension else size for d, size in enumerate(tensor.shape))
    return shape, tensor.is_contiguous(), tensor.dtype, str(tensor.device)


def graph_code_sha256(fn: Callable, models: tuple[nn.Module, ...]) -> str:
    """sha256 of the source a graph is traced from: fn's module, the forward every graph runs
    (GRAPH_CODE) and the module of every class the models are made of (a quantised layer's kernel)."""
    names = {fn.__module__, *GRAPH_CODE, *(type(m).__module__ for model in models for m in model.modules())}
    key = (fn.__module__, fn.__qualname__, frozenset(names))
    if key not in _CODE_SHA256:
        digest = hashlib.sha256()
        for name in sorted(names):
            digest.update(f"{name}\n{inspect.getsource(importlib.import_module(name))}".encode())
        _CODE_SHA256[key] = digest.hexdigest()
    return _CODE_SHA256[key]


# the modules every graph's forward is written in, whatever function calls it
GRAPH_CODE = ("inferlab.core.static_forward", "inferlab.core.model", "inferlab.core.sampler")
_CODE_SHA256: dict[tuple, str] = {}


def describe_inputs(signature: tuple) -> str:
    """A package's tensor inputs in a line: each one's shape (free sizes as ?) and dtype."""
    def one(entry) -> str:
        shape = "x".join("?" if size is None else str(size) for size in entry[0])
        return f"{shape} {str(entry[-2]).removeprefix('torch.')}"
    return ", ".join(one(entry) for entry in signature)


_SLOT = object()  # where a tensor stood in a call's arguments


def _replace_leaves(args, is_slot: Callable, values):
    """args with each leaf that is_slot replaced, in order, by the next of `values` (an iterator)."""
    if isinstance(args, (list, tuple)):
        return type(args)(_replace_leaves(item, is_slot, values) for item in args)
    return next(values) if is_slot(args) else args


class _BoundCall(nn.Module):
    """fn(*models, *args) as a module whose only inputs are the arguments' tensors: the models are
    its submodules (their weights become the package's constants), the rest of args is fixed."""

    def __init__(self, fn: Callable, models: tuple[nn.Module, ...], args: tuple):
        super().__init__()
        self.fn, self.models = fn, nn.ModuleList(models)
        self.template = _replace_leaves(args, lambda leaf: isinstance(leaf, torch.Tensor), itertools.repeat(_SLOT))

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.fn(*self.models, *_replace_leaves(self.template, lambda leaf: leaf is _SLOT, iter(tensors)))


@dataclass(frozen=True)
class PackageName:
    """Where a package lives and what it was built from, for one call's models and arguments."""

    file: str
    digests: tuple[str, ...]
    configs: tuple[dict, ...]
    key: str
    call: dict  # everything the key covers, readable, so that a refusal names what differs

    @classmethod
    def of(cls, label: str, fn: Callable, models: tuple[nn.Module, ...], digests: tuple[str, ...], layout: tuple,
           signature: tuple, options: dict, threads: int, dynamic: dict | None) -> PackageName:
        configs = tuple(model.config.to_dict() for model in models)
        call = {"label": label, "function": f"{fn.__module__}.{fn.__qualname__}",
                "code": graph_code_sha256(fn, models)[:16],
                "device": sorted({entry[-1] for entry in signature}), "inputs": describe_inputs(signature),
                "free sizes": {str(i): list(bounds) for i, bounds in sorted((dynamic or {}).items())},
                "threads": threads, "options": dict(sorted(options.items())), "torch": torch.__version__}
        key = hashlib.sha256(repr((call, layout, signature)).encode()).hexdigest()
        readable = "".join(c if c.isalnum() or c in "._-" else "_" for c in label)
        weights = "+".join(digest[:8] for digest in digests)
        return cls(f"{readable}-{weights}-{key[:10]}{PACKAGE_SUFFIX}", digests, configs, key, call)

    def metadata(self) -> dict:
        return {"key": self.key, "digests": list(self.digests), "configs": list(self.configs), "call": self.call}

    def differences(self, recorded: dict) -> list[str]:
        """What a package built for `recorded` (its metadata) assumes that this call does not, in words."""
        built_for = recorded.get("call") or {}
        return [f"{part} {built_for.get(part)!r} there, {value!r} here" for part, value in self.call.items()
                if built_for.get(part) != value]


def _refusal(path: Path, recorded: dict, name: PackageName) -> str | None:
    """Why the package at path must not serve this call (it was built for another call, or from other
    weights), or None."""
    if recorded.get("key") != name.key:
        differs = name.differences(recorded) or ["its argument layout"]
        return f"{path.name} was built for another call ({'; '.join(differs)})"
    for i, (digest, config) in enumerate(zip(name.digests, name.configs, strict=True)):
        built_digest = recorded["digests"][i]
        built_config = recorded["configs"][i]
        if built_digest != digest or built_config != config:
            changed = sorted(key for key in set(config) | set(built_config) if config.get(key) != built_config.get(key))
            detail = "; ".join(f"{key} {built_config.get(key)!r} there, {config.get(key)!r} here" for key in changed)
            return (f"{path} was built from weights {built_digest[:12]}…, this model's are {digest[:12]}…"
                    + (f" ({detail})" if detail else ""))
    return None


@dataclass
class Package:
    """A loaded package: run(tensors), with the argument tensors in order, returns [fn's tensor]."""

    path: Path
    record: dict
    loader_run: Callable  # AOTInductor's loader, called on the flat tensor list
    run: Callable  # what the engine calls: the loader, or a wrapper of it (a profiler event)

    def __call__(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return self.run(tensors)[0]


def load_package(path: Path, name: PackageName) -> Package:
    """The package at path, after checking it is whole and was built from this call's models."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError) as error:
        raise PackageError(f"{path} is damaged ({error}); delete it and rerun the workflow to rebuild it") from error
    if damaged is not None:
        raise PackageError(f"{path} is damaged ({damaged} fails its checksum); delete it and rerun the workflow")
    os.environ[RUNTIME_CHECKS] = "1"  # before the package's first call, which reads it
    loaded = torch._inductor.aoti_load_package(str(path))
    recorded = json.loads(loaded.get_metadata().get(METADATA_KEY, "{}"))
    refusal = _refusal(path, recorded, name)
    if refusal:
        raise PackageError(f"refused: {refusal}. Rebuild it (the workflow does so when its inputs change).")
    record_path = path.with_suffix(RECORD_SUFFIX)
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    return Package(path, record, loaded.loader.run, loaded.loader.run)


def build_package(path: Path, name: PackageName, fn: Callable, models: tuple[nn.Module, ...], args: tuple,
                  tensors: list[torch.Tensor], options: dict, threads: int,
                  dynamic: dict[int, tuple[int, int, int]] | None = None) -> dict:
    """Exports fn(*models, *args) and compiles it into a package at path, with its record beside it.
    dynamic: {tensor index: (dimension, min, max)} for sizes the one graph serves at every value.
    The C++ loops are blocked for `threads` (inductor's cpp.threads), whatever this process runs with."""
    start = time.perf_counter()
    shapes = None
    if dynamic:
        shapes = tuple({dynamic[i][0]: torch.export.Dim(f"size{i}", min=dynamic[i][1], max=dynamic[i][2])}
                       if i in dynamic else None for i in range(len(tensors)))
    with torch.no_grad():
        program = torch.export.export(_BoundCall(fn, models, args), tuple(tensors),
                                      dynamic_shapes=(shapes,) if shapes else None, strict=False)
    exported = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{path.name}")
    configs = {"freezing": True, **options, "cpp.threads": threads,
               "aot_inductor.metadata": {METADATA_KEY: json.dumps(name.metadata())}}
    torch._inductor.aoti_compile_and_package(program, package_path=str(partial), inductor_configs=configs)
    partial.replace(path)
    # where a package's compile time goes: torch.export, then inductor (autotuning and the C++ compile)
    record = {"identity": name.metadata(), "compile_ms": (time.perf_counter() - start) * 1e3,
              "export_ms": (exported - start) * 1e3, "threads": threads, "options": options,
              "kernels": count_kernels(generated_sources(path)), "bytes": path.stat().st_size}
    path.with_suffix(RECORD_SUFFIX).write_text(json.dumps(record, indent=1) + "\n")
    return record


def package_for_label(name: PackageName, directories: list[Path]) -> tuple[Path, list[str]] | None:
    """A package in directories built under this call's label, and what it assumes that this call does not
    (PackageName.differences, and the weights); None if no package has the label."""
    for record_path in sorted(path for directory in directories for path in directory.glob(f"*{RECORD_SUFFIX}")):
        identity = json.loads(record_path.read_text()).get("identity") or {}
        if (identity.get("call") or {}).get("label") == name.call["label"]:
            differences = name.differences(identity)
            if identity.get("digests") != list(name.digests):
                differences.append(f"weights {'+'.join(d[:12] for d in identity.get('digests', []))} there, "
                                   f"{'+'.join(d[:12] for d in name.digests)} here")
            return record_path.with_suffix(PACKAGE_SUFFIX), differences
    return None


def generated_sources(path: Path) -> list[str]:
    """The C++ sources inductor generated for a package (its wrapper and kernels), from the archive."""
    with zipfile.ZipFile(path) as archive:
        return [archive.read(member).decode() for member in archive.namelist() if member.endswith(".cpp")]


def write_manifest(directory: Path, manifest_path: Path, lineage: dict | None) -> dict:
    """The packages in directory with each one's sha256 and record, as one JSON file: what the timing
    jobs take as input, so their lineage names the graphs they ran and a rebuilt package reruns them."""
    packages = {path.name: {"sha256": file_sha256(path), **json.loads(path.with_suffix(RECORD_SUFFIX).read_text())}
                for path in sorted(directory.glob(f"*{PACKAGE_SUFFIX}")) if not path.name.startswith(".")}
    unavailable = directory / UNAVAILABLE
    manifest = {"packages": packages, "compile_ms_total": sum(p["compile_ms"] for p in packages.values()),
                "unavailable": unavailable.read_text().strip() if unavailable.exists() else None,
                "torch": torch.__version__, "lineage": lineage}
    manifest_path.write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    log.info("%d packages, %.1f s of compiling; unavailable: %s", len(packages), manifest["compile_ms_total"] / 1e3,
             manifest["unavailable"])
    return manifest


def _causes(error: BaseException):
    """error and every exception it wraps: its cause and context, and inductor's inner exception."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__


def expected_failure(error: BaseException) -> str | None:
    """What a compile rule may fall back for, in words, if `error` is one: no working C++ toolchain (inductor's
    InvalidCxxCompiler or CppCompileError, wrapped in its InductorError), or an export torch refuses; None for
    anything else, which is a bug the rule must not hide."""
    # torch names these failures only in its private exception modules: read here, under WRITTEN_FOR_TORCH
    from torch._dynamo.exc import Unsupported, UserError
    from torch._inductor.exc import CppCompileError, InvalidCxxCompiler

    kinds = {"no working C++ toolchain": (InvalidCxxCompiler, CppCompileError),
             "torch.export refused the graph": (Unsupported, UserError)}
    return next((what for cause in _causes(error) for what, types in kinds.items() if isinstance(cause, types)),
                None)


def build_packages(directory: Path, manifest_path: Path, lineage: dict | None, build: Callable[[], None],
                   log) -> None:
    """A compile rule's work: build(), which runs graphs on an engine building into directory, then the
    manifest of what it built (write_manifest). Only for a failure it expects (expected_failure: no C++
    toolchain, an export torch refuses) does it fall back: the reason goes to UNAVAILABLE with the
    traceback in the log, and the jobs that take these packages run eager, saying why in their tables.
    Any other exception fails the rule."""
    import traceback

    directory.mkdir(parents=True, exist_ok=True)
    try:
        build()
    except Exception as error:
        what = expected_failure(error)
        if what is None:
            raise
        traceback.print_exc(file=log)
        first_line = str(error).splitlines()[0] if str(error) else ""
        (directory / UNAVAILABLE).write_text(f"{what}: {type(error).__name__}: {first_line}\n")
    write_manifest(directory, manifest_path, lineage)


def graph_dirs(inputs) -> list[Path]:
    """The package directories among a job's named inputs: those whose name ends in "graphs"."""
    return [Path(path) for name, path in inputs.items() if name.endswith("graphs")]
