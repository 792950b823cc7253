"""Crash safety of checkpoints: a process SIGKILLed at every point of a save, a full disk or a
read-only filesystem in the middle of one, an old flat run directory. After each, --resume
must continue to exactly the weights and loss curve of an uninterrupted run.

Run as a script (`python tests/test_checkpoint_crash.py`) it prints the kill matrix as the
markdown table of docs/robustness.md.
"""

import errno
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from krakenlm.errors import KrakenError
from krakenlm.models import ModelConfig
from krakenlm.runtime import checkpoint
from krakenlm.training.trainer import TrainConfig, train

SMALL = ModelConfig(arch="kraken", n_layers=2, d_model=32, n_heads=2, ffn_dim=64, degree=2,
                    vocab_size=50304, context_len=32)
MAX_STEPS, INTERVAL, KILLED_SAVE = 6, 2, 4  # saves at 2, 4, 6; the kill hits the one of step 4
# The same run as a command line and as a TrainConfig (the CLI's defaults fill in the rest).
CLI_ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-interval", str(INTERVAL),
            "--batch-size", "2", "--seq-len", "32", "--warmup-steps", "2", "--eval-interval", "3",
            "--eval-batches", "2", "--log-interval", "1", "--precision", "fp32", "--threads", "1",
            "--no-progress"]


def run_config(out: Path, **kw) -> TrainConfig:
    base = dict(out_dir=out, max_steps=MAX_STEPS, checkpoint_interval=INTERVAL, batch_size=2,
                seq_len=32, warmup_steps=2, eval_interval=3, eval_batches=2, log_interval=1,
                precision="fp32", threads=1, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def curve(out: Path) -> list[tuple]:
    """metrics.jsonl's training and validation losses, in order (times and speeds differ)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("val_loss")) for r in rows]


def weights(out: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_state_dict(out)[0]


def same_run(out: Path, reference: Path) -> bool:
    """Bit-identical final weights and loss curve (train and validation rows)."""
    a, b = weights(out), weights(reference)
    return (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            and curve(out) == curve(reference))


def left_on_disk(out: Path) -> str:
    """What a kill left in checkpoints/: step directories, and a temporary one's files with
    their sizes (a file cut by the kill is shorter than the complete one)."""
    parent = out / checkpoint.CHECKPOINTS_DIR
    if not parent.is_dir():
        return "nothing"
    parts = []
    for entry in sorted(parent.iterdir()):
        name = entry.name
        if name.startswith((".tmp-", ".trash-")):
            name = re.sub(r"-\d+$", "-PID", name)  # the saving process id
        if entry.name.startswith(".tmp-"):
            files = ", ".join(f"{f.name} {f.stat().st_size:,} B" for f in sorted(entry.iterdir()))
            name += f" ({files or 'empty'})"
        parts.append(name)
    return "; ".join(parts)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, shakespeare) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    train(SMALL, run_config(out))
    return out


def kill_case(point: str, work: Path, reference: Path, signame: str = "SIGKILL") -> dict:
    """Train in a subprocess that sends itself `signame` at `point` of the save of step 4, then
    resume in this process; returns one row of the matrix."""
    SMALL.save(work / "model.json")
    out = work / "run"
    proc = run_cli("train", "--config", str(work / "model.json"), "--out", str(out), *CLI_ARGS,
                   env_extra={checkpoint.KILL_ENV: f"{point}@{KILLED_SAVE}@{signame}"})
    signum = signal.Signals[signame]
    if signum == signal.SIGKILL:
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-2000:])
        message = ""
    else:  # held until the save and the step are complete, then a clean stop
        assert proc.returncode == 128 + signum, (point, proc.returncode, proc.stderr[-2000:])
        [message] = proc.stderr.strip().splitlines()
    left = left_on_disk(out)
    state = checkpoint.read_train_state(out)
    resumed_from = state["step"]
    # What eval/generate would load right now: the current checkpoint, complete and consistent.
    checkpoint.load_model(out)
    train(SMALL, run_config(out), resume=True)
    leftovers = [p.name for p in (out / checkpoint.CHECKPOINTS_DIR).iterdir()]
    return {"point": point, "left": left, "resumed_from": resumed_from,
            "identical": same_run(out, reference), "after_resume": sorted(leftovers),
            "message": message}


def expected_resume_step(point: str) -> int:
    made_current = checkpoint.KILL_POINTS.index("after-rename")
    return KILLED_SAVE if checkpoint.KILL_POINTS.index(point) >= made_current else INTERVAL


# `make test` kills one point of each kind (before any file, inside the first and the last file
# of the save, just before and just after the rename that makes it current, inside the prune);
# the whole matrix, every point of checkpoint.KILL_POINTS: KRAKENLM_FULL_KILL_MATRIX=1 pytest
# tests/test_checkpoint_crash.py, or `python tests/test_checkpoint_crash.py` (docs/robustness.md).
KILL_POINTS_IN_MAKE_TEST = ("start", f"during:{checkpoint.MODEL_FILE}",
                            f"during:{checkpoint.STATE_FILE}", "before-rename", "after-rename",
                            "during-prune")
KILL_POINTS_RUN = (checkpoint.KILL_POINTS if os.environ.get("KRAKENLM_FULL_KILL_MATRIX")
                   else KILL_POINTS_IN_MAKE_TEST)


def test_the_kill_points_of_make_test_are_real_points():
    assert set(KILL_POINTS_IN_MAKE_TEST) <= set(checkpoint.KILL_POINTS)


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS_RUN)
def test_kill_during_save_then_resume_is_bit_identical(point, tmp_path, reference):
    row = kill_case(point, tmp_path, reference)
    assert row["resumed_from"] == expected_resume_step(point)
    assert row["identical"], row
    # the resumed run's saves cleaned what the kill left: only the final checkpoint remains
    assert row["after_resume"] == [checkpoint.step_dir_name(MAX_STEPS)]


# SIGTERM inside a save: a few points of each kind (the whole matrix: `python
# tests/test_checkpoint_crash.py sigterm`)
SIGTERM_POINTS = ("during:optimizer.pt", "during-prune")


@pytest.mark.slow
@pytest.mark.parametrize("point", SIGTERM_POINTS)
def test_sigterm_during_a_save_lets_it_complete_then_stops(point, tmp_path, reference):
    row = kill_case(point, tmp_path, reference, "SIGTERM")
    assert row["message"] == (f"interrupted (SIGTERM): checkpoint saved in {tmp_path / 'run'} "
                              f"at step {KILLED_SAVE}; continue with the same command plus "
                              "--resume")
    assert row["left"] == checkpoint.step_dir_name(KILLED_SAVE)  # complete, nothing torn
    assert row["resumed_from"] == KILLED_SAVE and row["identical"], row


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_failed_save_keeps_the_previous_checkpoint_and_resume_works(code, tmp_path, reference,
                                                                    monkeypatch):
    out = tmp_path / "run"
    real_write = checkpoint._write_file

    def failing_write(path, write, step):
        if step == KILLED_SAVE and path.name == checkpoint.OPTIMIZER_FILE:
            raise OSError(code, os.strerror(code), str(path))
        real_write(path, write, step)

    monkeypatch.setattr(checkpoint, "_write_file", failing_write)
    with pytest.raises(KrakenError) as info:
        train(SMALL, run_config(out))
    message = str(info.value)
    assert f"could not save the checkpoint of step {KILLED_SAVE}" in message
    assert os.strerror(code) in message and "\n" not in message
    assert f"{checkpoint.step_dir_name(INTERVAL)} is intact" in message
    assert message.endswith("then continue with --resume")
    # no temporary directory left, the previous checkpoint current and loadable
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        checkpoint.step_dir_name(INTERVAL)]
    assert checkpoint.read_train_state(out)["step"] == INTERVAL
    monkeypatch.setattr(checkpoint, "_write_file", real_write)  # the disk has space again
    train(SMALL, run_config(out), resume=True)
    assert same_run(out, reference)


def test_unwritable_out_is_one_line_before_any_work(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(KrakenError, match=r"cannot write to --out .*/run: Read-only file system"):
        train(SMALL, run_config(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def _read_only_directory(tmp_path: Path) -> Path:
    """A directory this process cannot create files in: chmod, or (as root, who ignores file
    modes) sysfs, which refuses new files."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        return locked
    try:
        os.close(tempfile.mkstemp(dir="/sys/kernel")[0])
    except OSError:
        return Path("/sys/kernel")
    pytest.skip("no read-only directory available to a root user here")


def cli_in_process(capsys, *args: str) -> tuple[int, str]:
    """`krakenlm ARGS` through `main()` in this process, for errors that come before any work
    (a subprocess costs seconds of imports); returns (exit code, stderr)."""
    from krakenlm.cli import main

    capsys.readouterr()  # only the command's own output: not the warnings of a training before
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    return exc.value.code, capsys.readouterr().err


def test_cli_train_into_a_read_only_directory_is_one_line(tmp_path, capsys):
    parent = _read_only_directory(tmp_path)
    # --threads 1: this process keeps its one thread (the refusal comes after the threads are set)
    code, err = cli_in_process(capsys, "train", "--preset", "gpt-tiny", "--out",
                               str(parent / "run"), "--max-steps", "1", "--no-progress",
                               "--threads", "1")
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write to --out {parent}/run:")
    assert "choose a directory on a writable filesystem" in lines[0]


def test_old_flat_run_directory_loads_resumes_and_moves_to_the_new_layout(tmp_path, reference):
    out = tmp_path / "run"
    train(SMALL, run_config(out, stop_at=INTERVAL))
    # what krakenlm wrote before this layout: the four files directly in the run directory
    step_dir = checkpoint.resolve(out)
    for f in step_dir.iterdir():
        shutil.move(f, out / f.name)
    shutil.rmtree(out / "checkpoints")
    assert checkpoint.resolve(out) == out
    assert checkpoint.load_model(out).config == SMALL
    train(SMALL, run_config(out), resume=True)
    assert same_run(out, reference)
    assert not (out / checkpoint.MODEL_FILE).exists() and not (out / "train_state.json").exists()
    assert checkpoint.resolve(out) == out / "checkpoints" / checkpoint.step_dir_name(MAX_STEPS)


def test_torn_old_flat_checkpoint_is_refused_by_eval(tmp_path, shakespeare, capsys):
    out = tmp_path / "run"
    train(SMALL, run_config(out, max_steps=2))
    step_dir = checkpoint.resolve(out)
    for f in step_dir.iterdir():
        shutil.move(f, out / f.name)
    shutil.rmtree(out / "checkpoints")
    # an old non-atomic save killed after the weights: weights of step 2, state of step 1
    (out / "train_state.json").write_text(json.dumps({"step": 1}))
    code, err = cli_in_process(capsys, "eval", "--checkpoint", str(out), "--max-batches", "1")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: checkpoint {out} is inconsistent: "
                                                   "weights from step 2, train_state.json says 1")


def test_keep_checkpoints_keeps_the_newest_and_any_can_be_loaded(tmp_path, reference):
    out = tmp_path / "run"
    train(SMALL, run_config(out, keep_checkpoints=2))
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == [checkpoint.step_dir_name(4), checkpoint.step_dir_name(6)]
    assert checkpoint.read_train_state(out / "checkpoints" / names[0])["step"] == 4
    older = checkpoint.load_model(out / "checkpoints" / names[0])
    newer = checkpoint.load_model(out)
    assert not torch.equal(older.tok_emb.weight, newer.tok_emb.weight)
    assert torch.equal(newer.tok_emb.weight, weights(reference)["tok_emb.weight"])


def main(which: str = "sigkill") -> None:
    """Print a kill matrix as markdown (docs/robustness.md): `sigkill` (the process killed at
    each point of a save), `sigterm` (sent SIGTERM there instead), or `writers` (two writers on
    one run directory)."""
    from krakenlm.data.prepare import prepare_corpus

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.setdefault("KRAKENLM_CACHE", str(tmp / "cache"))
        prepare_corpus("shakespeare", progress=False)
        ref = tmp / "reference"
        train(SMALL, run_config(ref))
        if which == "writers":
            return _print_writers(tmp, ref)
        signame = which.upper()
        killed = signame == "SIGKILL"
        exit_column = "" if killed else " exit |"
        print(f"| {'kill point' if killed else signame + ' at'} (save of step 4) | left in "
              f"checkpoints/ |{exit_column} resumed from step | final weights and loss curve "
              "identical | checkpoints/ after the resumed run |")
        print("|---|---|" + ("" if killed else "---:|") + "---:|---|---|")
        for i, point in enumerate(checkpoint.KILL_POINTS):
            work = tmp / f"case{i}"
            work.mkdir()
            row = kill_case(point, work, ref, signame)
            code = "" if killed else f" {128 + signal.Signals[signame]} |"
            print(f"| `{point}` | {row['left']} |{code} {row['resumed_from']} | "
                  f"{'yes' if row['identical'] else 'NO'} | {', '.join(row['after_resume'])} |",
                  flush=True)


def _print_writers(tmp: Path, ref: Path) -> None:
    """Two writers on one run directory, as real processes."""
    from conftest import start_cli, wait_for_rows

    SMALL.save(tmp / "model.json")
    out = tmp / "writers"
    long_args = [a if a != str(MAX_STEPS) else "1000" for a in CLI_ARGS]
    command = ["train", "--config", str(tmp / "model.json"), "--out", str(out), *long_args]
    print("| case | second writer | what the first one's run directory holds afterwards |")
    print("|---|---|---|")
    import time

    pair = [start_cli(*command), start_cli(*command)]  # started together: one gets the lock
    while all(proc.poll() is None for proc in pair):
        time.sleep(0.1)
    second = next(proc for proc in pair if proc.poll() is not None)
    survivor = next(proc for proc in pair if proc is not second)
    second_err = second.communicate()[1].strip()
    wait_for_rows(survivor, out / "metrics.jsonl", 3)
    resumed = run_cli(*command, "--resume")
    rows_then = (out / "metrics.jsonl").read_text().count("\n")
    wait_for_rows(survivor, out / "metrics.jsonl", rows_then + 3)  # it goes on
    survivor.kill()
    survivor.communicate()
    checkpoint.load_model(out)  # its current checkpoint is complete
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    print(f"| two `train` into one new --out, started together | exit {second.returncode}: "
          f"`{_pid_free(second_err, out)}` | metrics.jsonl steps {steps[0]}..{steps[-1]}, in "
          f"order and once each: {steps == list(range(steps[0], steps[-1] + 1))} |")
    print(f"| `train --resume` while it runs | exit {resumed.returncode}: "
          f"`{_pid_free(resumed.stderr.strip(), out)}` | the first went on training and saving; "
          f"its current checkpoint ({checkpoint.resolve(out).name} when SIGKILLed) loads |")
    lock = json.loads((out / ".lock").read_text())
    state = checkpoint.read_train_state(out)["step"]
    train(SMALL, run_config(out, max_steps=1000, stop_at=state + 2), resume=True)
    reference = tmp / "writers-reference"
    train(SMALL, run_config(reference, max_steps=1000, stop_at=state + 2))
    print(f"| the first SIGKILLed (its .lock still names pid {'PID' if lock['pid'] else '?'}), "
          f"then `--resume` | takes the lock over and trains from step {state} to {state + 2} | "
          f"identical to a run never stopped: {same_run(out, reference)} |")


def _pid_free(text: str, out: Path) -> str:
    text = re.sub(r"pid \d+", "pid PID", text.replace(str(out), "RUN"))
    text = re.sub(r"kill \d+", "kill PID", text)
    return re.sub(r"started [0-9: -]+ UTC", "started TIME", text)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))


def test_metrics_line_torn_by_a_kill_is_dropped_on_resume(tmp_path, reference):
    out = tmp_path / "run"
    train(SMALL, run_config(out, stop_at=INTERVAL))
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "loss": 10.2')  # a kill in the middle of appending step 3's row
    train(SMALL, run_config(out), resume=True)
    assert same_run(out, reference)


def test_metrics_write_failure_is_one_line(tmp_path, shakespeare, monkeypatch):
    from krakenlm.training import trainer

    def full_disk(self, row):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(trainer.MetricsLog, "write",
                        lambda self, row: self._guard(lambda: full_disk(self, row)))
    with pytest.raises(KrakenError) as info:
        train(SMALL, run_config(tmp_path / "run"))
    assert str(info.value) == (f"cannot write {tmp_path / 'run' / 'metrics.jsonl'}: No space "
                               "left on device; free disk space or make the --out directory "
                               "writable, then continue with --resume")


def _is_dev_full() -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat("/dev/full").st_mode)
    except OSError:
        return False


@pytest.mark.skipif(not _is_dev_full(), reason="needs /dev/full (a device that is always full)")
def test_a_real_full_disk_under_torch_save_is_one_line_and_resume_works(tmp_path, reference,
                                                                        monkeypatch):
    """optimizer.pt of step 4 goes to /dev/full: the kernel's ENOSPC reaches torch.save from
    below, which reports it as a RuntimeError ("unexpected pos ..."), as on a real full disk."""
    import builtins

    out = tmp_path / "run"
    real_open = builtins.open

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        if (Path(str(path)).name == checkpoint.OPTIMIZER_FILE
                and f"step-{KILLED_SAVE:08d}" in str(path)):
            return real_open("/dev/full", mode, *args, **kwargs)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "open", open_on_a_full_disk, raising=False)
    with pytest.raises(KrakenError) as info:
        train(SMALL, run_config(out))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"could not save the checkpoint of step {KILLED_SAVE} in "
                              f"{out / 'checkpoints'}: No space left on device (")
    assert f"{checkpoint.OPTIMIZER_FILE}); the previous checkpoint " in message
    assert message.endswith("is intact; free disk space or make "
                            f"{out} writable, then continue with --resume")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        checkpoint.step_dir_name(INTERVAL)]
    monkeypatch.undo()  # the disk has space again
    train(SMALL, run_config(out), resume=True)
    assert same_run(out, reference)


def test_a_truncated_optimizer_state_is_one_line_on_resume(tmp_path, shakespeare, capsys):
    from krakenlm.cli import main

    out = tmp_path / "run"
    train(SMALL, run_config(out, keep_checkpoints=2, max_steps=4))
    current = checkpoint.resolve(out)
    state = current / checkpoint.OPTIMIZER_FILE
    for size in (0, 100, state.stat().st_size // 2):  # EOFError, RuntimeError, OSError
        state.write_bytes(state.read_bytes()[:size] if size else b"")
        with pytest.raises(SystemExit) as exc:
            main(["train", "--out", str(out), "--resume", "--max-steps", "6", "--override",
                  "max-steps", "--no-progress", "--threads", "1"])
        lines = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(lines) == 1, lines
        assert lines[0].startswith(f"error: cannot resume from {current}: optimizer.pt is "
                                   "unreadable (")
        assert lines[0].endswith(f"restore it, or move {current.name} out of {current.parent} "
                                 f"to resume from {checkpoint.step_dir_name(2)}")
        state.write_bytes(b"x" * 10**6)  # each round truncates a file of some size


def _full_disk_cli(tmp_path: Path, size: str, *args: str):
    """`krakenlm ARGS` with `{disk}` in ARGS a fresh tmpfs of `size` (a real filesystem that
    fills up), mounted in a private mount namespace; skipped where none can be made."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)  # the mount is gone with its namespace: the directory is empty
    command = " ".join(f"'{a.format(disk=disk)}'" for a in args)
    script = (f"mount -t tmpfs -o size={size} tmpfs '{disk}' || exit 99; "
              f"exec '{sys.executable}' -m krakenlm {command}")
    user = [] if os.geteuid() == 0 else ["-r"]
    proc = subprocess.run(["unshare", *user, "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600)
    if proc.returncode == 99 or "unshare failed" in proc.stderr or "unshare:" in proc.stderr:
        pytest.skip(f"cannot mount a private tmpfs here: {proc.stderr.strip()[-300:]}")
    return proc


@pytest.mark.slow
def test_training_and_export_on_a_really_full_filesystem_are_one_line(tmp_path, reference):
    """The checkpoint of SMALL (6.6 MB weights + 13 MB optimizer state) on a 16 MB tmpfs: the
    first save runs out of space inside torch.save; exporting it to a 4 MB tmpfs runs out inside
    safetensors' own writer."""
    SMALL.save(tmp_path / "model.json")
    proc = _full_disk_cli(tmp_path, "16m", "train", "--config", str(tmp_path / "model.json"),
                          "--out", "{disk}/run", *CLI_ARGS)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: could not save the checkpoint of step {INTERVAL} in ")
    assert "No space left on device" in lines[0] and "optimizer.pt" in lines[0]
    assert lines[0].endswith("no earlier checkpoint exists; free disk space or make "
                             f"{tmp_path / 'disk' / 'run'} writable, then run the command again")
    proc = _full_disk_cli(tmp_path, "4m", "export", "hf", "--checkpoint", str(reference),
                          "--out", "{disk}/hf")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == (f"error: writing the Hugging Face model to {tmp_path / 'disk' / 'hf'} "
                        "failed: No space left on device; nothing was changed (check free space "
                        "and permissions)")
