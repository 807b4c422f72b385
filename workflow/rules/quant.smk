# Experiment 4: weight quantization.
#
#   quant_scheme (one job per scheme in quantization.schemes) -> quant_summary (verdicts against the
#   noise floor, summary + choice)
#
# Each scheme job quantises every Linear in the target's blocks (the tied embedding stays fp32),
# evaluates fp32 and quantised weights on the full validation split in the same process, and,
# where the scheme has a low-bit kernel on the CPU, times cached decode against fp32. Scheme
# names and their parameters live in the SCHEMES table (inferlab/quant/schemes.py, torch-free, re-exported
# by inferlab/quant/methods.py). The speed settings
# go to every scheme job (which scheme has a kernel is known only to that table).

from inferlab.quant.schemes import SCHEMES

QUANT = config["quantization"]
QUANT_SCHEMES = list(QUANT["schemes"])
QUANT_DIR = "results/quant"
_QUANT_SEQ_LEN = train_config(TARGET)["seq_len"]



rule quant_scheme:
    input:
        **checkpoint(TARGET),
        val=CORPUS["val"],
        train=CORPUS["train"],
        vocab=CORPUS["vocab"],
    output:
        f"{QUANT_DIR}/{{scheme}}.parquet",
    params:
        code_sha256=code_hash("quant_scheme"),
        scheme="{scheme}",
        model_name=TARGET,
        seq_len=_QUANT_SEQ_LEN,
        # only the calibrating schemes get the GPTQ settings: editing them reruns only those jobs
        gptq=lambda w: QUANT["gptq"] if SCHEMES[w.scheme].method == "gptq" else None,
        speed=QUANT["speed"],
        engines=config["engine"],
    log:
        "logs/quant_scheme/{scheme}.log",
    benchmark:
        "results/benchmarks/quant_scheme/{scheme}.tsv"
    wildcard_constraints:
        scheme="|".join(QUANT_SCHEMES),
    threads: TIMING_THREADS
    conda:
        CONDA_ENV
    resources:
        mem_mb=6000,
        runtime=lambda w: 30 if SCHEMES[w.scheme].method == "gptq" else 15,
    script:
        "../../scripts/quant_scheme.py"


rule quant_summary:
    input:
        schemes=expand(f"{QUANT_DIR}/{{scheme}}.parquet", scheme=QUANT_SCHEMES),
        # the verdicts are decided here, so a new floor re-judges every scheme without re-timing any
        floor="results/noise_floor.parquet",
    output:
        summary=f"{QUANT_DIR}/summary.parquet",
        choice=f"{QUANT_DIR}/choice.parquet",
    params:
        code_sha256=code_hash("quant_summary"),
        schemes=QUANT_SCHEMES,
        gptq=QUANT["gptq"],
    log:
        "logs/quant_summary.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/quant_summary.py"
