"""A group's compiled graphs, built before anything is timed, in two processes at once.

A group job on the compiled engine compiles two sets of graphs: what its decoders run (the fused
round, the sampled step of target-only decoding) and what only its forward timing runs (each
model's one-token step, the (k+1)-token verification and the round's draft half). Each graph
compiles in one Python thread and then one g++ process, so a job used one of its two cores for
most of its compile time. Here a helper process compiles the forward timing's graphs into
inductor's on-disk graph cache while the job compiles its decoders' graphs; the job waits for the
helper before it times anything, and its forward timing then loads those graphs from the cache.
A helper that fails costs nothing but its time: the job then compiles those graphs itself.

The helper is a plain `python -m` process, not a multiprocessing child: a Snakemake job's main
module is its script, which a spawned child would run again from the top.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

import inferlab
from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.engine import CompiledEngine, make_engine
from inferlab.speculative.bench import run_forward_timing
from inferlab.speculative.decode import SamplingSettings

log = logging.getLogger(__name__)
HELPER_LABEL = "forward timing, compiled beside"


def compile_forward_timing_graphs(request: dict) -> dict:
    """What the helper runs: the forward timing's cases, each called once (so compiled), on a compiled
    engine of its own at the job's thread count (inductor's generated code depends on it, and so do
    the cache's keys). Returns that engine's stamp."""
    torch.set_num_threads(request["threads"])
    target, _ = load_checkpoint(request["target_dir"], expected_vocab_sha256=request["vocab_sha256"])
    draft, _ = load_checkpoint(request["draft_dir"], expected_vocab_sha256=request["vocab_sha256"])
    # no smoke compile (check=False): the job's engine had one, and a failure here fails only the helper
    engine = make_engine("compiled", check=False, **request["engine_options"])
    run_forward_timing(target, draft, request["context"], request["k"], reps=0, engine=engine,
                       settings=SamplingSettings(**request["settings"]))
    return engine.stamp()


@contextmanager
def forward_timing_compiled_beside(engine: CompiledEngine, request: dict):
    """Within: a helper process compiles the forward timing's graphs (compile_forward_timing_graphs
    with `request`: target_dir, draft_dir, vocab_sha256, context, k and settings, as the job's forward
    timing will use them; the engine's options and this process's thread count are added) into the
    on-disk cache. On exit the caller waits for it; the wait counts as the
    engine's compile time, and the helper's compiles are recorded in the engine's stamp."""
    request = request | {"threads": torch.get_num_threads(), "engine_options": engine.constructor_options()}
    with tempfile.TemporaryDirectory(prefix="inferlab-compile-") as scratch:
        stamp_path = Path(scratch) / "stamp.json"
        root = str(Path(inferlab.__file__).resolve().parent.parent)  # this checkout's inferlab, first
        env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        helper = subprocess.Popen([sys.executable, "-m", __name__, json.dumps(request), str(stamp_path)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=_stream_or_none(sys.stderr))
        try:
            yield
        except BaseException:
            helper.kill()
            helper.wait()
            raise
        start = time.perf_counter()
        returncode = helper.wait()
        wait_ms = (time.perf_counter() - start) * 1e3
        if returncode == 0 and stamp_path.exists():
            engine.record_compiled_beside(HELPER_LABEL, json.loads(stamp_path.read_text()), wait_ms)
        else:
            log.warning("the helper compiling the forward timing's graphs failed (exit %s); "
                        "the job compiles them itself", returncode)
            engine.record_compiled_beside(HELPER_LABEL, None, wait_ms)


def _stream_or_none(stream):
    """stream when the helper can write to it (a real file: the job's log), else None (inherit)."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return stream


def main(argv: list[str]) -> int:
    request, stamp_path = json.loads(argv[1]), Path(argv[2])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s helper %(message)s")
    stamp = compile_forward_timing_graphs(request)
    stamp_path.write_text(json.dumps(stamp))
    log.info("compiled %d graphs (%d from the cache) in %.1f s", stamp["graphs_compiled"],
             stamp["graphs_from_cache"], stamp["compile_ms_total"] / 1e3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
