"""One writer per run directory (a flock'd lock file; a killed writer's lock is taken over),
and `--resume` refusing changed options unless `--override` names them, with every resumption
recorded in train_config.json."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli, start_cli, wait_for_rows
from krakenlm.cli import main
from krakenlm.errors import KrakenError
from krakenlm.fileio import LockBusy, acquire_lock
from krakenlm.runtime import checkpoint
from krakenlm.training import run_dir
from krakenlm.training.trainer import train
from test_checkpoint_crash import CLI_ARGS, SMALL, run_config

LONG = 1000
LONG_ARGS = [a if a != "6" else str(LONG) for a in CLI_ARGS]


def cli(capsys, *args: str) -> tuple[int, list[str]]:
    """`krakenlm ARGS` in this process: (exit code, the non-empty stderr lines)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ locks
def test_lock_names_its_live_holder_and_is_free_again_once_released(tmp_path):
    path = tmp_path / "run" / ".lock"
    held = acquire_lock(path)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    with pytest.raises(LockBusy) as busy:
        acquire_lock(path)  # another open file description: flock refuses it
    assert busy.value.holder["pid"] == os.getpid()
    held.release()
    assert path.read_text() == ""
    with acquire_lock(path) as again:
        assert again.previous == {}  # released cleanly: nobody's record was left behind


def test_training_into_a_locked_run_directory_is_one_line_naming_the_holder(tmp_path,
                                                                            shakespeare):
    out = tmp_path / "run"
    with run_dir.lock_run_dir(out):
        with pytest.raises(KrakenError) as info:
            train(SMALL, run_config(out))
    message = str(info.value)
    assert message.startswith(f"{out} is in use by another krakenlm process writing into it "
                              f"(pid {os.getpid()}, started ")
    assert message.endswith(f"stop it (kill {os.getpid()}), or choose another --out directory")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing else was written


def test_a_resumption_names_the_live_writer_before_reading_its_checkpoint(tmp_path, capsys,
                                                                          shakespeare):
    """The writer holding the lock may be replacing the checkpoint (a save renames the new one
    in and deletes the old): a resumption must report the writer, not the checkpoint it could
    not read. Here the checkpoint is gone entirely while the lock is held."""
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    train(SMALL, run_config(out, max_steps=LONG, stop_at=2))
    with run_dir.lock_run_dir(out):
        for step in (out / checkpoint.CHECKPOINTS_DIR).iterdir():
            step.rename(tmp_path / step.name)  # as if the writer's rotation were under way
        code, lines = cli(capsys, "train", "--out", out, "--resume")
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {out} is in use by another krakenlm process writing into it (pid {os.getpid()}"), lines


def test_a_second_writer_is_refused_and_a_killed_writers_lock_is_taken_over(tmp_path,
                                                                            shakespeare):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    command = ["train", "--config", str(tmp_path / "model.json"), "--out", str(out), *LONG_ARGS]
    first = start_cli(*command)
    try:
        wait_for_rows(first, out / "metrics.jsonl", 3)  # step 2 is saved
        second = run_cli(*command, "--resume")
    finally:
        first.kill()  # SIGKILL: the lock file is left behind, naming the dead writer
        first.communicate()
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {out} is in use by another krakenlm process writing into it (pid {first.pid}, "
        "started "), second.stderr
    assert json.loads((out / ".lock").read_text())["pid"] == first.pid
    step = checkpoint.read_train_state(out)["step"]
    train(SMALL, run_config(out, max_steps=LONG, stop_at=step + 1), resume=True)  # taken over
    assert checkpoint.read_train_state(out)["step"] == step + 1
    options = json.loads((out / "train_config.json").read_text())
    assert [r["step"] for r in options["resumptions"]] == [step]


# ---------------------------------------------------------------------------- resume options
def test_resume_refuses_changed_options_unless_overridden_and_records_each_resumption(
        tmp_path, shakespeare):
    out = tmp_path / "run"
    train(SMALL, run_config(out, max_steps=8, stop_at=2))
    with pytest.raises(KrakenError) as info:
        train(SMALL, run_config(out, max_steps=8, stop_at=4, peak_lr=3e-3, seed=7), resume=True)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot resume {out} with options it was not trained with: "
                              "--lr 0.001 -> 0.003, --seed 1337 -> 7; ")
    assert "pass --override lr,seed to change them" in message
    assert checkpoint.read_train_state(out)["step"] == 2  # nothing was trained or written
    assert "resumptions" not in json.loads((out / "train_config.json").read_text())

    train(SMALL, run_config(out, max_steps=8, stop_at=4, peak_lr=3e-3, seed=7), resume=True,
          overrides={"peak_lr", "seed"})
    options = json.loads((out / "train_config.json").read_text())
    assert options["peak_lr"] == 3e-3 and options["seed"] == 7
    [first] = options["resumptions"]
    assert first["step"] == 2 and first["world_size"] == 1 and first["pid"] == os.getpid()
    assert first["overrides"] == {"lr": {"from": 0.001, "to": 0.003},
                                  "seed": {"from": 1337, "to": 7}}
    assert first["command"] and first["time"].endswith("UTC")
    # the run's options are now the new ones: resuming with them needs no override
    train(SMALL, run_config(out, max_steps=8, stop_at=6, peak_lr=3e-3, seed=7), resume=True)
    options = json.loads((out / "train_config.json").read_text())
    assert [(r["step"], r["overrides"]) for r in options["resumptions"]][1:] == [(4, {})]
    # operational options (checkpoint keeping, threads, stop-at) change freely
    train(SMALL, run_config(out, max_steps=8, peak_lr=3e-3, seed=7, keep_checkpoints=2),
          resume=True)
    assert checkpoint.read_train_state(out)["step"] == 8


def test_cli_resume_takes_the_runs_options_and_names_each_change(tmp_path, capsys,
                                                                shakespeare):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    code, err = cli(capsys, "train", "--config", tmp_path / "model.json", "--out", out,
                    "--max-steps", "8", "--stop-at", "2", "--lr", "3e-3", "--seed", "5",
                    "--batch-size", "2", "--seq-len", "32", "--warmup-steps", "2",
                    "--eval-batches", "1", "--precision", "fp32", "--threads", "1",
                    "--no-progress")
    assert code == 0, err
    # `--resume` alone continues the run as it was made, not with the command's defaults
    code, err = cli(capsys, "train", "--out", out, "--resume", "--stop-at", "3", "--threads",
                    "1", "--no-progress")
    assert code == 0, err
    options = json.loads((out / "train_config.json").read_text())
    assert (options["peak_lr"], options["seed"], options["max_steps"]) == (3e-3, 5, 8)
    code, err = cli(capsys, "train", "--out", out, "--resume", "--lr", "1e-2", "--max-steps",
                    "9", "--no-progress")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: cannot resume {out} with options it was not trained "
                             "with: --max-steps 8 -> 9, --lr 0.003 -> 0.01; ")
    assert "--override max-steps,lr" in err[0]
    code, err = cli(capsys, "train", "--out", out, "--resume", "--max-steps", "9",
                    "--override", "--max-steps", "--stop-at", "4", "--threads", "1",
                    "--no-progress")
    assert code == 0, err
    options = json.loads((out / "train_config.json").read_text())
    assert options["max_steps"] == 9
    assert options["resumptions"][-1]["overrides"] == {"max-steps": {"from": 8, "to": 9}}
    assert options["resumptions"][-1]["command"]  # this process's own command line


@pytest.mark.parametrize("args, message", [
    (["--override", "lr"], "--override only applies to --resume"),
    (["--resume", "--override", "lr,nope"], "--override nope: not an option that --resume "
                                            "checks; use one of batch-size, betas, data"),
])
def test_bad_overrides_are_one_line(args, message, tmp_path, capsys):
    code, err = cli(capsys, "train", "--preset", "gpt-tiny", "--out", tmp_path / "run", *args)
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_a_corrupt_train_config_is_one_line_on_resume(tmp_path, capsys, shakespeare):
    out = tmp_path / "run"
    train(SMALL, run_config(out, max_steps=4, stop_at=2))
    (out / "train_config.json").write_text('{"seed": 13')
    code, err = cli(capsys, "train", "--out", out, "--resume", "--no-progress")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {out / 'train_config.json'} is not valid JSON")
