"""Target-only sampling's compiled step (its forward and its draw as one graph)
as AOTInductor packages, one per context bucket a decode crosses: the baseline every group job times."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.engine import CompiledEngine
from inferlab.core.packages import build_packages, graph_dirs
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.speculative.bench import build_target_only_graphs
from inferlab.speculative.decode import SamplingSettings
from inferlab.speculative.forwards import encode_prompts

smk = snakemake  # noqa: F821
p = smk.params
lineage = job_lineage(smk.rule, smk.params.items(), smk.input)
log = start_job(smk.log[0], smk.threads, lineage=lineage)
vocab = load_vocabulary(smk.input.vocab)
target, _ = load_checkpoint(Path(smk.input.meta).parent, expected_vocab_sha256=vocab.sha256())
directory = Path(smk.output.packages)
engine = CompiledEngine(graph_dirs=graph_dirs(smk.input), build_dir=directory, threads=p.timing_threads)
build_packages(directory, Path(smk.output.manifest), lineage, lambda: build_target_only_graphs(
    target, encode_prompts(vocab, p.prompts), p.new_tokens, SamplingSettings(temperature=p.temperature, top_p=p.top_p),
    engine), log)
