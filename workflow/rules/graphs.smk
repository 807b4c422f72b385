# Compiled graphs. Every graph the compiled engine runs is an AOTInductor package (a .pt2 file,
# inferlab/core/packages.py) built here: once per model (its steps, its uncached forward, the target's
# verifications), once for target-only sampling's step, and once per speculative group (its fused
# rounds, its draft half); Experiment 4's are built by compile_quant (quant.smk). A model's packages
# do not depend on the round's code (inferlab/speculative/fused.py), so an edit there rebuilds the
# sampling step, the rounds and what uses them.
# The timing jobs only load them, and refuse one built for another device, thread count or code
# (inferlab/core/packages.py names the difference); Experiment 1's are built on kvcache.device. Each
# package is built for TIMING_THREADS, the thread count the timing
# jobs run with (its C++ loops are blocked for it), while the compile job itself takes one core, so two
# compile at once. A checkpoint, a setting that shapes a graph or the engine's code that changes reruns
# the compile and what uses it. Compile time is each rule's benchmark file.

GRAPH_PROMPTS = {key: SPEC[key] for key in ("prompts", "new_tokens")}


rule compile_graphs:
    input:
        **checkpoint("{model}"),
        vocab=CORPUS["vocab"],
    output:
        packages=directory(f"{GRAPHS_DIR}/{{model}}"),
        manifest=f"{GRAPHS_DIR}/{{model}}.json",
    params:
        code_sha256=code_hash("graphs_model"),
        timing_threads=TIMING_THREADS,
        # the target runs Experiment 1 and every group's verifications
        kvcache=lambda w: {key: KV[key] for key in ("prompt", "lengths", "step_points", "device")} if w.model == TARGET else None,
        token_counts=lambda w: [1, *(int(k) + 1 for k in SPEC["ks"])] if w.model == TARGET else [1],
        **GRAPH_PROMPTS,
    log:
        "logs/compile_graphs/{model}.log",
    benchmark:
        "results/benchmarks/compile_graphs/{model}.tsv"
    wildcard_constraints:
        model="|".join([TARGET, *SPEC["drafts"]]),
    threads: 1
    priority: COMPILE_PRIORITY
    resources:
        mem_mb=3000,
        runtime=30,
        gpu=lambda w: KV_GPUS if w.model == TARGET else 0,  # Experiment 1's graphs build on its device
    conda:
        CONDA_ENV
    script:
        "../../scripts/graphs_model.py"


rule compile_target_only:
    input:
        **checkpoint(TARGET),
        target_graphs=f"{GRAPHS_DIR}/{TARGET}",  # its prefills: the target's packages
        vocab=CORPUS["vocab"],
    output:
        packages=directory(f"{GRAPHS_DIR}/target_only"),
        manifest=f"{GRAPHS_DIR}/target_only.json",
    params:
        code_sha256=code_hash("graphs_target_only"),
        timing_threads=TIMING_THREADS,
        temperature=SPEC["temperature"],
        top_p=SPEC["top_p"],
        **GRAPH_PROMPTS,
    log:
        "logs/compile_target_only.log",
    benchmark:
        "results/benchmarks/compile_target_only.tsv"
    threads: 1
    priority: COMPILE_PRIORITY
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../../scripts/graphs_target_only.py"


rule compile_round:
    input:
        target_meta=checkpoint(TARGET)["meta"],
        draft_meta=lambda w: checkpoint(w.draft)["meta"],
        target_graphs=f"{GRAPHS_DIR}/{TARGET}",
        draft_graphs=f"{GRAPHS_DIR}/{{draft}}",
        target_only_graphs=f"{GRAPHS_DIR}/target_only",
        vocab=CORPUS["vocab"],
    output:
        packages=directory(f"{GRAPHS_DIR}/rounds/{{draft}}_k{{k}}"),
        manifest=f"{GRAPHS_DIR}/rounds/{{draft}}_k{{k}}.json",
    params:
        code_sha256=code_hash("graphs_round"),
        timing_threads=TIMING_THREADS,
        k=lambda w: int(w.k),
        temperature=SPEC["temperature"],
        top_p=SPEC["top_p"],
        **GRAPH_PROMPTS,
    log:
        "logs/compile_round/{draft}_k{k}.log",
    benchmark:
        "results/benchmarks/compile_round/{draft}_k{k}.tsv"
    wildcard_constraints:
        draft="|".join(SPEC["drafts"]),
        k=r"\d+",
    threads: 1
    priority: COMPILE_PRIORITY
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        CONDA_ENV
    script:
        "../../scripts/graphs_round.py"
