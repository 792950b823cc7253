"""The process bootstrap (src/krakenlm/runtime): one reading of $KRAKENLM_DEVICE and one device
rule for the trainer and for the ranks of the sharded runtime."""

import pytest
import torch

from krakenlm.distributed.launch import init_rank
from krakenlm.errors import KrakenError
from krakenlm.runtime.device import pick_device


@pytest.fixture
def one_gpu(monkeypatch):
    """A host where torch sees one GPU; the GPUs set as current are recorded."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def test_a_gpu_for_each_local_process_or_the_cpu_for_all(one_gpu, monkeypatch):
    monkeypatch.delenv("KRAKENLM_DEVICE", raising=False)
    assert pick_device(0) == torch.device("cuda", 0) and one_gpu == [0]
    assert pick_device(1, local_world_size=2) == torch.device("cpu")  # 2 processes, 1 GPU
    assert one_gpu == [0]
    monkeypatch.setenv("KRAKENLM_DEVICE", " CPU ")
    assert pick_device(0) == torch.device("cpu") and one_gpu == [0]


def test_krakenlm_device_cuda_insists_on_a_gpu_per_local_process(one_gpu, monkeypatch):
    monkeypatch.setenv("KRAKENLM_DEVICE", "cuda")
    with pytest.raises(KrakenError, match=r"KRAKENLM_DEVICE=cuda but torch sees 1 GPU\(s\) for 2 "
                                          r"processes on this host \(one GPU each\); start at "
                                          r"most 1 local processes"):
        pick_device(1, local_world_size=2)
    assert one_gpu == []


@pytest.mark.parametrize("value, message", [
    ("tpu", "KRAKENLM_DEVICE=tpu is not a device krakenlm runs on: use cpu, cuda or auto"),
    ("cuda", "KRAKENLM_DEVICE=cuda but torch"),
])
def test_a_rank_of_the_sharded_runtime_reads_krakenlm_device_as_the_trainer_does(
        value, message, monkeypatch):
    """Under torchrun a rank joins its group through the same bootstrap: an unusable
    KRAKENLM_DEVICE is the trainer's one-line error, before any process group is formed."""
    for name, env_value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                            ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                            ("MASTER_PORT", "1"), ("KRAKENLM_DEVICE", value)):
        monkeypatch.setenv(name, env_value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a host without a GPU
    with pytest.raises(KrakenError, match=message):
        init_rank(timeout_s=5)
    assert not torch.distributed.is_initialized()
