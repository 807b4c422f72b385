"""Experiment 4's compiled decodes as AOTInductor packages: fp32's (inductor's default lowering, like
the kernel models', so each speed ratio compares like with like) or one scheme's kernel model's. The
packages are compiled for the timing jobs' thread count, whatever this job runs with."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint import load_checkpoint, load_token_ids
from inferlab.core.engine import CompiledEngine
from inferlab.core.packages import build_packages
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.quant.bench import KERNEL_INDUCTOR_OPTIONS, build_speed_graphs

smk = snakemake  # noqa: F821
p = smk.params
lineage = job_lineage(smk.rule, smk.params.items(), smk.input)
log = start_job(smk.log[0], smk.threads, lineage=lineage)
vocab = load_vocabulary(smk.input.vocab)
model, _ = load_checkpoint(Path(smk.input.meta).parent, expected_vocab_sha256=vocab.sha256())
directory = Path(smk.output.packages)
engine = CompiledEngine(build_dir=directory, inductor_options=KERNEL_INDUCTOR_OPTIONS, threads=p.timing_threads)
prompt, _ = encode_prompt(vocab, p.speed["prompt"])

build_packages(directory, Path(smk.output.manifest), lineage, lambda: build_speed_graphs(
    model, p.scheme, load_token_ids(smk.input.train), p.seq_len, prompt, p.speed["new_tokens"], p.gptq, engine), log)
