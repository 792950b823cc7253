"""The paper-scale recipes resolve to the spec's training setup on any world size."""

import pytest

from krakenlm.errors import KrakenError
from krakenlm.models import get_preset
from krakenlm.training.recipes import RECIPES, get_recipe

SPEC_KRAKEN_PRESETS = {"kraken-125m-2way", "kraken-125m-4way", "kraken-125m-6way",
                       "kraken-350m-2way", "kraken-350m-4way", "kraken-760m-4way"}


def test_every_spec_preset_and_its_baseline_has_a_recipe():
    assert SPEC_KRAKEN_PRESETS | {"gpt2-124m", "gpt2-350m", "gpt2-774m"} == set(RECIPES)
    for recipe in RECIPES.values():
        get_preset(recipe.preset)  # exists


@pytest.mark.parametrize("name, lr", [("kraken-125m-2way", 2.5e-4), ("gpt2-124m", 2.5e-4),
                                      ("kraken-350m-4way", 1.5e-4), ("gpt2-774m", 1.5e-4)])
def test_recipe_matches_the_spec(name, lr):
    options = get_recipe(name).train_options(world_size=8)
    assert options["peak_lr"] == lr
    assert (options["warmup_steps"], options["max_steps"]) == (2000, 300_000)
    assert options["min_lr_ratio"] == 0.1 and options["betas"] == (0.9, 0.95)
    assert options["weight_decay"] == 0.1 and options["grad_clip"] == 1.0
    assert options["precision"] == "bf16" and options["data"] == "openwebtext"
    assert options["seq_len"] == 1024


@pytest.mark.parametrize("world_size, micro, accum", [(1, 12, 40), (2, 12, 20), (8, 12, 5),
                                                      (16, 10, 3), (48, 10, 1)])
def test_tokens_per_step_do_not_depend_on_the_world_size(world_size, micro, accum):
    recipe = get_recipe("kraken-125m-2way")
    assert recipe.split(world_size) == (micro, accum)
    assert micro * accum * world_size * 1024 == 491_520 == recipe.tokens_per_step


def test_larger_models_take_smaller_micro_batches():
    assert get_recipe("kraken-760m-4way").split(8) == (4, 15)
    assert get_recipe("gpt2-350m").split(8) == (6, 10)


def test_recipe_errors_are_user_errors():
    with pytest.raises(KrakenError, match="unknown recipe 'nope'"):
        get_recipe("nope")
    with pytest.raises(KrakenError, match="7 processes cannot share evenly"):
        get_recipe("gpt2-124m").split(7)


def test_gpu_hours_follow_the_flops():
    small, large = get_recipe("gpt2-124m"), get_recipe("gpt2-774m")
    # 147.5B tokens x ~6 x 124M parameters plus attention: ~1.2e20 FLOPs
    assert 1.1e20 < small.train_flops() < 1.3e20
    assert large.gpu_hours() / small.gpu_hours() == pytest.approx(
        large.train_flops() / small.train_flops())
    assert small.gpu_hours(mfu=0.2) == pytest.approx(2 * small.gpu_hours(mfu=0.4))


def _dry_run(argv, capsys, monkeypatch, world_size="8"):
    import json

    from krakenlm.cli import main

    monkeypatch.setenv("WORLD_SIZE", world_size)  # as torchrun sets them: rank 0 of N
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 0, err
    return json.loads(out)


def test_train_recipe_resolves_on_the_command_line(tmp_path, capsys, monkeypatch):
    resolved = _dry_run(["--recipe", "kraken-350m-4way", "--out", str(tmp_path / "r")],
                        capsys, monkeypatch)
    assert resolved["model"] == get_preset("kraken-350m-4way").to_dict()
    train = resolved["train"]
    assert (train["batch_size"], train["grad_accum"], train["peak_lr"]) == (6, 10, 1.5e-4)
    assert (train["max_steps"], train["data"], train["compile"]) == (300_000, "openwebtext", True)
    assert not (tmp_path / "r").exists()  # a dry run writes nothing


def test_explicit_options_override_the_recipe(tmp_path, capsys, monkeypatch):
    train = _dry_run(["--recipe", "gpt2-124m", "--out", str(tmp_path / "r"), "--lr", "6e-4",
                      "--batch-size", "8", "--data", "shakespeare"], capsys, monkeypatch,
                     world_size="1")["train"]
    assert (train["peak_lr"], train["batch_size"], train["data"]) == (6e-4, 8, "shakespeare")
    assert train["grad_accum"] == 40 and train["warmup_steps"] == 2000  # still the recipe's


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "kraken-125m-3way"], "unknown recipe 'kraken-125m-3way'"),
    (["--recipe", "gpt2-124m", "--preset", "gpt-tiny"], "trains the preset gpt2-124m"),
])
def test_recipe_errors_on_the_command_line(argv, message, tmp_path, capsys):
    from krakenlm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--out", str(tmp_path / "r"), "--dry-run", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and message in err
