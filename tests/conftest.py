import os
import subprocess
import sys

import pytest
import torch

# Tests measure behaviour, not speed: one thread keeps multi-process tests from oversubscribing
# CI's two cores.
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Prepared corpora go to a per-session cache, never the user's ~/.cache."""
    path = tmp_path_factory.mktemp("krakenlm-cache")
    old = os.environ.get("KRAKENLM_CACHE")
    os.environ["KRAKENLM_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("KRAKENLM_CACHE", None)
    else:
        os.environ["KRAKENLM_CACHE"] = old


@pytest.fixture(scope="session")
def shakespeare(isolated_cache):
    from krakenlm.data.prepare import prepare_corpus
    return prepare_corpus("shakespeare", progress=False)


def run_cli(*args: str, env_extra: dict | None = None, timeout: float = 300):
    """Run `python -m krakenlm ARGS` in a subprocess; returns the CompletedProcess."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "krakenlm", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
