# The corpus: download if missing (see corpus_source in common.smk), normalise, split,
# and build the vocabulary.


rule download_corpus:
    output:
        DOWNLOADED_CORPUS,
    params:
        code_sha256=code_hash("download_corpus"),
        url=config.get("corpus_url", ""),
        configured_path=config["corpus_path"],
        sha256=config.get("corpus_sha256"),
    log:
        "logs/corpus/download.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/download_corpus.py"


rule prepare_corpus:
    input:
        corpus_source(),
    output:
        **CORPUS,
    params:
        code_sha256=code_hash("prepare_corpus"),
        val_fraction=config["corpus"]["val_fraction"],
        vocab_size=config["corpus"]["vocab_size"],
    log:
        "logs/corpus/prepare.log",
    benchmark:
        "results/benchmarks/prepare_corpus.tsv"
    conda:
        CONDA_ENV
    script:
        "../../scripts/prepare_corpus.py"
