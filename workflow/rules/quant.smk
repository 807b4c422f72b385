# Experiment 4: weight quantization.
#
#   compile_quant (fp32's packages, and each kernel scheme's) -> quant_scheme (one job per scheme in
#   quantization.schemes) -> quant_summary (verdicts against the noise floor, summary + choice)
#
# Each scheme job quantises every Linear in the target's blocks (the tied embedding stays fp32),
# evaluates fp32 and quantised weights on the full validation split in the same process, and,
# where the scheme has a low-bit kernel on the CPU, times cached decode against fp32. Scheme
# names and their parameters live in the SCHEMES table (inferlab/quant/schemes.py, torch-free, re-exported
# by inferlab/quant/methods.py). The speed settings
# go to every scheme job (which scheme has a kernel is known only to that table).

QUANT = config["quantization"]
QUANT_SCHEMES = list(QUANT["schemes"])
QUANT_DIR = "results/quant"
_QUANT_SEQ_LEN = train_config(TARGET)["seq_len"]
# the packages of fp32's decode, timed beside every kernel scheme's
QUANT_REFERENCE = "fp32"
QUANT_KERNEL_SCHEMES = [scheme for scheme in QUANT_SCHEMES if SCHEMES[scheme].kernel]

# only the calibrating schemes get the GPTQ settings: editing them reruns only those jobs
QUANT_GPTQ = lambda w: QUANT["gptq"] if calibrates(w.scheme) else None


rule quant_scheme:
    input:
        unpack(lambda w: speed_graphs(w.scheme, QUANT_KERNEL_SCHEMES, QUANT_REFERENCE)),
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
        gptq=QUANT_GPTQ,
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


# Experiment 4's packages (fp32's once, then each kernel scheme's kernel model), built before its scheme
# jobs time them, for their thread count. GPTQ's codes depend on the thread count its matmuls split
# over, so a calibrating scheme quantises here with the scheme job's threads, and its package holds
# the very weights that job times (a package of other weights is refused, never run).
rule compile_quant:
    input:
        **checkpoint(TARGET),
        train=CORPUS["train"],
        vocab=CORPUS["vocab"],
    output:
        packages=directory(f"{GRAPHS_DIR}/quant/{{scheme}}"),
        manifest=f"{GRAPHS_DIR}/quant/{{scheme}}.json",
    params:
        code_sha256=code_hash("graphs_quant"),
        timing_threads=TIMING_THREADS,
        scheme=lambda w: None if w.scheme == QUANT_REFERENCE else w.scheme,
        seq_len=_QUANT_SEQ_LEN,
        gptq=QUANT_GPTQ,
        speed={key: QUANT["speed"][key] for key in ("prompt", "new_tokens")},
    log:
        "logs/compile_quant/{scheme}.log",
    benchmark:
        "results/benchmarks/compile_quant/{scheme}.tsv"
    wildcard_constraints:
        scheme="|".join([QUANT_REFERENCE, *QUANT_KERNEL_SCHEMES]),
    threads: lambda w: TIMING_THREADS if calibrates(w.scheme) else 1
    priority: COMPILE_PRIORITY
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../../scripts/graphs_quant.py"


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
