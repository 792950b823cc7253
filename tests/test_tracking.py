"""Experiment tracking: the rows of metrics.jsonl, as TensorBoard scalars and W&B history."""

import json
import re
import sys

import pytest
from training_cases import SMALL, small_run

from krakenlm.errors import KrakenError
from krakenlm.training import tracking
from krakenlm.training.trainer import train


def metrics_by_tag(run_dir) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as {tracker tag: [(step, value)]}, the reference for every tracker."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for tag, value in tracking.scalars(row).items():
            series.setdefault(tag, []).append((row["step"], value))
    return series


def tensorboard_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


def wandb_history(data: bytes, key: str) -> list[float]:
    """The values logged under `key` in W&B's offline run log. Each history item is a protobuf
    message: field 1 the key (0x12, length, bytes), field 16 its JSON value (0x82 0x01,
    length, text). The files here are < 32 KiB, one block of the log: no record is split."""
    name = key.encode()
    pattern = re.escape(b"\x12" + bytes([len(name)]) + name + b"\x82\x01") + rb"(.)"
    values = []
    for match in re.finditer(pattern, data, flags=re.DOTALL):
        start = match.end()
        values.append(float(json.loads(data[start:start + match.group(1)[0]])))
    return values


def test_log_to_accepts_repeats_and_comma_lists():
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    assert tracking.parse_log_to(["tensorboard,wandb", "TensorBoard", " "]) == ("tensorboard",
                                                                               "wandb")
    assert tracking.parse_log_to(None) == ()


def test_unknown_tracker_and_missing_package_are_kraken_errors(monkeypatch):
    with pytest.raises(KrakenError, match="--log-to 'mlflow' is not a tracker; choose from "
                                          "tensorboard, wandb"):
        tracking.parse_log_to(["tensorboard,mlflow"])
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    with pytest.raises(KrakenError, match=r"--log-to wandb needs the wandb package: "
                                          r"pip install 'krakenlm\[wandb\]'"):
        tracking.parse_log_to(["wandb"])


def test_metric_names():
    assert tracking.scalars({"step": 3, "loss": 2.5, "lr": 1e-3, "val_loss": 2.0,
                             "val_perplexity": 7.4}) == {
        "train/loss": 2.5, "train/lr": 1e-3, "val/loss": 2.0, "val/perplexity": 7.4}


def test_tensorboard_has_every_metric_of_a_resumed_run_once(tmp_path, shakespeare):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    train(SMALL, small_run(out, stop_at=3, log_to=("tensorboard",)))
    train(SMALL, small_run(out, log_to=("tensorboard",)), resume=True)
    expected = metrics_by_tag(out)
    assert set(expected) == {"train/loss", "train/lr", "train/grad_norm", "train/tokens",
                             "train/tokens_per_s", "train/elapsed_s", "val/loss",
                             "val/perplexity"}
    logged = tensorboard_scalars(out / tracking.TENSORBOARD_DIR)
    assert set(logged) == set(expected)
    for tag, series in expected.items():
        assert [s for s, _ in logged[tag]] == [s for s, _ in series], tag
        assert [v for _, v in logged[tag]] == pytest.approx([v for _, v in series], rel=1e-6)
    assert [s for s, _ in logged["train/loss"]] == [1, 2, 3, 4, 5, 6]
    # the run config, as text, once
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out / tracking.TENSORBOARD_DIR))
    events.Reload()
    (config,) = events.Tensors("config/text_summary")
    text = config.tensor_proto.string_val[0].decode()
    logged_config = json.loads(text.strip("`\n"))
    assert logged_config["model"] == json.loads(json.dumps(SMALL.to_dict()))
    assert logged_config["train"]["max_steps"] == 6


def test_tensorboard_resume_discards_events_past_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    first = tracking.TensorBoardTracker(tmp_path, resume_step=None, config={"a": 1})
    for step in range(1, 6):  # logged up to step 5, then killed; the checkpoint was at 3
        first.log({"step": step, "loss": 10.0 + step})
    first.close()
    again = tracking.TensorBoardTracker(tmp_path, resume_step=3, config={"a": 1})
    for step in range(4, 7):
        again.log({"step": step, "loss": 20.0 + step})
    again.close()
    logged = tensorboard_scalars(tmp_path / tracking.TENSORBOARD_DIR)["train/loss"]
    assert logged == [(1, 11.0), (2, 12.0), (3, 13.0), (4, 24.0), (5, 25.0), (6, 26.0)]


def test_wandb_offline_run_is_continued_on_resume(tmp_path, shakespeare, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    out = tmp_path / "run"
    train(SMALL, small_run(out, stop_at=3, log_to=("wandb",)))
    run_id = (out / tracking.WANDB_ID_FILE).read_text().strip()
    train(SMALL, small_run(out, log_to=("wandb",)), resume=True)
    assert (out / tracking.WANDB_ID_FILE).read_text().strip() == run_id
    runs = sorted((out / "wandb").glob("offline-run-*"))  # one per process start
    # Two starts within the same second get the same folder name; wandb then appends "-1".
    assert runs and all(re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?", r.name)
                        for r in runs), [r.name for r in runs]
    data = b"".join((r / f"run-{run_id}.wandb").read_bytes() for r in runs)
    for tag, series in metrics_by_tag(out).items():
        assert sorted(set(wandb_history(data, tag))) == sorted({v for _, v in series}), tag
    assert sorted(set(wandb_history(data, "step"))) == [1, 2, 3, 4, 5, 6]
    assert b"d_model" in data  # the config


def test_cli_log_to_unknown_is_one_line_and_exit_2(tmp_path, capsys):
    from krakenlm.cli import main

    # in this process: the option is refused while the command line is read, before training
    # (a subprocess costs seconds of imports)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--preset", "gpt-tiny", "--out", str(tmp_path / "x"),
              "--log-to", "tensorboard,mlfow"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --log-to 'mlfow' is not a tracker; choose from tensorboard, wandb "
        "(metrics.jsonl is always written)")
    assert not (tmp_path / "x").exists()
