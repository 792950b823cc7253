import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import run_cli
from training_cases import SMALL, small_run

from krakenlm.errors import KrakenError
from krakenlm.models import ModelConfig
from krakenlm.models.transformer import Transformer
from krakenlm.runtime import checkpoint
from krakenlm.training.optim import build_optimizer, learning_rate
from krakenlm.training.trainer import TrainConfig, train


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


def test_a_loaded_checkpoint_is_its_weights_without_compiler_imports(tmp_path, shakespeare):
    """load_model takes the saved tensors as the weights of a model built on the meta device:
    equal to what was saved, with the rope tables of a freshly built model, and without the
    meta kernels that import torch._dynamo and sympy (seconds in every process)."""
    config = dataclasses.replace(SMALL, position="rope")
    train(config, small_run(tmp_path / "run", max_steps=2, batch_size=2))
    code = ("import sys; from krakenlm.runtime.checkpoint import load_model; "
            f"load_model({str(tmp_path / 'run')!r}); "
            "print([m for m in ('torch._dynamo', 'sympy') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]
    model = checkpoint.load_model(tmp_path / "run")
    saved, _ = checkpoint.load_state_dict(tmp_path / "run")
    for name, tensor in model.state_dict().items():
        assert tensor.is_contiguous() and tensor.dtype == torch.float32 and not tensor.is_meta
        assert torch.equal(tensor, saved[name]), name
    fresh = Transformer(config)
    assert torch.equal(model.rope_cos, fresh.rope_cos) and torch.equal(model.rope_sin,
                                                                       fresh.rope_sin)


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


def test_checkpoint_that_does_not_match_its_config_is_refused(tmp_path, shakespeare, capsys):
    out = tmp_path / "run"
    train(SMALL, small_run(out, max_steps=1))
    SMALL.replace(d_model=48, n_heads=3, ffn_dim=96).save(checkpoint.resolve(out) / "config.json")
    with pytest.raises(KrakenError, match=r"do not match its config.json \(conj.weight is "
                                          r"\(2, 32, 32\) but config.json implies \(2, 48, 48\)"):
        checkpoint.load_model(out)
    capsys.readouterr()  # the training's warnings
    code, err = cli_in_process(capsys, "eval", "--checkpoint", str(out))
    assert code == 2
    assert err.startswith("error: checkpoint") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_train_eval_generate(tmp_path, shakespeare, capsys):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "cli"
    # training, and one generation below, in real processes (`python -m krakenlm`, end to end);
    # the rest through main() in this process (each subprocess costs seconds of imports)
    proc = run_cli("train", "--config", str(tmp_path / "model.json"), "--out", str(out),
                   "--max-steps", "2", "--batch-size", "2", "--seq-len", "32", "--no-progress",
                   "--eval-batches", "1")
    assert proc.returncode == 0, proc.stderr
    code, stdout, err = cli_captured(capsys, "eval", "--checkpoint", str(out), "--json",
                                     "--max-batches", "2")
    assert code == 0, err
    result = json.loads(stdout)
    assert set(result) >= {"loss", "perplexity"} and result["perplexity"] > 1
    generate = ["generate", "--checkpoint", str(out), "--prompt", "ROMEO:", "--greedy",
                "--max-new-tokens", "5"]
    proc = run_cli(*generate)
    # the same tokens from another process, one that has run other tests first
    code, again, err = cli_captured(capsys, *generate)
    assert proc.returncode == 0 and code == 0 and proc.stdout == again and again.strip(), err
    code, _, err = cli_captured(capsys, "generate", "--checkpoint", str(out), "--prompt",
                                "word " * 40)
    assert code == 2
    assert "the prompt has 41 tokens but the model's context is 32" in err


@pytest.mark.parametrize("args,message", [
    (["train", "--preset", "gpt-enormous", "--out", "x"], "unknown model preset 'gpt-enormous'"),
    (["train", "--preset", "gpt-tiny", "--out", "x", "--data", "/no/such/dir"],
     "corpus '/no/such/dir' is neither a known corpus"),
    (["eval", "--checkpoint", "/no/such/ckpt"], "checkpoint directory /no/such/ckpt does not exist"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `--out x` would land here
    code, err = cli_in_process(capsys, *args)  # a real process per row: docs/bad-inputs.md
    assert code == 2
    assert err.strip() == f"error: {err.strip()[7:]}" and len(err.strip().splitlines()) == 1
    assert message in err and "Traceback" not in err


# ------------------------------------------------------------------ bad input: one line, exit 2
def cli_captured(capsys, *args: str) -> tuple[int, str, str]:
    """`krakenlm ARGS` through `main()` in this process (each subprocess costs seconds of
    imports); returns (exit code, stdout, stderr)."""
    from krakenlm.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_in_process(capsys, *args: str) -> tuple[int, str]:
    """`krakenlm ARGS` through `main()` in this process; returns (exit code, stderr)."""
    code, _, err = cli_captured(capsys, *args)
    return code, err


TRAIN = ["train", "--preset", "gpt-tiny", "--out", "{out}"]
EVAL = ["eval", "--checkpoint", "{out}"]
GENERATE = ["generate", "--checkpoint", "{out}", "--prompt", "Hi"]
BAD_INPUTS = [
    (TRAIN + ["--max-steps", "0"], "--max-steps must be >= 1, got 0"),
    (TRAIN + ["--batch-size", "-1"], "--batch-size must be >= 1, got -1"),
    (TRAIN + ["--grad-accum", "0"], "--grad-accum must be >= 1, got 0"),
    (TRAIN + ["--seq-len", "0"], "--seq-len 0 must be between 1 and the model's context 256"),
    (TRAIN + ["--eval-interval", "0"], "--eval-interval must be >= 1, got 0"),
    (TRAIN + ["--eval-batches", "0"], "--eval-batches must be >= 1, got 0"),
    (TRAIN + ["--log-interval", "0"], "--log-interval must be >= 1, got 0"),
    (TRAIN + ["--checkpoint-interval", "0"], "--checkpoint-interval must be >= 1, got 0"),
    (TRAIN + ["--keep-checkpoints", "0"], "--keep-checkpoints must be >= 1, got 0"),
    (TRAIN + ["--warmup-steps", "-1"], "--warmup-steps must be >= 0, got -1"),
    (TRAIN + ["--threads", "0"], "--threads must be >= 1, got 0"),
    (TRAIN + ["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (TRAIN + ["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (TRAIN + ["--weight-decay", "-0.1"], "--weight-decay must be a finite number >= 0, got -0.1"),
    (TRAIN + ["--grad-clip", "0"], "--grad-clip must be a finite number > 0, got 0.0"),
    (TRAIN + ["--stop-at", "0"], "--stop-at 0 must be between 1 and --max-steps 1000"),
    (TRAIN + ["--max-steps", "10", "--stop-at", "20"],
     "--stop-at 20 must be between 1 and --max-steps 10"),
    (TRAIN + ["--preset", "kraken-tiny-2way"],
     "--preset was given 2 times (gpt-tiny, kraken-tiny-2way); give it once"),
    (TRAIN + ["--out", "elsewhere"], "--out was given 2 times"),
    (["train", "--preset", "gpt3-175b", "--out", "{out}"],
     "training this 174.6B-parameter model needs about"),
    (EVAL + ["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (EVAL + ["--max-batches", "0"], "--max-batches must be >= 1, got 0"),
    (EVAL + ["--checkpoint", "other"], "--checkpoint was given 2 times"),
    (GENERATE + ["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (GENERATE + ["--temperature", "-1"], "--temperature must be a finite number > 0, got -1.0"),
    (GENERATE + ["--temperature", "nan"], "--temperature must be a finite number > 0, got nan"),
    (GENERATE + ["--top-k", "-1"], "--top-k must be >= 0 (0: all tokens), got -1"),
    (GENERATE + ["--world-size", "0"], "--world-size must be >= 1, got 0"),
    (GENERATE + ["--timeout", "0"], "--timeout must be a finite number of seconds > 0, got 0.0"),
    (GENERATE + ["--checkpoint", "other"], "--checkpoint was given 2 times"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_sizes_and_repeated_options_are_one_line_errors(args, message, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = cli_in_process(capsys, *(a.replace("{out}", str(out)) for a in args))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0]
    assert not out.exists()  # refused before anything was written


def test_memory_estimate_refuses_only_what_does_not_fit(monkeypatch):
    from krakenlm.training import trainer
    from krakenlm.runtime.bootstrap import DistEnv

    config = ModelConfig(arch="gpt", n_layers=2, d_model=64, n_heads=4, ffn_dim=256,
                         vocab_size=1000, context_len=128)
    need = trainer.training_memory_bytes(config, batch_size=8, seq_len=128)
    assert need["states"] == 20 * config.num_params()
    # per token: 2 layers x (12 x 64 + 4 x 256) + 4 x 64 = 3840 values of 4 bytes
    assert need["activations"] == 4 * 8 * 128 * 3840
    total = sum(need.values())
    tc = TrainConfig(out_dir="unused", batch_size=8, seq_len=128)
    cpu = torch.device("cpu")
    monkeypatch.setattr(trainer, "available_memory_bytes", lambda device: total)
    trainer.check_memory(config, tc, DistEnv(), cpu)  # fits exactly
    with pytest.raises(KrakenError, match=r"x 2 processes\) but this host has"):
        trainer.check_memory(config, tc, DistEnv(0, 2, 0, 2), cpu)  # two copies do not
    monkeypatch.setattr(trainer, "available_memory_bytes", lambda device: total - 1)
    with pytest.raises(KrakenError, match="--no-memory-check skips this estimate"):
        trainer.check_memory(config, tc, DistEnv(), cpu)


# ------------------------------------------------------------------ non-finite weights and losses
def test_diverging_training_stops_at_the_step_and_keeps_the_last_good_checkpoint(tmp_path,
                                                                                 shakespeare):
    out = tmp_path / "run"
    # An absurd learning rate: step 1 makes the weights huge, step 2's loss is NaN.
    with pytest.raises(KrakenError, match=r"training diverged at step 2: loss nan, gradient norm "
                                          r"nan; the last checkpoint \(step 1\) in .* is intact"):
        train(SMALL, small_run(out, peak_lr=1e20, warmup_steps=0, checkpoint_interval=1))
    assert checkpoint.read_train_state(out)["step"] == 1
    model = checkpoint.load_model(out)  # finite: the NaN never reached a saved state
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert max(json.loads(line)["step"]
               for line in (out / "metrics.jsonl").read_text().splitlines()) == 1


def _saved_model(directory, edit) -> None:
    model = Transformer(SMALL)
    model.reset_parameters(seed=0)
    with torch.no_grad():
        edit(model)
    checkpoint.save_checkpoint(directory, model, None, {"step": 1})


def test_non_finite_weights_are_named_by_eval_and_generate(tmp_path, capsys):
    def poison(model):
        model.layers[1].ffn.down.weight[0, 3, 5] = float("nan")

    _saved_model(tmp_path / "run", poison)
    for args in (["eval", "--checkpoint", str(tmp_path / "run")],
                 ["generate", "--checkpoint", str(tmp_path / "run"), "--prompt", "Hi"]):
        code, err = cli_in_process(capsys, *args)
        assert code == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "holds 1 non-finite values (NaN or inf)" in lines[0]
        step_dir = tmp_path / "run" / "checkpoints" / "step-00000001"
        assert lines[0].startswith(f"error: checkpoint {step_dir}: tensor "
                                   "layers.1.ffn.down.weight holds 1 non-finite values")


def test_eval_of_overflowing_weights_is_an_error_not_nan(tmp_path, capsys, shakespeare):
    def overflow(model):
        model.tok_emb.weight.mul_(1e38)  # finite, but the norms' variance overflows to inf

    _saved_model(tmp_path / "run", overflow)
    code, err = cli_in_process(capsys, "eval", "--checkpoint", str(tmp_path / "run"),
                               "--max-batches", "1", "--json")
    assert code == 2
    assert err.strip() == ("error: the evaluation loss is nan (not finite): the model's outputs "
                           "overflow; evaluate with --precision fp32, or use an earlier "
                           "checkpoint if its weights are broken")


def test_ctrl_c_saves_and_exits_130_with_one_line(tmp_path, shakespeare):
    import signal
    import time

    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "krakenlm", "train", "--config", str(tmp_path / "model.json"),
         "--out", str(out), "--max-steps", "100000", "--batch-size", "2", "--seq-len", "32",
         "--log-interval", "1", "--eval-interval", "100000", "--precision", "fp32",
         "--threads", "1", "--no-progress"],
        stderr=subprocess.PIPE, text=True,
        # A shell running the suite in the background (`make test &`) ignores SIGINT and its
        # children inherit that: give the trainer the default, as a terminal's Ctrl-C finds it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    metrics = out / "metrics.jsonl"
    # wait (polling, not timing) until training runs, then press Ctrl-C
    while proc.poll() is None and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"interrupted: checkpoint saved in {out} at "
                                                   "step "), err
    step = int(lines[0].split("at step ")[1].split(";")[0])
    assert checkpoint.read_train_state(out)["step"] == step >= 2
    assert lines[0].endswith("continue with the same command plus --resume")


def test_resume_refuses_a_stop_at_not_after_the_checkpoint_and_a_step_dir_as_out(tmp_path,
                                                                                  shakespeare):
    out = tmp_path / "run"
    train(SMALL, small_run(out, stop_at=2))
    with pytest.raises(KrakenError, match="--stop-at 2 is not after the checkpoint's step 2"):
        train(SMALL, small_run(out, stop_at=2), resume=True)
    step_dir = checkpoint.resolve(out)
    with pytest.raises(KrakenError, match=f"is one checkpoint of a run; give the run directory "
                                          f"{out}$"):
        train(SMALL, small_run(step_dir), resume=True)


# ------------------------------------------------------------ suspicious options: a warning each
def test_a_warmup_longer_than_the_run_and_threads_beyond_the_cores_are_warnings(
        tmp_path, shakespeare, capsys, monkeypatch):
    from krakenlm.training import trainer

    monkeypatch.setattr(trainer, "usable_cores", lambda: 2)
    monkeypatch.setattr(trainer, "set_cpu_threads", lambda env, threads: None)  # keep 1 here
    train(SMALL, small_run(tmp_path / "run", max_steps=2, warmup_steps=5, threads=8))
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings == [
        "warning: --warmup-steps 5 is not shorter than --max-steps 2: the learning rate never "
        "reaches --lr 0.001 and never decays; lower --warmup-steps (about a tenth of the steps "
        "is usual)",
        "warning: --threads 8 is more than the 2 cores this process may use: oversubscribed "
        "threads make training slower; use --threads 2 or leave it out"]
    train(SMALL, small_run(tmp_path / "quiet", max_steps=2, warmup_steps=1, threads=2))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value, message", [
    ("tpu", "KRAKENLM_DEVICE=tpu is not a device krakenlm runs on: use cpu, cuda or auto"),
    ("cuda", "KRAKENLM_DEVICE=cuda but torch"),
])
def test_krakenlm_device_that_cannot_be_used_is_one_line(value, message, tmp_path, capsys,
                                                         monkeypatch):
    monkeypatch.setenv("KRAKENLM_DEVICE", value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a host without a GPU
    code, err = cli_in_process(capsys, "train", "--preset", "gpt-tiny", "--out",
                               str(tmp_path / "run"), "--max-steps", "1")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "run").exists()


def test_krakenlm_device_cpu_and_auto_pick_the_cpu_here(monkeypatch):
    from krakenlm.runtime.device import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for value in ("cpu", "CPU", "auto", ""):
        monkeypatch.setenv("KRAKENLM_DEVICE", value)
        assert pick_device() == torch.device("cpu")


def test_eval_json_shows_progress_on_a_terminal(tmp_path, shakespeare):
    """stdout stays one JSON object for a program; stderr, a terminal here, shows the bar."""
    import fcntl
    import pty
    import struct
    import termios

    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    train(SMALL, small_run(out, max_steps=1))
    controller, terminal = pty.openpty()
    # a fresh pseudo-terminal is 0 columns wide, where tqdm draws nothing: make it 80 x 24
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "krakenlm", "eval", "--checkpoint", str(out),
                             "--json", "--max-batches", "2"], stdout=subprocess.PIPE,
                            stderr=terminal, text=True)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    stdout, _ = proc.communicate(timeout=300)
    os.close(controller)
    assert proc.returncode == 0
    assert set(json.loads(stdout)) >= {"loss", "perplexity", "tokens"}
    assert b"evaluating" in shown and b"batch" in shown


def test_train_help_keeps_every_option_name_whole_at_80_columns(capsys, monkeypatch):
    from krakenlm.cli import app, main

    monkeypatch.setenv("COLUMNS", "80")
    for command in (["train"], ["eval"], ["study", "compare"], ["demo"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        shown = capsys.readouterr().out
        assert "…" not in shown, shown
        import typer.main
        click_command = typer.main.get_command(app)
        for name in command:
            click_command = click_command.commands[name]
        for param in click_command.params:
            for option in (*param.opts, *param.secondary_opts):
                if option.startswith("--") and option != "--help":
                    assert option in shown, (command, option)
