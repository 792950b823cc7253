"""The small training run the trainer tests share: a 2-layer Kraken model (degree 2, d_model 32)
trained for 6 steps on 2 x 32-token sequences in fp32 on one thread, evaluated every 3 steps."""

from krakenlm.models import ModelConfig
from krakenlm.training.trainer import TrainConfig

SMALL = ModelConfig(arch="kraken", n_layers=2, d_model=32, n_heads=2, ffn_dim=64, degree=2,
                    vocab_size=50304, context_len=32)


def small_run(out, **kw) -> TrainConfig:
    """The small run writing to `out`; keyword arguments override its TrainConfig fields."""
    base = dict(out_dir=out, max_steps=6, batch_size=2, seq_len=32, warmup_steps=2,
                eval_interval=3, eval_batches=2, log_interval=1, checkpoint_interval=100,
                precision="fp32", progress=False, threads=1)
    base.update(kw)
    return TrainConfig(**base)
