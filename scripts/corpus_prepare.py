"""Normalise, split and encode the corpus."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.corpus.text import prepare, read_corpus
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.tables import write_json

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
prepared = prepare(read_corpus(smk.input[0]), smk.params.val_fraction, smk.params.vocab_size, source=smk.input[0])
prepared.save(smk.output)
write_json(prepared.stats, smk.output.stats)
