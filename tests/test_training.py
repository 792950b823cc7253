import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import run_cli
from krakenlm.errors import KrakenError
from krakenlm.models import ModelConfig
from krakenlm.models.transformer import Transformer
from krakenlm.training import checkpoint
from krakenlm.training.optim import build_optimizer, learning_rate
from krakenlm.training.trainer import TrainConfig, train

SMALL = ModelConfig(arch="kraken", n_layers=2, d_model=32, n_heads=2, ffn_dim=64, degree=2,
                    vocab_size=50304, context_len=32)


def small_run(out, **kw) -> TrainConfig:
    base = dict(out_dir=out, max_steps=6, batch_size=2, seq_len=32, warmup_steps=2,
                eval_interval=3, eval_batches=2, log_interval=1, checkpoint_interval=100,
                precision="fp32", progress=False, threads=1)
    base.update(kw)
    return TrainConfig(**base)


def losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_schedule_warms_up_then_decays_to_a_tenth():
    kw = dict(peak_lr=1.0, warmup_steps=10, max_steps=110)
    assert learning_rate(0, **kw) == pytest.approx(0.1)
    assert learning_rate(9, **kw) == pytest.approx(1.0)
    assert learning_rate(60, **kw) == pytest.approx(0.55)
    assert learning_rate(110, **kw) == pytest.approx(0.1)
    values = [learning_rate(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_optimizer_decays_matrices_and_embeddings_only():
    model = Transformer(SMALL.replace(bias=True))
    opt = build_optimizer(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    n_norm_and_bias = sum(1 for n, _ in model.named_parameters() if "norm" in n or "bias" in n)
    assert len(no_decay["params"]) == n_norm_and_bias


def test_training_lowers_the_loss_and_writes_a_checkpoint(tmp_path, shakespeare):
    result = train(SMALL, small_run(tmp_path / "run", max_steps=12, batch_size=4, peak_lr=1e-2))
    curve = losses(tmp_path / "run")
    assert curve[12] < curve[1] - 1.0
    assert result.val_loss is not None and checkpoint.is_checkpoint(tmp_path / "run")
    assert checkpoint.read_train_state(tmp_path / "run")["step"] == 12
    model = checkpoint.load_model(tmp_path / "run")
    assert model.config == SMALL


def test_resume_repeats_the_uninterrupted_loss_curve(tmp_path, shakespeare):
    train(SMALL, small_run(tmp_path / "straight"))
    train(SMALL, small_run(tmp_path / "resumed", stop_at=3))
    assert checkpoint.read_train_state(tmp_path / "resumed")["step"] == 3
    with pytest.raises(KrakenError, match="pass --resume"):
        train(SMALL, small_run(tmp_path / "resumed"))
    train(SMALL, small_run(tmp_path / "resumed"), resume=True)
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "resumed")
    assert sorted(resumed) == list(range(1, 7))
    for step in range(1, 7):
        assert resumed[step] == pytest.approx(straight[step], rel=1e-6, abs=1e-6), step


def test_resume_refuses_a_different_model(tmp_path, shakespeare):
    train(SMALL, small_run(tmp_path / "r", stop_at=2))
    with pytest.raises(KrakenError, match="describes a different model"):
        train(SMALL.replace(n_layers=3), small_run(tmp_path / "r"), resume=True)


def test_data_parallel_equals_gradient_accumulation(tmp_path, shakespeare):
    """torchrun with 2 gloo processes trains exactly like 1 process with 2 micro-batches."""
    single = tmp_path / "single"
    train(SMALL, small_run(single, max_steps=3, grad_accum=2, eval_interval=100))
    SMALL.save(tmp_path / "model.json")
    ddp = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", "29517", "-m", "krakenlm", "train", "--config",
           str(tmp_path / "model.json"), "--out", str(ddp), "--max-steps", "3",
           "--batch-size", "2", "--seq-len", "32", "--warmup-steps", "2", "--eval-interval",
           "100", "--log-interval", "1", "--precision", "fp32", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = checkpoint.load_model(single), checkpoint.load_model(ddp)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
    assert losses(ddp)[3] == pytest.approx(losses(single)[3], rel=1e-5)


def test_checkpoint_that_does_not_match_its_config_is_refused(tmp_path, shakespeare):
    out = tmp_path / "run"
    train(SMALL, small_run(out, max_steps=1))
    SMALL.replace(d_model=48, n_heads=3, ffn_dim=96).save(checkpoint.resolve(out) / "config.json")
    with pytest.raises(KrakenError, match=r"do not match its config.json \(conj.weight is "
                                          r"\(2, 32, 32\) but config.json implies \(2, 48, 48\)"):
        checkpoint.load_model(out)
    proc = run_cli("eval", "--checkpoint", str(out))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: checkpoint") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_train_eval_generate(tmp_path, shakespeare):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "cli"
    proc = run_cli("train", "--config", str(tmp_path / "model.json"), "--out", str(out),
                   "--max-steps", "2", "--batch-size", "2", "--seq-len", "32", "--no-progress",
                   "--eval-batches", "1")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("eval", "--checkpoint", str(out), "--json", "--max-batches", "2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= {"loss", "perplexity"} and result["perplexity"] > 1
    proc = run_cli("generate", "--checkpoint", str(out), "--prompt", "ROMEO:", "--greedy",
                   "--max-new-tokens", "5")
    again = run_cli("generate", "--checkpoint", str(out), "--prompt", "ROMEO:", "--greedy",
                    "--max-new-tokens", "5")
    assert proc.returncode == 0 and proc.stdout == again.stdout and proc.stdout.strip()
    too_long = run_cli("generate", "--checkpoint", str(out), "--prompt", "word " * 40)
    assert too_long.returncode == 2
    assert "the prompt has 41 tokens but the model's context is 32" in too_long.stderr


@pytest.mark.parametrize("args,message", [
    (["train", "--preset", "gpt-enormous", "--out", "x"], "unknown model preset 'gpt-enormous'"),
    (["train", "--preset", "gpt-tiny", "--out", "x", "--data", "/no/such/dir"],
     "corpus '/no/such/dir' is neither a known corpus"),
    (["eval", "--checkpoint", "/no/such/ckpt"], "checkpoint directory /no/such/ckpt does not exist"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {proc.stderr.strip()[7:]}"
    assert message in proc.stderr and "Traceback" not in proc.stderr
