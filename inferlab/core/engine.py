"""Decode engines: one forward-with-cache interface, two implementations chosen by name.

- ``eager``: the seed-faithful baseline, ``GPT.forward`` with the growing-slice KV cache of
  ``inferlab.core.model``, dispatched op by op.
- ``compiled``: the gpt-fast design (pytorch-labs/gpt-fast). A static KV buffer as long as
  the model's context; every forward writes its keys/values at ``input_pos`` and attends over
  the WHOLE buffer under a mask ``key_pos <= query_pos``, so no shape depends on the position
  and ``torch.compile(fullgraph=True, dynamic=False)`` compiles each token count once. The
  position travels as a tensor, so a new position is new data, not a recompile. Forwards of
  the token counts in ``token_counts`` (1, the decode step, by default) run compiled; any other
  length (the prefill) runs the same code eagerly, since each compile costs seconds. Each
  model's weights are frozen into its graphs, and ``CompiledEngine.call`` compiles any other
  function of models and tensors the same way: a whole speculative round, or a sampled step
  (inferlab.speculative.fused). A call whose models and argument layout the engine has seen runs
  the graph inductor compiled for it straight, without torch.compile's entry and dynamo's guards
  (inferlab.core.direct_calls); any other goes through dynamo, which may compile.

Both keep the rollback rule of ``inferlab.core.model.KVCache``: there is no stored length, the
caller's positions say which prefix is valid, so a rejected speculation is overwritten later.

A session (``engine.open(model, batch)``) owns one model's cache; ``session.forward(tokens,
start)`` returns logits (B, T, V). Every call that compiles is timed into ``engine.compile_ms``
and its generated kernels counted into ``engine.kernels``, apart from any per-token timing. When
compilation fails, ``make_engine`` logs why and returns the eager engine with
``engine_fallback_reason`` set, so a table never reports eager numbers as compiled.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from inferlab.core.compile_settings import engine_call_settings
from inferlab.core.direct_calls import DirectCall, GraphCapture, split_arguments
from inferlab.core.generated_code import count_kernels
from inferlab.core.model import GPT
from inferlab.core.static_forward import GEMV_MAX_ROWS, context_bucket, full_forward, static_forward

if TYPE_CHECKING:
    from inferlab.core.graph_cache import WeightsKey

log = logging.getLogger(__name__)

ENGINE_NAMES = ("eager", "compiled")
# The compiled graphs treat each model's weights as constants (inductor's "freezing", set around
# each compiled call) so that inductor can prepack every projection for its C++ GEMM template, which
# reads each packed weight panel once for all the rows of a forward. The template is the only GEMM
# backend: with ATen beside it, autotuning took twice as long to compile and ran no faster.
# The graph's own code between kernels runs as C++ (inductor's cpp_wrapper), not Python: a call then
# skips the Python wrapper's buffer allocations and argument marshalling, which cost a tiny graph as
# much as its kernels. Its price is compile time: each graph compiles as one C++ unit and shares no
# kernel object with another graph. What each choice measured: docs/engines.md.
DEFAULT_INDUCTOR_OPTIONS: dict = {"max_autotune": True, "max_autotune_gemm_backends": "CPP", "cpp_wrapper": True}
FREEZE_WEIGHTS = True


def model_label(model: GPT) -> str:
    return f"d{model.config.d_model}xL{model.config.n_layer}"


def _unique(label: str, taken: dict) -> str:
    """label, or label#2, #3.. when another model of the same shape already used it."""
    if label not in taken:
        return label
    return next(f"{label}#{i}" for i in range(2, len(taken) + 3) if f"{label}#{i}" not in taken)


def _graph_cache_lookups() -> tuple[int, int]:
    """Inductor's FX graph cache (hits, misses) so far, read afresh: torch may replace its counters."""
    counters = torch._dynamo.utils.counters["inductor"]
    return counters["fxgraph_cache_hit"], counters["fxgraph_cache_miss"]


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
        self.compile_ms: dict[str, float] = {}

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

def _eager_static_forward(model: GPT, idx: torch.Tensor, input_pos: torch.Tensor, k_caches: list[torch.Tensor],
                          v_caches: list[torch.Tensor], context: int) -> torch.Tensor:
    return static_forward(model, idx, input_pos, k_caches, v_caches, context=context)



def own_rows(tokens: torch.Tensor) -> torch.Tensor:
    """tokens (B, n) with the strides of a tensor of their own, (n, 1). A slice of a longer row
    (ids[:, start:]) keeps that row's stride, and dynamo guards input strides, so each row length
    would compile the same graph again (seconds each). `.contiguous()` keeps a one-row slice as it is."""
    if tokens.stride() == (tokens.size(1), 1):
        return tokens
    return tokens.clone(memory_format=torch.contiguous_format)


class CompiledSession:
    """Static buffers for one model; forwards of few tokens go through the engine's compiled step."""

    def __init__(self, engine: CompiledEngine, model: GPT, batch_size: int):
        self.engine, self.model = engine, model
        cfg = model.config
        shape = (batch_size, cfg.n_head, cfg.max_seq_len, cfg.d_model // cfg.n_head)
        weight = model.tok_emb.weight
        self.k_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        self.v_caches = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in model.blocks]
        # each (start, count)'s positions tensor, made once: a new one per step was a measurable
        # share of a small model's step; the graphs only read it
        self._positions: dict[tuple[int, int], torch.Tensor] = {}

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        n = tokens.size(1)
        if start + n > self.model.config.max_seq_len:
            raise ValueError(f"position {start + n - 1} exceeds the context {self.model.config.max_seq_len}")
        tokens = own_rows(tokens)
        positions = self._positions.get((start, n))
        if positions is None:
            positions = self._positions[start, n] = torch.arange(start, start + n, device=tokens.device)
        step = self.engine.step_for(self.model, n)
        return step(self.model, tokens, positions, self.k_caches, self.v_caches,
                    context_bucket(start + n, self.model.config.max_seq_len))

    def close(self) -> None:
        self.k_caches, self.v_caches = [], []


class CompiledEngine:
    """torch.compile'd static-cache steps, one compiled graph per (model, token count)."""

    name = "compiled"
    requested = "compiled"
    engine_fallback_reason = None
    runs_fused_rounds = True  # decode loops hand a whole round (or a sampled step) to call()

    def __init__(self, token_counts: tuple[int, ...] = (1,), inductor_options: dict | None = None,
                 freeze_weights: bool = FREEZE_WEIGHTS, gemv_max_rows: int = GEMV_MAX_ROWS,
                 call_straight: bool = True):
        self.token_counts = set(token_counts)
        self.gemv_max_rows = gemv_max_rows
        self.call_straight = call_straight  # False: every call through dynamo (what calling straight buys)
        self.options = dict(DEFAULT_INDUCTOR_OPTIONS if inductor_options is None else inductor_options)
        self.freeze_weights = freeze_weights
        # inductor's modules take 1.5 s to import, which every eager-only job would pay at start
        from torch._inductor.codecache import PyCodeCache

        from inferlab.core import graph_cache
        self._generated_code, self._graph_cache = PyCodeCache, graph_cache
        self.compile_ms: dict[str, float] = {}
        self.kernels: dict[str, dict[str, int]] = {}
        self.graph_cache_loads: dict[str, dict[str, int]] = {}
        self.compiled_beside: dict[str, dict | None] = {}  # label -> another process's stamp (record_compiled_beside)
        self._functions: dict[Callable, Callable] = {}  # fn -> torch.compile(fn), one wrapper each
        self._capture = GraphCapture(self.options, keep_first_outputs=call_straight)
        # (fn, models, layout) -> graphs called straight; the key holds its models, so no model's id is reused
        self._direct: dict[tuple, list[DirectCall]] = {}
        # each model's weights as its graphs froze them (versions and storage), to refuse stale ones,
        # and where its parameters live (walking model.parameters() on every call cost more than a step)
        self._frozen: weakref.WeakKeyDictionary[GPT, tuple] = weakref.WeakKeyDictionary()
        self._parameter_slots: weakref.WeakKeyDictionary[GPT, list] = weakref.WeakKeyDictionary()
        self._digests: weakref.WeakKeyDictionary[GPT, str] = weakref.WeakKeyDictionary()
        self._weights_keys: dict[tuple[str, ...], WeightsKey] = {}
        # Frozen graphs whose projections all go to the C++ GEMM template (which prunes the MKL-packed
        # copies anyway) can go to inductor's on-disk cache, keyed by their weights (core/graph_cache.py).
        # Inductor's default lowering (Experiment 4's kernels) keeps its oneDNN-packed linears.
        backends = self.options.get("max_autotune_gemm_backends", "")
        through_template = self.options.get("max_autotune") and "CPP" in backends
        self.graph_cache = bool(freeze_weights and through_template and graph_cache.pin_cacheable_freezing())
        # the uncached baseline grows by one token per step: one graph with a symbolic length, compiled
        # plainly (autotuning and constants per length would cost minutes for a baseline)
        self._full = torch.compile(full_forward, fullgraph=True, dynamic=True)
        # every (model, token count, batch) is its own graph: target + draft x {1, 2, k+1}
        # (a test process compiles many more, one model after another); past the limit dynamo would
        # silently run the function eagerly under a "compiled" label, so it fails instead
        dynamo_config = torch._dynamo.config
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 256)
        dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)
        dynamo_config.fail_on_recompile_limit_hit = True

    @property
    def engine_used(self) -> str:
        return self.name

    def constructor_options(self) -> dict:
        """The arguments that build this engine again (JSON-ready): what a twin engine, or another
        process's engine that must compile under the same cache keys, is made from."""
        return {"token_counts": sorted(self.token_counts), "inductor_options": dict(self.options),
                "freeze_weights": self.freeze_weights, "gemv_max_rows": self.gemv_max_rows,
                "call_straight": self.call_straight}

    def with_kernel_events(self) -> CompiledEngine:
        """A twin engine whose graphs record each kernel under torch.profiler (inductor's
        cpp.enable_kernel_profile): its own compiles, for profiling only."""
        options = self.constructor_options()
        return CompiledEngine(**options | {"inductor_options": options["inductor_options"]
                                           | {"cpp.enable_kernel_profile": True}})

    def open(self, model: GPT, batch_size: int = 1, max_seq_len: int | None = None) -> CompiledSession:
        # max_seq_len is ignored on purpose: the buffer always spans the whole context.
        return CompiledSession(self, model, batch_size)

    def want_token_counts(self, *counts: int) -> None:
        """Forwards of these many tokens will run compiled too (each compiles on first use)."""
        self.token_counts.update(counts)

    @torch.no_grad()
    def recompute_last(self, model: GPT, sequence: torch.Tensor) -> torch.Tensor:
        """Uncached step, compiled once for every length (dynamic shapes); logits (B, V)."""
        label = f"{model_label(model)}:uncached:B{sequence.size(0)}"
        return self._accounted(label, lambda: self._full(model, sequence))

    def step_for(self, model: GPT, n_tokens: int) -> Callable:
        if n_tokens not in self.token_counts:
            return _eager_static_forward  # a prompt: eager, any length

        def run(model, idx, input_pos, k_caches, v_caches, context):
            label = f"{model_label(model)}:T{n_tokens}:B{idx.size(0)}:S{context}"
            return self.call(static_forward, (model,), label, idx, input_pos, k_caches, v_caches,
                             self.gemv_max_rows, context)
        return run

    def call(self, fn: Callable, models: tuple[GPT, ...], label: str, *args):
        """fn(*models, *args) compiled, with each model's weights frozen into its graphs.

        A call whose arguments have a layout this engine has seen for (fn, models) calls that
        graph straight (core/direct_calls.py). Any other goes through dynamo and may compile: the
        first for a new (fn, models, shapes), and a later one whose guards fail (an eager forward of
        the same model sets its cache attributes, which dynamo guards). So such a call names its
        freezing and weights key, which a compile applies (core/compile_settings.py), and a call
        after which inductor has loaded new generated code is timed into compile_ms[label] and its
        kernels into kernels[label].
        """
        for model in models:
            self._check_weights(model)
        tensors, layout = split_arguments(args)
        key = (fn, models, layout)
        # without gradients, as they were compiled (a graph called with them on costs 0.05 ms more)
        with torch.no_grad() if torch.is_grad_enabled() else nullcontext():
            for direct in self._direct.get(key, ()):
                if direct.serves(tensors):
                    return direct(tensors)
            result = self._call_through_dynamo(fn, models, label, args)
        captured = self._capture.take()
        if len(captured) == 1 and self.call_straight:
            direct = DirectCall.from_capture(captured[0], tensors, result)
            if direct is not None:
                self._direct.setdefault(key, []).append(direct)
        return result

    def _call_through_dynamo(self, fn: Callable, models: tuple[GPT, ...], label: str, args: tuple):
        compiled = self._functions.get(fn)
        if compiled is None:
            compiled = self._functions[fn] = torch.compile(fn, fullgraph=True, dynamic=False,
                                                           backend=self._capture)
        self._capture.take()  # what an earlier call that failed may have left

        def run():
            with engine_call_settings(self.freeze_weights, self._weights_key(models)):
                return compiled(*models, *args)
        return self._accounted(label, run)

    def _weights_key(self, models: tuple[GPT, ...]) -> WeightsKey | None:
        """What names these models' frozen weights in the on-disk graph cache (None when the weights
        are graph inputs). Hashed once per model: _check_weights refuses weights changed since."""
        if not self.freeze_weights:
            return None
        digest = self._graph_cache.weights_digest
        digests = tuple(self._digests.get(m) or self._digests.setdefault(m, digest(m)) for m in models)
        key = self._weights_keys.get(digests)
        if key is None:
            key = self._weights_keys[digests] = self._graph_cache.WeightsKey(digests)
        return key

    def _accounted(self, label: str, run: Callable):
        """run(), and when it compiled (inductor loaded new generated code) its time, its kernels, and
        how many of its graphs inductor compiled and how many it loaded from its on-disk cache: a
        compile time is a compile's only when nothing came from the cache."""
        generated = self._generated_code
        generated_before, cache_before = len(generated.modules), _graph_cache_lookups()
        start = time.perf_counter()
        out = run()
        if len(generated.modules) > generated_before:
            label = _unique(label, self.compile_ms)
            self.compile_ms[label] = (time.perf_counter() - start) * 1e3
            self.kernels[label] = count_kernels(generated.modules[generated_before:])
            hits, misses = (after - before for after, before in zip(_graph_cache_lookups(), cache_before, strict=True))
            self.graph_cache_loads[label] = {"from_cache": hits, "compiled": misses}
        return out

    def _check_weights(self, model: GPT) -> None:
        """Frozen graphs hold the weights they were compiled with: a model whose weights changed
        since (an optimizer step, load_state_dict, an in-place edit) is refused, never run stale."""
        if not self.freeze_weights:
            return
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
                               "graphs; build a new engine (make_engine('compiled')) for the new weights")

    def record_compiled_beside(self, label: str, helper_stamp: dict | None, wait_ms: float) -> None:
        """Another process compiled graphs for this engine's later calls into inductor's on-disk cache
        (inferlab.speculative.compile_ahead), while this one compiled others: the time this process
        waited for it counts as compile time (compile_ms[label]), and its stamp (None if it failed)
        is kept, so its compiles count as this engine's and the loads of what it compiled do not
        count as graphs from earlier jobs."""
        self.compile_ms[label] = wait_ms
        self.compiled_beside[label] = helper_stamp

    def _graph_counts(self) -> dict[str, int]:
        """Graphs inductor compiled for this engine, here or beside it, and graphs it loaded that
        earlier processes had compiled. Every graph the helper compiled or loaded is loaded here again
        (so counted here); it is an earlier process's only when the helper did not compile it."""
        compiled = sum(loads["compiled"] for loads in self.graph_cache_loads.values())
        loaded = sum(loads["from_cache"] for loads in self.graph_cache_loads.values())
        compiled_beside = sum(stamp["graphs_compiled"] for stamp in self.compiled_beside.values() if stamp)
        return {"graphs_from_cache": max(0, loaded - compiled_beside), "graphs_compiled": compiled + compiled_beside,
                "graphs_compiled_beside": compiled_beside}

    def stamp(self) -> dict:
        return {"engine": self.requested, "engine_used": self.engine_used, "engine_fallback_reason": None,
                "compile_ms_total": float(sum(self.compile_ms.values())),
                "compile_ms": dict(self.compile_ms), "graph_cache_loads": dict(self.graph_cache_loads),
                **self._graph_counts(), "compiled_beside": dict(self.compiled_beside),
                "inductor_options": self.options,
                "frozen_weights": self.freeze_weights, "graph_cache": self.graph_cache,
                "gemv_max_rows": self.gemv_max_rows, "call_straight": self.call_straight,
                "graphs_called_straight": sum(len(graphs) for graphs in self._direct.values()),
                "kernels": dict(self.kernels)}


Engine = EagerEngine | CompiledEngine


def _smoke_compile(engine: CompiledEngine) -> None:
    """Compiles and runs a one-layer toy step, so a platform without a working inductor
    toolchain (no C++ compiler, unsupported backend) fails here, not in the middle of a table."""
    from inferlab.core.config import GPTConfig
    # the same weights in every process, so that inductor's on-disk cache serves the toy's graph
    # after the first job on a machine, which saves each later job about a second;
    # forked, so that the caller's random stream is left as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        toy = GPT(GPTConfig(vocab_size=32, d_model=64, n_layer=1, max_seq_len=8)).eval()
    session = engine.open(toy)
    session.forward(torch.zeros(1, 1, dtype=torch.long), 0)


def make_engine(name: str, check: bool = True, **options) -> Engine:
    """The engine called `name`; "compiled" falls back to eager, with the reason, if it cannot compile."""
    if name == "eager":
        return EagerEngine()
    if name != "compiled":
        raise ValueError(f"engine must be one of {ENGINE_NAMES}, got {name!r}")
    try:
        engine = CompiledEngine(**options)
        if check:
            _smoke_compile(engine)
            engine.compile_ms.clear()
            engine.kernels.clear()
            engine.graph_cache_loads.clear()
        return engine
    except Exception as error:  # any compiler/toolchain failure: record it, never hide it
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        log.warning("compiled engine unavailable, falling back to eager: %s", reason)
        return EagerEngine(fallback_reason=reason, requested="compiled")
