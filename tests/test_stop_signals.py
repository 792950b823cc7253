"""SIGTERM and SIGHUP end a training the way Ctrl-C does (a checkpoint of the last completed
step, one line, exit 128 + the signal), on one process, under torchrun, and in `study compare`,
whose worker processes stop with it. Real subprocesses and real signals."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _default_stop_signals, start_cli, wait_for_rows
from krakenlm.runtime import checkpoint
from krakenlm.training.trainer import train
from test_checkpoint_crash import CLI_ARGS, SMALL, run_config, same_run

LONG = 1000  # steps: the run only ends when it is stopped
LONG_ARGS = [a if a != "6" else str(LONG) for a in CLI_ARGS]  # CLI_ARGS with --max-steps 1000
assert LONG_ARGS[:2] == ["--max-steps", str(LONG)]


def _interrupted_step(line: str, name: str, out: Path) -> int:
    prefix = f"interrupted ({name}): checkpoint saved in {out} at step "
    assert line.startswith(prefix) and line.endswith("continue with the same command plus "
                                                     "--resume"), line
    return int(line[len(prefix):].split(";")[0])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_save_like_ctrl_c_and_resume_bit_identically(signum, tmp_path,
                                                                         shakespeare):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    proc = start_cli("train", "--config", str(tmp_path / "model.json"), "--out", str(out),
                     *LONG_ARGS)
    wait_for_rows(proc, out / "metrics.jsonl", 3)  # step 3 logged: past the save of step 2
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    step = _interrupted_step(lines[0], name, out)
    assert checkpoint.read_train_state(out)["step"] == step >= 3
    assert (out / ".lock").read_text() == ""  # the writer lock was released
    # --resume continues to exactly what a run that was never stopped computes
    train(SMALL, run_config(out, max_steps=LONG, stop_at=step + 2), resume=True)
    reference = tmp_path / "reference"
    train(SMALL, run_config(reference, max_steps=LONG, stop_at=step + 2))
    assert same_run(out, reference)


def _descendants(pid: int) -> set[int]:
    """Every live descendant process of `pid` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: set[int]) -> set[int]:
    """The pids still alive after their processes had time to exit (polled, not timed: a
    leftover training would run for minutes)."""
    import time

    for _ in range(300):
        alive = {pid for pid in pids if _alive(pid)}
        if not alive:
            return alive
        time.sleep(0.1)
    return alive


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_every_rank_after_one_step_with_a_checkpoint(tmp_path,
                                                                                shakespeare):
    SMALL.save(tmp_path / "model.json")
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
         "krakenlm", "train", "--config", str(tmp_path / "model.json"), "--out", str(out),
         *LONG_ARGS], stderr=subprocess.PIPE, text=True, preexec_fn=_default_stop_signals)
    wait_for_rows(proc, out / "metrics.jsonl", 3)
    ranks = _descendants(proc.pid)
    assert len(ranks) >= 2
    proc.send_signal(signal.SIGTERM)  # what SLURM or Kubernetes sends to the launcher
    _, err = proc.communicate(timeout=300)
    # rank 0 reports for both ranks; torchrun forwards SIGTERM and both ranks stop in time
    # (torchrun would SIGKILL them after 30 s)
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1, err
    step = _interrupted_step(lines[0], "SIGTERM", out)
    assert checkpoint.read_train_state(out)["step"] == step >= 3
    assert "SIGKILL" not in err, err
    assert not _wait_gone(ranks)


@pytest.mark.slow
def test_study_compare_stopped_by_sigterm_saves_its_runs_and_leaves_no_process(tmp_path,
                                                                               shakespeare):
    signum = signal.SIGTERM
    out = tmp_path / "cmp"
    proc = start_cli("study", "compare", "--out", str(out), "--preset", "gpt-tiny", "--preset",
                     "kraken-tiny-2way", "--max-steps", str(LONG), "--batch-size", "1",
                     "--seq-len", "16", "--eval-interval", str(LONG), "--warmup-steps", "2",
                     "--precision", "fp32", "--jobs", "2", "--threads", "1")
    runs = [out / "gpt-tiny-seed1", out / "kraken-tiny-2way-seed1"]
    for run in runs:
        wait_for_rows(proc, run / "metrics.jsonl", 1)  # both workers are training
    workers = _descendants(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err
    last = err.strip().splitlines()[-1]
    match = re.fullmatch(r"interrupted \(SIGTERM\): checkpoints saved \((.*)\); run the "
                         r"same command again to continue \(finished runs are kept, interrupted "
                         r"ones resume\)", last)
    assert match, err[-3000:]
    saved = dict(part.split(" at step ") for part in match.group(1).split(", "))
    assert set(saved) == {run.name for run in runs}
    for run in runs:
        assert checkpoint.read_train_state(run)["step"] == int(saved[run.name])
        assert json.loads((run / "train_config.json").read_text())["max_steps"] == LONG
    assert not _wait_gone(workers), "a training process outlived its study"
