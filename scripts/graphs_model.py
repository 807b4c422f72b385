"""One model's compiled forwards as AOTInductor packages: on the target, every
graph Experiment 1 runs and the steps and verifications the speculative groups time; on a draft, its
timed step. The packages are compiled for the timing jobs' thread count, whatever this job runs with."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.engine import CompiledEngine
from inferlab.core.packages import build_packages
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import resolve_device
from inferlab.kvcache.bench import build_kvcache_graphs
from inferlab.speculative.forwards import build_forward_graphs, encode_prompts

smk = snakemake  # noqa: F821
p = smk.params
lineage = job_lineage(smk.rule, smk.params.items(), smk.input)
log = start_job(smk.log[0], smk.threads, lineage=lineage)
vocab = load_vocabulary(smk.input.vocab)
# Experiment 1's graphs on the device its timing jobs run on (a package is built for one device, and the
# engine refuses it on another); the speculative groups' run on the CPU
kv_device = resolve_device(p.kvcache["device"]) if p.kvcache else "cpu"
model, _ = load_checkpoint(Path(smk.input.meta).parent, expected_vocab_sha256=vocab.sha256())
directory = Path(smk.output.packages)
engine = CompiledEngine(build_dir=directory, threads=p.timing_threads)


def build():
    if p.kvcache:
        prompt, _ = encode_prompt(vocab, p.kvcache["prompt"], kv_device)
        build_kvcache_graphs(model.to(kv_device), prompt, max(p.kvcache["lengths"]), p.kvcache["step_points"],
                             kv_device, engine)
        model.to("cpu")
    build_forward_graphs(model, encode_prompts(vocab, p.prompts), p.new_tokens, tuple(p.token_counts), engine)


build_packages(directory, Path(smk.output.manifest), lineage, build, log)
