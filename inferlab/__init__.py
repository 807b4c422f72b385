"""inferlab: the logic of the C13 inference lab.

This package never reads YAML or the Snakemake object; scripts/ translate the workflow's
config into plain arguments and call in here.
"""
