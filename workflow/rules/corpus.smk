# The corpus: download if missing, normalise, split, and build the vocabulary.
#
# The configured corpus_path is only ever an *input*. No rule outputs it, because
# Snakemake deletes a job's outputs before rerunning it, and the user's (or CI's
# read-only shared) copy must never be at risk. A download goes to its own file.

DOWNLOADED_CORPUS = "data/download/pg23950.txt"


def corpus_source():
    """The configured file when it exists, else the download rule's output."""
    return config["corpus_path"] if Path(config["corpus_path"]).is_file() else DOWNLOADED_CORPUS


rule download_corpus:
    output:
        DOWNLOADED_CORPUS,
    params:
        url=config.get("corpus_url", ""),
        configured_path=config["corpus_path"],
    log:
        "logs/corpus/download.log",
    script:
        "../../scripts/download_corpus.py"


rule prepare_corpus:
    input:
        corpus_source(),
    output:
        **CORPUS,
    params:
        val_fraction=config["corpus"]["val_fraction"],
        vocab_size=config["corpus"]["vocab_size"],
    log:
        "logs/corpus/prepare.log",
    benchmark:
        "results/benchmarks/prepare_corpus.tsv"
    script:
        "../../scripts/prepare_corpus.py"
