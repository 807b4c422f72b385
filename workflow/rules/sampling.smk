# Experiment 2: temperature x top-p (and min-p) -- the next-token distribution for one prompt,
# repetition per grid cell (one job per cell), the human reference row (validation text scored the
# same way), and the default setting chosen by the config rule.

import re

from inferlab.sampling.grid import repetition_cells, sampling_cells

SAMPLING = config["sampling"]


# Cell id -> settings, in grid order (one enumeration, shared with the report).
SAMPLING_CELLS = sampling_cells(SAMPLING)
REPETITION_CELLS = repetition_cells(SAMPLING)


rule sampling_distribution:
    input:
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
        stats=CORPUS["stats"],
    output:
        logits="results/sampling/logits.json",
        table="results/sampling/distribution.parquet",
    params:
        code_sha256=code_hash("sampling_distribution"),
        prompt=SAMPLING["prompt"],
        model=TARGET,
        cells=list(SAMPLING_CELLS.values()),
    log:
        "logs/sampling/distribution.log",
    benchmark:
        "results/benchmarks/sampling/distribution.tsv"
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_distribution.py"


rule sampling_cell:
    input:
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
        stats=CORPUS["stats"],
        train=CORPUS["train"],
    output:
        "results/sampling/cells/{cell}.parquet",
    params:
        code_sha256=code_hash("sampling_cell"),
        model=TARGET,
        cell=lambda w: REPETITION_CELLS[w.cell],
        prompts=SAMPLING["repetition"]["prompts"],
        samples=SAMPLING["repetition"]["samples"],
        new_tokens=SAMPLING["repetition"]["new_tokens"],
        seed=SAMPLING["repetition"]["seed"],
    log:
        "logs/sampling/cell/{cell}.log",
    benchmark:
        "results/benchmarks/sampling/cell/{cell}.tsv"
    wildcard_constraints:
        cell="|".join(re.escape(c) for c in REPETITION_CELLS),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_cell.py"


rule sampling_human:
    input:
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
        stats=CORPUS["stats"],
        train=CORPUS["train"],
        val=CORPUS["val"],
    output:
        "results/sampling/cells/human.parquet",
    params:
        code_sha256=code_hash("sampling_human"),
        model=TARGET,
        prompts=SAMPLING["repetition"]["prompts"],
        samples=SAMPLING["repetition"]["samples"],
        new_tokens=SAMPLING["repetition"]["new_tokens"],
        seed=SAMPLING["repetition"]["seed"],
    log:
        "logs/sampling/human.log",
    benchmark:
        "results/benchmarks/sampling/human.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_human.py"


rule sampling_repetition:
    input:
        expand("results/sampling/cells/{cell}.parquet", cell=[*REPETITION_CELLS, "human"]),
    output:
        summary="results/sampling/repetition.parquet",
        examples="results/sampling/samples.parquet",
        samples="results/sampling/per_sample.parquet",
    params:
        code_sha256=code_hash("sampling_repetition"),
        resamples=SAMPLING["repetition"]["bootstrap_resamples"],
        seed=SAMPLING["repetition"]["seed"],
        example_texts=SAMPLING["repetition"]["example_texts"],
    log:
        "logs/sampling/repetition.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_repetition.py"


rule sampling_default:
    input:
        summary="results/sampling/repetition.parquet",
        samples="results/sampling/per_sample.parquet",
        distribution="results/sampling/distribution.parquet",
    output:
        default="results/sampling/default.parquet",
        distances="results/sampling/distance.parquet",
    params:
        code_sha256=code_hash("sampling_default"),
        rule=SAMPLING["default_rule"],
        resamples=SAMPLING["repetition"]["bootstrap_resamples"],
        seed=SAMPLING["repetition"]["seed"],
    log:
        "logs/sampling/default.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_default.py"
