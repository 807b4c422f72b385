"""Decode engines: one forward-with-cache interface, two implementations chosen by name.

- ``eager``: the seed-faithful baseline, ``GPT.forward`` with the growing-slice KV cache of
  ``inferlab.core.model``, dispatched op by op.
- ``compiled``: the gpt-fast design (pytorch-labs/gpt-fast) run as AOTInductor packages. A static
  KV buffer as long as the model's context; every forward writes its keys/values at ``input_pos``
  and attends over a context bucket under a mask ``key_pos <= query_pos``, so no shape depends on
  the position and each (token count, bucket) is one graph. The position travels as a tensor, so a
  new position is new data, not a new graph. Forwards of the token counts in ``token_counts`` (1,
  the decode step, by default) run as packages; any other length (the prefill) runs the same code
  eagerly. ``CompiledEngine.call`` runs any other function of models and tensors the same way: a
  whole speculative round, or a sampled step (inferlab.speculative.fused). Each package is a file
  (inferlab.core.packages), with each model's weights frozen into it: the workflow's compile rules
  build them, and an engine given only ``graph_dirs`` loads them and compiles nothing.

Both keep the rollback rule of ``inferlab.core.model.KVCache``: there is no stored length, the
caller's positions say which prefix is valid, so a rejected speculation is overwritten later.

A session (``engine.open(model, batch)``) owns one model's cache; ``session.forward(tokens,
start)`` returns logits (B, T, V). When the compile rule could not compile (no C++ toolchain, say),
it leaves an ``unavailable.txt`` with the reason, and ``make_engine`` returns the eager engine with
``engine_fallback_reason`` set, so a table never reports eager numbers as compiled.
"""

from __future__ import annotations

import logging
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import record_function

from inferlab.core.model import GPT
from inferlab.core.packages import (
    UNAVAILABLE,
    Package,
    PackageError,
    PackageName,
    build_package,
    load_package,
    split_arguments,
    tensor_signature,
    weights_digest,
)
from inferlab.core.static_forward import context_bucket, full_forward, static_forward

log = logging.getLogger(__name__)

ENGINE_NAMES = ("eager", "compiled")
# Each model's weights are constants of its packages (inductor's freezing, always on for a package),
# so that inductor can prepack every projection for its C++ GEMM template, which reads each packed
# weight panel once for all the rows of a forward. The template is the only GEMM backend: with ATen
# beside it, autotuning took twice as long to compile and ran no faster (docs/engines.md).
DEFAULT_INDUCTOR_OPTIONS: dict = {"max_autotune": True, "max_autotune_gemm_backends": "CPP"}
PACKAGE_CALL = "inferlab::package_call"  # the profiler event around a package's call (kernel-event engines)


def model_label(model: GPT) -> str:
    return f"d{model.config.d_model}xL{model.config.n_layer}"


class EagerSession:
    """The baseline: GPT.forward with the model's own KV cache."""

    def __init__(self, model: GPT, batch_size: int, max_seq_len: int | None = None):
        self.model = model
        model.setup_caches(batch_size, max_seq_len)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + tokens.size(1), device=tokens.device)
        return self.model(tokens, positions)

    def close(self) -> None:
        self.model.clear_caches()


class EagerEngine:
    name = "eager"
    runs_fused_rounds = False  # the readable reference: a speculative round is Python over forwards

    def __init__(self, fallback_reason: str | None = None, requested: str = "eager"):
        self.engine_fallback_reason = fallback_reason
        self.requested = requested  # "compiled" when this is the fallback of a failed compile

    @property
    def engine_used(self) -> str:
        return self.name

    def want_token_counts(self, *counts: int) -> None:
        """No-op: the eager engine runs every length the same way."""

    @torch.no_grad()
    def recompute_last(self, model: GPT, sequence: torch.Tensor) -> torch.Tensor:
        """Uncached step: the whole sequence (B, T) again; returns the last logits (B, V)."""
        return model(sequence)[:, -1]

    def open(self, model: GPT, batch_size: int = 1, max_seq_len: int | None = None) -> EagerSession:
        return EagerSession(model, batch_size, max_seq_len)

    def stamp(self) -> dict:
        return {"engine": self.requested, "engine_used": self.engine_used,
                "engine_fallback_reason": self.engine_fallback_reason, "compile_ms_total": 0.0}


# --------------------------------------------------------------------------- static forward

def own_rows(tokens: torch.Tensor) -> torch.Tensor:
    """tokens (B, n) with the strides of a tensor of their own, (n, 1): a package serves one layout,
    and a slice of a longer row (ids[:, start:]) keeps that row's stride."""
    if tokens.stride() == (tokens.size(1), 1):
        return tokens
    return tokens.clone(memory_format=torch.contiguous_format)


class CompiledSession:
    """Static buffers for one model; forwards of few tokens go through the engine's packages."""

    def __init__(self, engine: CompiledEngine, model: GPT, batch_size: int):
        self.engine, self.model = engine, model
        cfg = model.config
        shape = (batch_size, cfg.n_head, cfg.max_seq_len, cfg.d_model // cfg.n_head)
        weight = model.tok_emb.weight
        self.k_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        self.v_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        self._caches = [*self.k_caches, *self.v_caches]  # a package's inputs after the tokens and positions
        # each (start, count)'s positions tensor, made once: a new one per step was a measurable
        # share of a small model's step; the graphs only read it
        self._positions: dict[tuple[int, int], torch.Tensor] = {}
        # (tokens' shape and dtype, context bucket) -> its package: a step's call is the package's own
        # after the first, since everything else it takes is this session's
        self._steps: dict[tuple, Package] = {}

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        n = tokens.size(1)
        end, max_seq_len = start + n, self.model.config.max_seq_len
        if end > max_seq_len:
            raise ValueError(f"position {end - 1} exceeds the context {max_seq_len}")
        positions = self._positions.get((start, n))
        if positions is None:
            positions = self._positions[start, n] = torch.arange(start, end, device=tokens.device)
        context = context_bucket(end, max_seq_len)
        if n not in self.engine.token_counts:  # a prompt: eager, any length
            with torch.no_grad():
                return static_forward(self.model, tokens, positions, self.k_caches, self.v_caches, context=context)
        tokens = own_rows(tokens)
        key = (tokens.shape, tokens.dtype, context)
        package = self._steps.get(key)
        if package is None:
            label = f"{model_label(self.model)}:T{n}:B{tokens.size(0)}:S{context}"
            package = self._steps[key] = self.engine.package_for(
                static_forward, (self.model,), label, tokens, positions, self.k_caches, self.v_caches, 0, context)
        return package([tokens, positions, *self._caches])

    def close(self) -> None:
        self.k_caches, self.v_caches, self._caches = [], [], []


class CompiledEngine:
    """Calls of functions of models and tensors, each run by an AOTInductor package: found in
    `graph_dirs`, or (with a `build_dir`) built there on first use. With neither, it builds into a
    temporary directory of its own (tests, tools)."""

    name = "compiled"
    requested = "compiled"
    engine_fallback_reason = None
    runs_fused_rounds = True  # decode loops hand a whole round (or a sampled step) to call()

    def __init__(self, graph_dirs: tuple[str | Path, ...] = (), build_dir: str | Path | None = None,
                 inductor_options: dict | None = None, threads: int | None = None,
                 token_counts: tuple[int, ...] = (1,), kernel_events: bool = False):
        self.graph_dirs = [Path(d) for d in graph_dirs]
        if build_dir is None and not self.graph_dirs:
            # removed with the engine (and its twin, which shares it)
            self._scratch = tempfile.TemporaryDirectory(prefix="inferlab-graphs-")
            build_dir = self._scratch.name
        self.build_dir = Path(build_dir) if build_dir is not None else None
        self.options = dict(DEFAULT_INDUCTOR_OPTIONS if inductor_options is None else inductor_options)
        self.kernel_events = kernel_events
        if kernel_events:  # each kernel a profiler event (inductor's cpp.enable_kernel_profile): its own packages
            self.options["cpp.enable_kernel_profile"] = True
        # the thread count the packages' C++ loops are blocked for: the timing jobs' own
        self.threads = threads or torch.get_num_threads()
        self.token_counts = set(token_counts)
        self.packages: dict[str, dict] = {}  # label -> the record of the package it ran (built or loaded)
        self.built: set[str] = set()  # the labels whose packages this engine built
        # (fn, models, layout) -> {tensor signature: package}; the key holds its models, so no id is reused
        self._calls: dict[tuple, dict[tuple, Package]] = {}
        self._digests: weakref.WeakKeyDictionary[GPT, str] = weakref.WeakKeyDictionary()
        # each model's weights as its packages froze them (versions and storage), to refuse stale ones,
        # and where its parameters live (walking model.parameters() on every call cost more than a step)
        self._frozen: weakref.WeakKeyDictionary[GPT, tuple] = weakref.WeakKeyDictionary()
        self._parameter_slots: weakref.WeakKeyDictionary[GPT, list] = weakref.WeakKeyDictionary()

    @property
    def engine_used(self) -> str:
        return self.name

    def with_kernel_events(self) -> CompiledEngine:
        """A twin engine whose packages record each kernel under torch.profiler: packages of their own,
        for profiling only."""
        twin = CompiledEngine(self.graph_dirs, self.build_dir, {k: v for k, v in self.options.items()
                                                                if k != "cpp.enable_kernel_profile"},
                              self.threads, tuple(self.token_counts), kernel_events=True)
        twin._scratch = getattr(self, "_scratch", None)  # noqa: SLF001 - the twin keeps its builder's directory
        return twin

    def open(self, model: GPT, batch_size: int = 1, max_seq_len: int | None = None) -> CompiledSession:
        """A session of model; its weights are checked against those its packages froze (every decode
        opens its sessions, so a model changed between decodes is refused)."""
        # max_seq_len is ignored on purpose: the buffer always spans the whole context.
        self._check_weights(model)
        return CompiledSession(self, model, batch_size)

    def want_token_counts(self, *counts: int) -> None:
        """Forwards of these many tokens will run as packages too."""
        self.token_counts.update(counts)

    @torch.no_grad()
    def recompute_last(self, model: GPT, sequence: torch.Tensor) -> torch.Tensor:
        """Uncached step: one package for every length from 2 (a dynamic size); logits (B, V)."""
        if sequence.size(1) < 2:
            return full_forward(model, sequence)
        label = f"{model_label(model)}:uncached:B{sequence.size(0)}"
        return self.call(full_forward, (model,), label, own_rows(sequence),
                         dynamic={0: (1, 2, model.config.max_seq_len)})

    def call(self, fn: Callable, models: tuple[GPT, ...], label: str, *args,
             dynamic: dict[int, tuple[int, int, int]] | None = None) -> torch.Tensor:
        """fn(*models, *args) run by its package (package_for), with each model's weights frozen into it."""
        package, tensors = self._resolve(fn, models, label, args, dynamic)
        return package(tensors)

    def package_for(self, fn: Callable, models: tuple[GPT, ...], label: str, *args,
                    dynamic: dict[int, tuple[int, int, int]] | None = None) -> Package:
        """The package that runs fn(*models, *args); call it with the arguments' tensors in order.

        A package serves the calls of one (fn, models, layout of the non-tensor arguments, and each
        tensor's shape, stride and dtype); dynamic = {tensor index: (dimension, min, max)} leaves one
        size free. The first call of each finds its package (or builds it, on an engine that builds),
        which is checked against these models' weights; `label` names it in the package's file name
        and in this engine's stamp.
        """
        return self._resolve(fn, models, label, args, dynamic)[0]

    def _resolve(self, fn: Callable, models: tuple[GPT, ...], label: str, args: tuple,
                 dynamic: dict | None) -> tuple[Package, list[torch.Tensor]]:
        tensors, layout = split_arguments(args)
        signature = _free_signature(tensors, dynamic) if dynamic else tensor_signature(tensors)
        packages = self._calls.setdefault((fn, models, layout), {})
        package = packages.get(signature)
        if package is None:
            for model in models:
                self._check_weights(model)
            package = self._package(fn, models, label, args, tensors, layout, signature, dynamic)
            packages[signature] = package = _with_profiler_event(package) if self.kernel_events else package
        return package, tensors

    def _package(self, fn: Callable, models: tuple[GPT, ...], label: str, args: tuple,
                 tensors: list[torch.Tensor], layout: tuple, signature: tuple, dynamic: dict | None) -> Package:
        digests = tuple(self._digests.get(m) or self._digests.setdefault(m, weights_digest(m)) for m in models)
        name = PackageName.of(label, models, digests, layout, signature, self.options, self.threads, dynamic)
        path = next((d / name.file for d in self.graph_dirs if (d / name.file).exists()), None)
        if path is None and self.build_dir is not None:
            path = self.build_dir / name.file
            if not path.exists():
                log.info("compiling %s", name.file)
                build_package(path, name, fn, models, args, tensors, self.options, self.threads, dynamic)
                self.built.add(label)
        if path is None:
            searched = ", ".join(str(d) for d in self.graph_dirs)
            raise PackageError(f"no package {name.file} in {searched}: the compile rules (workflow/rules/graphs.smk) "
                               f"build every graph a timing job runs; rerun the workflow")
        package = load_package(path, name)
        self.packages[label] = package.record
        return package

    def _check_weights(self, model: GPT) -> None:
        """Packages hold the weights they were built with: a model whose weights changed since this
        engine first ran it (an optimizer step, load_state_dict, an in-place edit) is refused when a
        session of it opens or a package for it is first looked up, never run stale."""
        slots = self._parameter_slots.get(model)
        if slots is None:
            slots = self._parameter_slots[model] = [(module._parameters, name) for module in model.modules()
                                                    for name, param in module._parameters.items()
                                                    if param is not None]
        # read through each module's own dict, so a replaced parameter is seen as well as an in-place edit
        now = tuple((params[name]._version, params[name].data_ptr()) for params, name in slots)
        frozen = self._frozen.setdefault(model, now)
        if frozen != now:
            raise RuntimeError("this model's weights changed after the compiled engine froze them into its "
                               "packages; build a new engine (make_engine('compiled')) for the new weights")

    def stamp(self) -> dict:
        records = self.packages.values()
        return {"engine": self.requested, "engine_used": self.engine_used, "engine_fallback_reason": None,
                "compile_ms_total": float(sum(self.packages[label].get("compile_ms", 0.0) for label in self.built)),
                "package_compile_ms_total": float(sum(r.get("compile_ms", 0.0) for r in records)),
                "packages": len(self.packages), "packages_built": len(self.built),
                "compile_ms": {label: r.get("compile_ms") for label, r in self.packages.items()},
                "kernels": {label: r.get("kernels") for label, r in self.packages.items()},
                "inductor_options": self.options, "threads": self.threads}


def _with_profiler_event(package: Package) -> Package:
    """package, each call of it a profiler event (PACKAGE_CALL) that its kernels' events nest in."""
    def run(tensors):
        with record_function(PACKAGE_CALL):
            return package._run(tensors)  # noqa: SLF001 - the same loader, wrapped
    return Package(package.path, package.record, run)


def _free_signature(tensors: list[torch.Tensor], dynamic: dict[int, tuple[int, int, int]]) -> tuple:
    """tensor_signature with the free sizes (and the strides they move) left out."""
    return tuple((t.dim(), t.dtype, t.is_contiguous()) if i in dynamic else (tuple(t.shape), t.stride(), t.dtype)
                 for i, t in enumerate(tensors))


Engine = EagerEngine | CompiledEngine


def make_engine(name: str, **options) -> Engine:
    """The engine called `name`. "compiled" is eager, with the reason, where the compile rule that
    made its graph_dirs could not compile."""
    if name == "eager":
        return EagerEngine()
    if name != "compiled":
        raise ValueError(f"engine must be one of {ENGINE_NAMES}, got {name!r}")
    for directory in options.get("graph_dirs", ()):
        marker = Path(directory) / UNAVAILABLE
        if marker.exists():
            reason = marker.read_text().strip()
            log.warning("compiled engine unavailable, falling back to eager: %s", reason)
            return EagerEngine(fallback_reason=reason, requested="compiled")
    return CompiledEngine(**options)
