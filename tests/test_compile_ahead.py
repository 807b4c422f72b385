"""A group job compiles its forward timing's graphs in a helper process beside its decoders' graphs.

That the helper finds the job's graphs under the job's own keys (the same models, engine options and
thread count) is tested in tests/test_engine.py, on graphs that module compiles anyway."""

from __future__ import annotations

import inspect
import json
import logging

from inferlab.core.engine import CompiledEngine, make_engine
from inferlab.speculative.compile_ahead import HELPER_LABEL, forward_timing_compiled_beside


def test_each_graph_counts_once_whether_the_helper_compiled_it_or_loaded_it():
    """The job loads every graph its helper compiled or loaded: the helper's compiles are the job's, its
    loads of what earlier jobs compiled count once, as loads (here 2 compiled beside, 1 loaded beside,
    and the job's own round compiled)."""
    engine = make_engine("compiled", check=False)
    engine.graph_cache_loads = {"round": {"from_cache": 0, "compiled": 1},
                                **{f"forward {i}": {"from_cache": 1, "compiled": 0} for i in range(3)}}
    engine.record_compiled_beside(HELPER_LABEL, {"graphs_compiled": 2, "graphs_from_cache": 1}, 5.0)
    stamp = engine.stamp()
    assert (stamp["graphs_compiled"], stamp["graphs_compiled_beside"], stamp["graphs_from_cache"]) == (3, 2, 1)
    assert stamp["compile_ms"] == {HELPER_LABEL: 5.0}  # the wait for the helper is compile time


def test_a_failed_helper_is_logged_and_leaves_the_job_to_compile_itself(tmp_path, caplog):
    engine = make_engine("compiled", check=False)
    request = {"target_dir": str(tmp_path / "no target"), "draft_dir": str(tmp_path / "no draft"),
               "vocab_sha256": None, "context": 6, "k": 2, "settings": {}}
    with caplog.at_level(logging.WARNING), forward_timing_compiled_beside(engine, request):
        pass
    assert "the job compiles them itself" in caplog.text
    assert engine.compiled_beside == {HELPER_LABEL: None}
    assert engine.stamp()["graphs_compiled_beside"] == 0 and HELPER_LABEL in engine.compile_ms


def test_the_helpers_engine_is_rebuilt_from_every_argument_of_the_jobs_engine():
    """The helper gets the job's engine as constructor_options() (through JSON): every argument of
    CompiledEngine, so an option added to the engine cannot be missed by the helper (which would then
    compile under other cache keys) or by the profiling twin."""
    job = make_engine("compiled", check=False, token_counts=(1, 3), gemv_max_rows=2, call_straight=False,
                      freeze_weights=False, inductor_options={"max_autotune": False, "cpp_wrapper": True})
    options = job.constructor_options()
    assert set(options) == set(inspect.signature(CompiledEngine.__init__).parameters) - {"self"}
    helper = make_engine("compiled", check=False, **json.loads(json.dumps(options)))
    assert helper.constructor_options() == options
    twin = job.with_kernel_events().constructor_options()
    assert twin == options | {"inductor_options": options["inductor_options"] | {"cpp.enable_kernel_profile": True}}
