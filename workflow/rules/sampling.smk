# Experiment 2: temperature x top-p (and min-p) -- the next-token distribution for one prompt,
# repetition per grid cell (one job per cell), the human reference row (validation text scored the
# same way), and the default setting chosen by the config rule.

import re

SAMPLING = config["sampling"]


# Cell id -> settings, in grid order. Ids: T0.7_p0.9 (top-p), T1.0_minp0.05 (min-p).
SAMPLING_CELLS = {
    cell["cell"]: cell
    for cell in [
        *[{"cell": f"T{float(t)}_p{float(p)}", "truncation": "top_p", "temperature": float(t),
           "top_p": float(p), "min_p": 0.0}
          for t in SAMPLING["temperatures"] for p in SAMPLING["top_ps"]],
        *[{"cell": f"T{float(t)}_minp{float(m)}", "truncation": "min_p", "temperature": float(t),
           "top_p": 1.0, "min_p": float(m)}
          for t in SAMPLING["min_p"]["temperatures"] for m in SAMPLING["min_p"]["values"]],
    ]
}
# greedy is the baseline of the repetition table (temperature 0 = argmax)
REPETITION_CELLS = {"greedy": {"cell": "greedy", "truncation": "none", "temperature": 0.0,
                               "top_p": 1.0, "min_p": 0.0}, **SAMPLING_CELLS}


rule sampling_distribution:
    input:
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
        stats=CORPUS["stats"],
    output:
        logits="results/sampling/logits.json",
        table="results/sampling/distribution.parquet",
    params:
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
        rule=SAMPLING["default_rule"],
        resamples=SAMPLING["repetition"]["bootstrap_resamples"],
        seed=SAMPLING["repetition"]["seed"],
    log:
        "logs/sampling/default.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/sampling_default.py"


SAMPLING_OUTPUTS = [
    "results/sampling/logits.json",
    "results/sampling/distribution.parquet",
    "results/sampling/repetition.parquet",
    "results/sampling/samples.parquet",
    "results/sampling/default.parquet",
    "results/sampling/distance.parquet",
]
