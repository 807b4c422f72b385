"""One speculative group's own compiled graphs as AOTInductor packages: its
fused rounds (one per context bucket a decode crosses) and its draft half; anything its group job
runs that the models' and target-only sampling's packages lack is built here too."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.engine import CompiledEngine
from inferlab.core.packages import UNAVAILABLE, build_packages, graph_dirs
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.speculative.bench import build_group_graphs
from inferlab.speculative.decode import SamplingSettings
from inferlab.speculative.forwards import encode_prompts

smk = snakemake  # noqa: F821
p = smk.params
lineage = job_lineage(smk.rule, smk.params.items(), smk.input)
log = start_job(smk.log[0], smk.threads, lineage=lineage)
vocab = load_vocabulary(smk.input.vocab)
target, _ = load_checkpoint(Path(smk.input.target_meta).parent, expected_vocab_sha256=vocab.sha256())
draft, _ = load_checkpoint(Path(smk.input.draft_meta).parent, expected_vocab_sha256=vocab.sha256())
models_graphs = graph_dirs(smk.input)
directory = Path(smk.output.packages)
engine = CompiledEngine(graph_dirs=models_graphs, build_dir=directory, threads=p.timing_threads)


def build():
    for graphs in models_graphs:
        if (graphs / UNAVAILABLE).exists():
            raise RuntimeError((graphs / UNAVAILABLE).read_text().strip())
    build_group_graphs(target, draft, encode_prompts(vocab, p.prompts), p.new_tokens, p.k,
                       SamplingSettings(temperature=p.temperature, top_p=p.top_p), engine)


build_packages(directory, Path(smk.output.manifest), lineage, build, log)
