"""`krakenlm generate --world-size N`: the single-device command's output, from N processes."""

import pytest

from krakenlm.cli import main
from krakenlm.distributed.engine import random_state_dict
from krakenlm.models import ModelConfig
from krakenlm.models.transformer import Transformer
from krakenlm.runtime.checkpoint import save_checkpoint

CONFIG = ModelConfig(arch="kraken", degree=2, n_layers=2, d_model=32, n_heads=2, ffn_dim=64,
                     vocab_size=50304, context_len=24)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kraken-ckpt")
    model = Transformer(CONFIG)
    model.load_state_dict(random_state_dict(CONFIG, seed=5))
    save_checkpoint(directory, model, None, {"step": 0})
    return directory


def run(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", *args])
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.slow
def test_two_processes_print_the_single_device_text(checkpoint, capsys):
    for flags in (["--greedy"], ["--temperature", "1.2", "--top-k", "50", "--seed", "3"]):
        args = ["--checkpoint", str(checkpoint), "--prompt", "To be, or not", "--max-new-tokens",
                "12", *flags]
        code, single, err = run(capsys, *args)
        assert code == 0, err
        for sharding in (["--world-size", "2"], ["--world-size", "2", "--vocab-parallel-head"]):
            code, sharded, err = run(capsys, *args, *sharding)
            assert code == 0, err
            assert sharded == single and single.strip(), (flags, sharding)


@pytest.mark.parametrize("args,message", [
    (["--prompt", "word " * 30, "--world-size", "2"],
     "the prompt has 31 tokens but the model's context is 24"),
    (["--prompt", "hi", "--max-new-tokens", "5", "--world-size", "3"],
     "world size 3 does not divide the Kraken degree 2"),
    (["--prompt", "hi", "--world-size", "0"], "--world-size must be >= 1"),
])
def test_bad_input_is_refused_before_any_process_starts(checkpoint, capsys, args, message):
    code, out, err = run(capsys, "--checkpoint", str(checkpoint), *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
