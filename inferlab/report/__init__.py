"""The report: milestones, figures, HTML/Markdown rendering, data exports, sampling workbench.

Everything here takes plain paths, DataFrames and dicts; scripts/report.py is the only caller
that knows about Snakemake. Every section degrades to "missing" when its tables are absent.
"""
