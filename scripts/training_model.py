"""Train one model and write its checkpoint, loss curve and meta.json."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint import load_token_ids, save_checkpoint
from inferlab.core.config import GPTConfig
from inferlab.corpus.text import require_chars
from inferlab.jobs.configcheck import training_chars_needed, validation_chars_needed
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, write_table
from inferlab.training.loop import TrainConfig, train_model

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
corpus_stats = read_json(smk.input.stats)
train_cfg = TrainConfig(**smk.params.train_config)
train_ids, val_ids = load_token_ids(smk.input.train), load_token_ids(smk.input.val)
require_chars(len(train_ids), training_chars_needed(train_cfg.seq_len, train_cfg.batch_size),
              f"{smk.input.train} (training split) for seq_len {train_cfg.seq_len}, batch_size {train_cfg.batch_size}")
require_chars(len(val_ids), validation_chars_needed(train_cfg.seq_len),
              f"{smk.input.val} (validation split) for seq_len {train_cfg.seq_len}")
model, curve, summary = train_model(GPTConfig.from_dict(smk.params.model_config), train_cfg, train_ids, val_ids,
                                    progress_file=log)
stamp = machine_stamp("cpu")
meta = {
    "name": smk.params.name,
    "train_config": train_cfg.to_dict(),
    **summary,
    "corpus_sha256": corpus_stats["raw_sha256"],
    "normalised_sha256": corpus_stats["normalised_sha256"],
    "vocab_sha256": corpus_stats["vocab_sha256"],
    "machine": stamp,
}
write_table(curve, smk.output.curve, provenance=job_stamps(stamp, None, 1, "none (one training run)"))
meta = save_checkpoint(model, meta, smk.output.weights.rsplit("/", 1)[0])
print(f"{smk.params.name}: {meta['params']:,} params, val loss {meta['val_loss']:.4f}, "
      f"{meta['tokens_per_s']:.0f} tokens/s, {meta['train_seconds']:.0f} s", file=log)
