"""Bad input and broken peers: a clear error, and no process left behind."""

import glob
import multiprocessing as mp
import os
import signal

import pytest
import torch
from conftest import run_cli

from krakenlm.distributed.comm import PeerError
from krakenlm.distributed.engine import build_local_model
from krakenlm.distributed.launch import RankFailedError, run_ranks
from krakenlm.distributed.launch import _free_port as free_port
from krakenlm.errors import KrakenError
from krakenlm.models import ModelConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _build_kraken_degree_3(ctx):
    config = ModelConfig(arch="kraken", degree=3, n_layers=2, d_model=16, n_heads=2, ffn_dim=32,
                         vocab_size=50, context_len=16)
    build_local_model(ctx, config)


def _rank1_raises_while_rank0_reduces(ctx):
    if ctx.rank == 1:
        raise RuntimeError("rank one exploded")
    ctx.new_comm().all_reduce(torch.ones(3))


def _rank1_is_killed_while_rank0_reduces(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.new_comm().all_reduce(torch.ones(3))


def _no_rank_left():
    for child in mp.active_children():
        child.join(timeout=5)
    return not mp.active_children()


def test_world_size_not_dividing_kraken_degree_is_a_user_error():
    with pytest.raises(KrakenError, match="world size 2 does not divide the Kraken degree 3"):
        run_ranks(_build_kraken_degree_3, world_size=2, timeout_s=30)
    assert _no_rank_left()


def test_a_failing_rank_stops_all_and_its_error_wins_over_its_peers_echo():
    with pytest.raises(RuntimeError, match="(?s)rank 1 failed.*rank one exploded") as info:
        run_ranks(_rank1_raises_while_rank0_reduces, world_size=2, timeout_s=30)
    assert not isinstance(info.value, PeerError)
    assert _no_rank_left()


def _shm_files():
    """This process's launches' arena files (run token `s<launcher pid>x<port>`,
    distributed/launch.py): another krakenlm run on the machine creates and removes its own."""
    return set(glob.glob(f"/dev/shm/krakenlm-shm-s{os.getpid()}x*"))


def test_a_killed_rank_is_reported_by_the_parent_and_leaks_no_shared_memory():
    before = _shm_files()
    with pytest.raises(RankFailedError, match="rank 1 was killed by SIGKILL"):
        run_ranks(_rank1_is_killed_while_rank0_reduces, world_size=2, timeout_s=30)
    assert _no_rank_left()
    assert _shm_files() == before


def test_a_peer_that_never_joins_is_a_clear_timeout_not_a_hang():
    """Rank 0 of a torchrun world of 2 whose rank 1 never starts: exit 2 with a message that
    names the missing rank and the fix."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    proc = run_cli("bench", "tp", "--sizes", "tiny", "--timeout", "2", env_extra=env, timeout=90)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: rank 0 of 2 could not form the process group"), last
    assert "within 2 s" in last and "1/2 clients joined" in last and "--nproc-per-node 2" in last
    assert proc.stdout == ""
