"""Decode engines: one forward-with-cache interface, two implementations chosen by name.

- ``eager``: the seed-faithful baseline, ``GPT.forward`` with the growing-slice KV cache of
  ``inferlab.core.model``, dispatched op by op.
- ``compiled``: the gpt-fast design (pytorch-labs/gpt-fast) run as AOTInductor packages. A static
  KV buffer as long as the model's context; every forward writes its keys/values at ``input_pos``
  and attends over a context bucket under a mask ``key_pos <= query_pos``, so no shape depends on
  the position and each (token count, bucket) is one graph. The position travels as a tensor, so a
  new position is new data, not a new graph. Every forward runs as a package, the prefill included
  (one per prompt length). ``CompiledEngine.bind`` runs any other function of models and tensors the
  same way: a whole speculative round, or a sampled step (inferlab.speculative.fused). Each package
  is a file (inferlab.core.packages), with each model's weights frozen into it: the workflow's compile
  rules build them, and an engine given only ``graph_dirs`` loads them and compiles nothing. A call
  with no package runs eagerly and is counted (``eager_calls``), so no table reports it unseen.

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
from functools import partial
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
    package_for_label,
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

    def __init__(self, engine: EagerEngine, model: GPT, batch_size: int, max_seq_len: int | None = None):
        self.engine, self.model = engine, model
        model.setup_caches(batch_size, max_seq_len)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        self.engine.eager_calls += 1
        positions = torch.arange(start, start + tokens.size(1), device=tokens.device)
        return self.model(tokens, positions)

    step = forward  # a decode step, one token per row: no call of its own here

    def fill(self, tokens: torch.Tensor, start: int = 0) -> None:
        """Caches tokens' keys and values from `start` on (an untimed setup): one forward."""
        self.forward(tokens, start)

    def close(self) -> None:
        self.model.clear_caches()


class EagerEngine:
    name = "eager"
    runs_fused_rounds = False  # the readable reference: a speculative round is Python over forwards

    def __init__(self, fallback_reason: str | None = None, requested: str = "eager"):
        self.engine_fallback_reason = fallback_reason
        self.requested = requested  # "compiled" when this is the fallback of a failed compile
        self.eager_calls = 0  # model forwards run op by op since this engine was made: all of them

    @property
    def engine_used(self) -> str:
        return self.name

    def verify_weights(self) -> None:
        """No-op: the eager engine runs the model's weights as they are."""

    @torch.no_grad()
    def recompute_last(self, model: GPT, sequence: torch.Tensor) -> torch.Tensor:
        """Uncached step: the whole sequence (B, T) again; returns the last logits (B, V)."""
        self.eager_calls += 1
        return model(sequence)[:, -1]

    def open(self, model: GPT, batch_size: int = 1, max_seq_len: int | None = None) -> EagerSession:
        return EagerSession(self, model, batch_size, max_seq_len)

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


class BoundCall:
    """A call's run (its package's, or an eager one where it has none) and the flat tensor list it runs on:
    calling it is run(tensors) and one index."""

    __slots__ = ("package", "run", "tensors")

    def __init__(self, run: Callable, tensors: list[torch.Tensor], package: Package | None = None):
        self.run, self.tensors, self.package = run, tensors, package

    def __call__(self) -> torch.Tensor:
        return self.run(self.tensors)[0]


class CompiledSession:
    """Static buffers for one model; each forward runs its package (inferlab.core.packages), found once per
    (start, tokens' shape) for the model and then called with this session's buffers. A decode's step
    (`step`: one token per row) is found by its position alone, so that it costs its loader's call and a
    dict lookup: the package's own input checks refuse a token of another shape, stride, dtype or device."""

    def __init__(self, engine: CompiledEngine, model: GPT, batch_size: int):
        self.engine, self.model, self.batch_size = engine, model, batch_size
        cfg = model.config
        shape = (batch_size, cfg.n_head, cfg.max_seq_len, cfg.d_model // cfg.n_head)
        weight = model.tok_emb.weight
        self.k_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        self.v_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        # a package's inputs: the tokens and positions (set per call), then the caches
        self._inputs: list = [None, None, *self.k_caches, *self.v_caches]
        # the engine's tables of this model's forwards, shared by every session of it: (start, tokens' shape,
        # dtype, device) -> (positions, run), and a step's start -> (positions, run) at this batch size
        self._forwards = engine.steps_of(model)
        self._steps = engine.token_steps_of(model, batch_size)

    def step(self, token: torch.Tensor, start: int) -> torch.Tensor:
        """A decode step: token (B, 1), with strides of its own, at position start; logits (B, 1, V)."""
        found = self._steps.get(start)
        if found is None:
            return self._first_step(token, start)
        inputs = self._inputs
        inputs[0], inputs[1] = token, found[0]
        return found[1](inputs)[0]

    def _first_step(self, token: torch.Tensor, start: int) -> torch.Tensor:
        if tuple(token.shape) != (self.batch_size, 1):
            raise ValueError(f"a step takes one token per row, shape ({self.batch_size}, 1); got {tuple(token.shape)}")
        logits = self.forward(token, start)
        self._steps[start] = self._forwards[start, token.shape, token.dtype, token.device]
        return logits

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Any forward: tokens (B, n) at positions start..start+n-1; logits (B, n, V)."""
        tokens = own_rows(tokens)
        found = self._forwards.get((start, tokens.shape, tokens.dtype, tokens.device))
        if found is None:
            found = self._first_forward(tokens, start)
        inputs = self._inputs
        inputs[0], inputs[1] = tokens, found[0]
        return found[1](inputs)[0]

    def _first_forward(self, tokens: torch.Tensor, start: int) -> tuple[torch.Tensor, Callable]:
        """forward's first call of a (start, shape): checks the position and finds the package, or learns
        there is none (then it runs eagerly, counted), for every later call."""
        n, max_seq_len = tokens.size(1), self.model.config.max_seq_len
        if start + n > max_seq_len:
            raise ValueError(f"position {start + n - 1} exceeds the context {max_seq_len}")
        positions = self.engine.positions(start, n, tokens.device)
        context = context_bucket(start + n, max_seq_len)
        label = f"{model_label(self.model)}:T{n}:B{tokens.size(0)}:S{context}"
        package, _ = self.engine.resolve(static_forward, (self.model,), label, (tokens, positions, self.k_caches,
                                                                                self.v_caches, 0, context))
        run = package.run if package else partial(_run_eagerly, self.engine, self.model, context)
        self._forwards[start, tokens.shape, tokens.dtype, tokens.device] = found = (positions, run)
        return found

    def fill(self, tokens: torch.Tensor, start: int = 0) -> None:
        """Caches tokens' keys and values from `start` on (an untimed setup), one decode step at a time: the
        step's packages are built already, where one forward would need a package of its own length."""
        for i in range(tokens.size(1)):
            self.forward(tokens[:, i:i + 1], start + i)

    def close(self) -> None:
        self.k_caches, self.v_caches, self._inputs = [], [], []


def _run_eagerly(engine: CompiledEngine, model: GPT, context: int, inputs: list) -> list[torch.Tensor]:
    """A forward with no package, on a session's inputs (tokens, positions, the caches), op by op, counted."""
    engine.eager_calls += 1
    layers = len(model.blocks)
    with torch.no_grad():
        return [static_forward(model, inputs[0], inputs[1], inputs[2:2 + layers], inputs[2 + layers:], context=context)]


class CompiledEngine:
    """Calls of functions of models and tensors, each run by an AOTInductor package: found in
    `graph_dirs`, or (with a `build_dir`) built there on first use. With neither, it builds into a
    temporary directory of its own (tests, tools). A call with no package in graph_dirs (and nowhere to
    build one) runs eagerly and is counted in `eager_calls`; a package built for this call's function
    and weights but assuming something else (device, shapes, threads, code) is refused, naming what."""

    name = "compiled"
    requested = "compiled"
    engine_fallback_reason = None
    runs_fused_rounds = True  # decode loops hand a whole round (or a sampled step) to a bound call

    def __init__(self, graph_dirs: tuple[str | Path, ...] = (), build_dir: str | Path | None = None,
                 inductor_options: dict | None = None, threads: int | None = None, kernel_events: bool = False):
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
        self.eager_calls = 0  # calls run op by op, outside any package, since this engine was made
        self.packages: dict[str, dict] = {}  # label -> the record of the package it ran (built or loaded)
        self.built: set[str] = set()  # the labels whose packages this engine built
        # (fn, models, layout) -> {tensor signature: package or None}; the key holds its models, so no id is reused
        self._calls: dict[tuple, dict[tuple, Package | None]] = {}
        self._steps: weakref.WeakKeyDictionary[GPT, dict] = weakref.WeakKeyDictionary()
        self._token_steps: weakref.WeakKeyDictionary[GPT, dict] = weakref.WeakKeyDictionary()
        self._positions: dict[tuple, torch.Tensor] = {}
        self._weights = FrozenWeights()

    @property
    def engine_used(self) -> str:
        return self.name

    def with_kernel_events(self) -> CompiledEngine:
        """A twin engine whose packages record each kernel under torch.profiler: packages of their own,
        for profiling only."""
        twin = CompiledEngine(self.graph_dirs, self.build_dir, {k: v for k, v in self.options.items()
                                                                if k != "cpp.enable_kernel_profile"},
                              self.threads, kernel_events=True)
        twin._scratch = getattr(self, "_scratch", None)  # noqa: SLF001 - the twin keeps its builder's directory
        return twin

    def open(self, model: GPT, batch_size: int = 1, max_seq_len: int | None = None) -> CompiledSession:
        """A session of model; its weights are checked against those its packages froze (every decode
        opens its sessions, so a model changed between decodes is refused)."""
        # max_seq_len is ignored on purpose: the buffer always spans the whole context.
        self._weights.check(model)
        return CompiledSession(self, model, batch_size)

    def steps_of(self, model: GPT) -> dict:
        """The sessions' table of model's forwards: (start, tokens' shape, dtype, device) -> (positions, run)."""
        return self._steps.setdefault(model, {})

    def token_steps_of(self, model: GPT, batch_size: int) -> dict:
        """The sessions' table of model's decode steps at batch_size: start -> (positions, run)."""
        return self._token_steps.setdefault(model, {}).setdefault(batch_size, {})

    def positions(self, start: int, n: int, device: torch.device) -> torch.Tensor:
        """The positions start..start+n-1 as a tensor, made once: the graphs only read it."""
        key = (start, n, device)
        if key not in self._positions:
            self._positions[key] = torch.arange(start, start + n, device=device)
        return self._positions[key]

    @torch.no_grad()
    def recompute_last(self, model: GPT, sequence: torch.Tensor) -> torch.Tensor:
        """Uncached step: one package for every length from 2 (a dynamic size; torch.export
        specialises a size of 1, so one token is a package of its own); logits (B, V)."""
        n, batch = sequence.size(1), sequence.size(0)
        if n < 2:
            return self.call(full_forward, (model,), f"{model_label(model)}:uncached:T1:B{batch}", own_rows(sequence))
        return self.call(full_forward, (model,), f"{model_label(model)}:uncached:B{batch}", own_rows(sequence),
                         dynamic={0: (1, 2, model.config.max_seq_len)})

    def call(self, fn: Callable, models: tuple[GPT, ...], label: str, *args,
             dynamic: dict[int, tuple[int, int, int]] | None = None) -> torch.Tensor:
        """fn(*models, *args) run once by its package: bind's call, for a call made once."""
        return self.bind(fn, models, label, *args, dynamic=dynamic)()

    def bind(self, fn: Callable, models: tuple[GPT, ...], label: str, *args,
             dynamic: dict[int, tuple[int, int, int]] | None = None) -> BoundCall:
        """fn(*models, *args) as a call without arguments, bound to its package and these tensors: calling it
        runs the package on the tensors as they are then, so a decode binds each call once and writes each
        step's values into its tensors in place (copy_, fill_, out=).

        A package serves the calls of one (fn, models, layout of the non-tensor arguments, and each
        tensor's shape, stride, dtype and device); dynamic = {tensor index: (dimension, min, max)} leaves one
        size free. `label` names the package's file and this engine's stamp. Binding checks the models'
        weights (FrozenWeights); with no package for the call, the bound call runs fn eagerly, counted.
        """
        for model in models:
            self._weights.check(model)
        package, tensors = self.resolve(fn, models, label, args, dynamic)
        if package is None:
            return BoundCall(partial(self._eager_call, fn, models, args), tensors)
        return BoundCall(package.run, tensors, package)

    def _eager_call(self, fn: Callable, models: tuple[GPT, ...], args: tuple, tensors: list) -> list[torch.Tensor]:
        """fn on args, whose tensors are the bound ones, op by op, counted."""
        self.eager_calls += 1
        with torch.no_grad():
            return [fn(*models, *args)]

    def resolve(self, fn: Callable, models: tuple[GPT, ...], label: str, args: tuple,
                dynamic: dict | None = None) -> tuple[Package | None, list[torch.Tensor]]:
        """(the package that runs fn(*models, *args), or None where there is none to load or build; the
        arguments' tensors in the order it takes them). The first lookup of each checks the models' weights
        by content."""
        tensors, layout = split_arguments(args)
        signature = tensor_signature(tensors, dynamic)
        packages = self._calls.setdefault((fn, models, layout), {})
        if signature not in packages:
            for model in models:
                self._weights.check(model, by_content=True)
            package = self._package(fn, models, label, args, tensors, layout, signature, dynamic)
            packages[signature] = _with_profiler_event(package) if package and self.kernel_events else package
        return packages[signature], tensors

    def _package(self, fn: Callable, models: tuple[GPT, ...], label: str, args: tuple,
                 tensors: list[torch.Tensor], layout: tuple, signature: tuple, dynamic: dict | None
                 ) -> Package | None:
        digests = tuple(self._weights.digest(m) for m in models)
        name = PackageName.of(label, fn, models, digests, layout, signature, self.options, self.threads, dynamic)
        path = next((d / name.file for d in self.graph_dirs if (d / name.file).exists()), None)
        if path is None and self.build_dir is not None:
            path = self.build_dir / name.file
            if not path.exists():
                log.info("compiling %s", name.file)
                build_package(path, name, fn, models, args, tensors, self.options, self.threads, dynamic)
                self.built.add(label)
        if path is None:
            return self._no_package(name)
        package = load_package(path, name)
        self.packages[label] = package.record
        return package

    def _no_package(self, name: PackageName) -> None:
        """Refuses a call whose label has a package built for something else, naming what; otherwise None:
        the call runs eagerly, counted."""
        found = package_for_label(name, self.graph_dirs)
        if found:
            raise PackageError(f"refused: {found[0]} was built for another call ({'; '.join(found[1])}); "
                               "rebuild it (the workflow does so when its inputs change)")
        searched = ", ".join(str(d) for d in self.graph_dirs)
        log.warning("no package %s in %s: it runs eagerly, counted in eager_calls (the compile rules, "
                    "workflow/rules/graphs.smk, build every graph a timing job runs)", name.file, searched)
        return None

    def verify_weights(self) -> None:
        """Checks by content that every model this engine ran still has the weights its packages froze."""
        self._weights.check_all()

    def stamp(self) -> dict:
        records = self.packages.values()
        return {"engine": self.requested, "engine_used": self.engine_used, "engine_fallback_reason": None,
                "compile_ms_total": float(sum(self.packages[label].get("compile_ms", 0.0) for label in self.built)),
                "package_compile_ms_total": float(sum(r.get("compile_ms", 0.0) for r in records)),
                "packages": len(self.packages), "packages_built": len(self.built), "eager_calls": self.eager_calls,
                "devices": sorted({device for r in records for device in r.get("identity", {}).get("call", {})
                                   .get("device", [])}),
                "compile_ms": {label: r.get("compile_ms") for label, r in self.packages.items()},
                "kernels": {label: r.get("kernels") for label, r in self.packages.items()},
                "inductor_options": self.options, "threads": self.threads}


class WeightsChanged(RuntimeError):
    """A model whose weights changed after the compiled engine froze them into its packages."""


class FrozenWeights:
    """The weights a compiled engine's packages froze, per model, and the checks that refuse a model
    changed since: every parameter and buffer but the eager KV caches (weights_digest's tensors).

    check(model) compares each tensor's version counter and storage, a few µs: it sees an optimizer step,
    load_state_dict, an in-place edit and a replaced tensor. An edit through .data moves no version counter,
    so check(model, by_content=True) compares weights_digest too (milliseconds per MB): the engine does so
    at the first lookup of each package and in check_all, which every table runs before its rows take
    their engine's columns (engine_rows.engine_columns)."""

    def __init__(self):
        self._slots: weakref.WeakKeyDictionary[GPT, list] = weakref.WeakKeyDictionary()
        self._versions: weakref.WeakKeyDictionary[GPT, tuple] = weakref.WeakKeyDictionary()
        self._digests: weakref.WeakKeyDictionary[GPT, str] = weakref.WeakKeyDictionary()

    def digest(self, model: GPT) -> str:
        """weights_digest of model as its packages froze it (computed at its first lookup)."""
        if model not in self._digests:
            self._digests[model] = weights_digest(model)
        return self._digests[model]

    def check(self, model: GPT, by_content: bool = False) -> None:
        slots = self._slots.get(model)
        if slots is None:
            slots = self._slots[model] = [(table, name) for module in model.modules()
                                          for table in (module._parameters, module._buffers)
                                          for name, tensor in table.items()
                                          if tensor is not None and not name.endswith(("k_cache", "v_cache"))]
        # read through each module's own dicts, so a replaced tensor is seen as well as an in-place edit
        now = tuple((table[name]._version, table[name].data_ptr()) for table, name in slots)
        if self._versions.setdefault(model, now) != now:
            raise WeightsChanged(f"{model_label(model)}: a parameter or buffer changed after the compiled engine "
                                 "froze it into its packages; build a new engine (make_engine('compiled'))")
        if by_content and self.digest(model) != weights_digest(model):
            raise WeightsChanged(f"{model_label(model)}: its weights' content changed (an edit through .data?) "
                                 "after the compiled engine froze them; build a new engine (make_engine('compiled'))")

    def check_all(self) -> None:
        for model in list(self._digests):
            self.check(model, by_content=True)


def _with_profiler_event(package: Package) -> Package:
    """package, each call of it a profiler event (PACKAGE_CALL) that its kernels' events nest in."""
    def run(tensors):
        with record_function(PACKAGE_CALL):
            return package.loader_run(tensors)
    return Package(package.path, package.record, package.loader_run, run)


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
