"""Fetch Gutenberg #23950 when the configured corpus path holds no file."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.corpus.download import download_corpus
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
download_corpus(smk.params.url, smk.output[0], configured_path=smk.params.configured_path,
                expected_sha256=smk.params.sha256)
