import os
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

# Tests measure behaviour, not speed: one thread keeps multi-process tests from oversubscribing
# CI's two cores.
torch.set_num_threads(1)

# Hypothesis profiles (tests/test_fuzz_parsers.py; docs/fuzzing.md). `ci`, the default, is what
# `make test` runs: few examples, derandomized (the same examples on every run, so CI is
# reproducible). `long` draws fresh random examples, 50 times as many:
#   HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest tests/test_fuzz_parsers.py
# Timing varies with the machine (no deadline), and nothing is stored in .hypothesis/.
_FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True,
                          database=None, print_blob=True, suppress_health_check=_FUZZ_HEALTH)
settings.register_profile("long", max_examples=1000, deadline=None, derandomize=False,
                          database=None, print_blob=True, suppress_health_check=_FUZZ_HEALTH)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# `make test` runs on two pytest-xdist workers (`-n 2 --dist loadscope`) with the scheduler below:
# each module is one unit of work (its tests and module fixtures stay on one worker, so a
# module fixture is built once), and the modules that launch ranks over shared memory share the
# unit "ranks", so no test that counts the /dev/shm files ranks leave behind
# (test_dist_failures.py) runs beside another test's ranks. The grouping is done here rather
# than with xdist_group markers: pytest 9.2 ignores the node-id suffix through which
# pytest-xdist 3.8 applies them, and every test became its own unit.
RANK_MODULES = ("test_dist_", "test_demo.py")
# The units of about 10 s or more, longest first (seconds of one worker in `pytest
# --durations=0` on the quiet 2-core machine: ranks 115, checkpoint_crash 105, training 82,
# lm_eval 64, compare 59, stop_signals 54, sim_gpu_calibration 41, then 10-32 s), so the last units to
# go out are the short ones and both workers finish together (longest-first scheduling; xdist
# alone hands out the units with the most tests first, whatever they cost).
SLOW_UNITS = ("ranks", "tests/test_checkpoint_crash.py", "tests/test_training.py",
              "tests/test_compare.py", "tests/test_stop_signals.py", "tests/test_lm_eval.py",
              "tests/test_sim_gpu_calibration.py", "tests/test_gpu_collectives.py",
              "tests/test_sim_shipped_calibrations.py", "tests/test_adding_a_gpu.py",
              "tests/test_sim_loso.py", "tests/test_cli_bad_inputs.py", "tests/test_hf_export.py",
              "tests/test_gpu_gemm.py", "tests/test_run_dir.py", "tests/test_sim_fit_software.py",
              "tests/test_hf_import.py", "tests/test_tracking.py", "tests/test_data.py")


def work_unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or "ranks"."""
    module = nodeid.split("::")[0]
    return "ranks" if module.rsplit("/", 1)[-1].startswith(RANK_MODULES) else module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: fine without it
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "ordered", False):  # once, before the first unit goes out
                def priority(unit):
                    slow = SLOW_UNITS.index(unit) if unit in SLOW_UNITS else len(SLOW_UNITS)
                    return slow, -len(self.workqueue[unit])
                for unit in sorted(self.workqueue, key=priority):
                    self.workqueue.move_to_end(unit)
                self.ordered = True
            super()._assign_work_unit(node)

    return ModuleUnits(config, log)


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


def _default_stop_signals() -> None:
    # A shell running the suite in the background ignores SIGINT, `nohup` ignores SIGHUP, and
    # children inherit that: give them the default, as a terminal, `kill` or a scheduler finds it.
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start_cli(*args: str, env_extra: dict | None = None, **popen) -> subprocess.Popen:
    """Start `python -m krakenlm ARGS` in the background (stderr piped, as text)."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "krakenlm", *args], stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=_default_stop_signals, **popen)


def wait_for_rows(proc: subprocess.Popen, metrics, rows: int) -> None:
    """Poll (no timing) until `metrics` (a metrics.jsonl) holds `rows` lines; fail if `proc`
    ends first."""
    import time

    while not (metrics.is_file() and metrics.read_text().count("\n") >= rows):
        if proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before {rows} rows in "
                                 f"{metrics}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.1)
