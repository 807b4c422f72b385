"""Fetch Gutenberg #23950 when the configured corpus path holds no file."""

from inferlab.download import download_corpus
from inferlab.jobs import start_job

start_job(snakemake.log[0], 1)  # noqa: F821
download_corpus(snakemake.params.url, snakemake.output[0])  # noqa: F821
