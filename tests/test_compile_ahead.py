"""A group job compiles its forward timing's graphs in a helper process beside its decoders' graphs."""

from __future__ import annotations

import logging

from inferlab.core.checkpoint import save_checkpoint
from inferlab.core.engine import make_engine
from inferlab.speculative.bench import run_forward_timing
from inferlab.speculative.compile_ahead import HELPER_LABEL, forward_timing_compiled_beside
from inferlab.speculative.decode import SamplingSettings
from tests.test_speculative import perturbed, tiny_gpt

K, CONTEXT = 2, 6
# the one-token step (target and draft share the graph: same shapes, weights as inputs), the (k+1)-row
# verification and the round's draft half
FORWARD_TIMING_GRAPHS = 3


def _compiled_engine():
    """Inductor's default lowering with the weights as graph inputs: its graphs compile several times
    faster than the frozen template ones, and the helper takes its options from the engine. Not
    smoke-compiled here (check=False): the helper's own engine is, and fails the test if it cannot."""
    return make_engine("compiled", check=False, inductor_options={}, freeze_weights=False)


def _request(target_dir, draft_dir) -> dict:
    return {"target_dir": str(target_dir), "draft_dir": str(draft_dir), "vocab_sha256": None, "context": CONTEXT,
            "k": K, "settings": vars(SamplingSettings())}


def test_the_forward_timing_loads_every_graph_the_helper_compiled(tmp_path):
    # weights and shapes no other test compiles, so none of these graphs is in inductor's on-disk cache before
    target = tiny_gpt(32, 23, scale=1.0, block_scale=5.0)
    draft = perturbed(target, 0.1, 23)
    for name, model in (("target", target), ("draft", draft)):
        save_checkpoint(model, {"name": name, "val_loss": 0.0}, tmp_path / name)
    engine = _compiled_engine()
    with forward_timing_compiled_beside(engine, _request(tmp_path / "target", tmp_path / "draft")):
        pass  # where a group job compiles its decoders' graphs (compile_decoders)
    assert set(engine.compile_ms) == {HELPER_LABEL}  # the wait for the helper is compile time

    run_forward_timing(target, draft, CONTEXT, K, reps=0, engine=engine, settings=SamplingSettings())
    stamp = engine.stamp()
    loads = {label: counts for label, counts in stamp["graph_cache_loads"].items()}
    assert len(loads) == FORWARD_TIMING_GRAPHS and any(label.startswith("draft_half:") for label in loads), loads
    assert all(counts == {"from_cache": 1, "compiled": 0} for counts in loads.values()), loads
    helper = stamp["compiled_beside"][HELPER_LABEL]
    assert helper["graphs_compiled"] == FORWARD_TIMING_GRAPHS and helper["graphs_from_cache"] == 0
    # each graph counts once, as compiled: loading what the helper compiled for this job is no earlier job's
    assert stamp["graphs_compiled"] == stamp["graphs_compiled_beside"] == FORWARD_TIMING_GRAPHS
    assert stamp["graphs_from_cache"] == 0



def test_each_graph_counts_once_whether_the_helper_compiled_it_or_loaded_it():
    """The job loads every graph its helper compiled or loaded: the helper's compiles are the job's, its
    loads of what earlier jobs compiled count once, as loads (here 2 compiled beside, 1 loaded beside,
    and the job's own round compiled)."""
    engine = _compiled_engine()
    engine.graph_cache_loads = {"round": {"from_cache": 0, "compiled": 1},
                                **{f"forward {i}": {"from_cache": 1, "compiled": 0} for i in range(3)}}
    engine.record_compiled_beside(HELPER_LABEL, {"graphs_compiled": 2, "graphs_from_cache": 1}, 5.0)
    stamp = engine.stamp()
    assert (stamp["graphs_compiled"], stamp["graphs_compiled_beside"], stamp["graphs_from_cache"]) == (3, 2, 1)
    assert stamp["compile_ms"] == {HELPER_LABEL: 5.0}


def test_a_failed_helper_is_logged_and_leaves_the_job_to_compile_itself(tmp_path, caplog):
    engine = _compiled_engine()
    with caplog.at_level(logging.WARNING), forward_timing_compiled_beside(
            engine, _request(tmp_path / "no target", tmp_path / "no draft")):
        pass
    assert "the job compiles them itself" in caplog.text
    assert engine.compiled_beside == {HELPER_LABEL: None}
    assert engine.stamp()["graphs_compiled_beside"] == 0 and HELPER_LABEL in engine.compile_ms
