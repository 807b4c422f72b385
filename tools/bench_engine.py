"""Benchmark (not a test): ms per cached decode step, eager against compiled engine variants.

Usage: .venv/bin/python tools/bench_engine.py [--lengths 32 64 128 256] [--reps 30] [--variants ...]

A random model of ref_baseline's shape (d_model 256, 4 layers, vocab 2112) is enough: the
time of a step does not depend on the weights. For each length the cache holds length-1
tokens and the step decodes the last one. Variants are interleaved rep by rep, so a busy
neighbour slows all of them alike; quote the same-run ratios to eager, not the milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferlab.core.config import GPTConfig
from inferlab.core.engine import make_engine
from inferlab.core.model import GPT

VARIANTS = {
    "eager": ("eager", {}),
    "compiled": ("compiled", {}),
    "cpp_wrapper": ("compiled", {"cpp_wrapper": True}),
    "freezing": ("compiled", {"freezing": True}),
    "max_autotune": ("compiled", {"max_autotune": True}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_model=256, n_layer=4, vocab_size=2112)).eval()
    engines = {}
    for label in args.variants:
        name, options = VARIANTS[label]
        engines[label] = make_engine(name, check=False, **({"inductor_options": options} if options else {}))
    ids = torch.randint(model.config.vocab_size, (1, max(args.lengths)))
    print(f"threads={torch.get_num_threads()} reps={args.reps}")
    for length in args.lengths:
        sessions = {}
        for label, engine in engines.items():
            session = engine.open(model, 1, length)
            if length > 1:
                session.forward(ids[:, : length - 1], 0)
            start = time.perf_counter()
            session.forward(ids[:, length - 1: length], length - 1)  # compiles on first use
            first_ms = (time.perf_counter() - start) * 1e3
            sessions[label] = (session, first_ms)
        times: dict[str, list[float]] = {label: [] for label in sessions}
        for _ in range(args.reps):
            for label, (session, _) in sessions.items():
                start = time.perf_counter()
                session.forward(ids[:, length - 1: length], length - 1)
                times[label].append((time.perf_counter() - start) * 1e3)
        eager = times.get("eager", [float("nan")])
        for label, values in times.items():
            median = statistics.median(values)
            # under contention the median measures the neighbours; the min is the closest to the step's cost
            print(f"len={length:4d} {label:13s} median {median:7.3f} ms  min {min(values):7.3f}  "
                  f"eager/this median {statistics.median(eager) / median:5.2f}x  min {min(eager) / min(values):5.2f}x  "
                  f"first call {sessions[label][1]:8.0f} ms")
        for session, _ in sessions.values():
            session.close()


if __name__ == "__main__":
    main()
