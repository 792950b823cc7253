"""docs/adding-a-kernel.md, step by step: a made-up kernel form is written to the protocol,
registered, fitted on a small table made from the form itself (known constants plus noise),
its constants recovered, and timed in a query through the registry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.simulator import Simulator
from krakenlm.simulator.calibration.fit import fit_dataset
from krakenlm.simulator.constants.gpu_kernels import DeviceCalibration, Entry, load_file, save
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.constants.template import default_calibration
from krakenlm.simulator.graph import OpSpec
from krakenlm.simulator.kernels import base
from krakenlm.simulator.kernels.base import SERVING, Conditions, KernelForm, Setting
from krakenlm.simulator.kernels.params import Param
from krakenlm.simulator.measurements.kernel_tables import Dataset
from krakenlm.simulator.timing import OpTimer

H100 = load_system("h100-80gb-x8")
TRUTH = {"floor_s": 3e-6, "memory_efficiency": 0.8, "sync_s": 2e-6}


# 1. the form: a norm that streams its bytes and synchronises its rows, one CTA per row, in
# whole waves over the SMs or (a persistent kernel) spread evenly over them
@dataclass(frozen=True)
class SyncedStructure:
    rows_per_cta: int = 1  # rows one CTA handles before it synchronises

    def __post_init__(self) -> None:
        base.one_of("rows_per_cta", self.rows_per_cta, (1, 8))


class SyncedNorm(KernelForm):
    """floor_s + bytes / (HBM x memory_efficiency) + ceil(rows / (rows_per_cta SMs)) x sync_s."""

    family = "elementwise"
    name = "elementwise/test-synced"
    Structure = SyncedStructure

    def offered(self, setting: Setting) -> bool:
        return setting.framework == "vllm" and setting.variant == "norm"

    def structures(self, setting: Setting, measured=None) -> tuple:
        return (SyncedStructure(1), SyncedStructure(8))

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return (Param("floor_s", "seconds", 2e-6, "launch floor"),
                Param("memory_efficiency", "fraction", 0.7, "fraction of HBM reached"),
                Param("sync_s", "seconds", 1e-7, "one wave of rows' block synchronisation"))

    def key(self, cols) -> list[str]:
        return [f"{r},{b}" for r, b in zip(cols["rows"], cols["bytes"])]

    def predict(self, setting: Setting, cols, constants, structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        dev, p = setting.dev, constants
        moved = np.asarray(cols["bytes"], float)
        rows = np.asarray(cols["rows"], float)
        waves = np.ceil(rows / (structure.rows_per_cta * dev.core_count))
        return (p["floor_s"] + moved / (dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"])
                + waves * p["sync_s"])


@pytest.fixture
def form():
    # 2. registered: every calibration, query and validation now reaches it by its name
    registered = base.register(SyncedNorm())
    yield registered
    base.unregister(registered.name)


def table(form, rng):
    """A measured table made from the form itself: 8 rows per CTA, TRUTH, 1 % noise."""
    rows = np.repeat([1, 16, 128, 1024, 4096, 16384, 65536], 8)
    width = np.tile([512, 1024, 2048, 4096, 5120, 8192, 12288, 16384], 7)
    cols = {"rows": rows, "bytes": rows * width * 2 * 2}
    setting = Setting(H100, "vllm", "norm")
    clean = form.predict(setting, cols, TRUTH, SyncedStructure(8))
    return setting, cols, clean * rng.normal(1.0, 0.01, len(clean))


def test_a_new_form_is_fitted_recovered_and_timed_through_the_registry(form, tmp_path):
    assert form in base.forms("elementwise")
    setting, cols, measured = table(form, np.random.default_rng(0))
    # 3. fitted like every dataset: each offered form (the shipped row and flat kernels too)
    # and each structure in turn, the lowest fit-half error wins
    ds = Dataset("synthetic", setting, "elementwise", cols, measured, form.key(cols))
    assert form in ds.forms() and len(ds.forms()) == 3
    result = fit_dataset(ds, "h100-80gb-x8")
    assert (result.form, result.structure) == (form.name, SyncedStructure(8))
    assert result.mape_held_out < 2.0
    for name, value in TRUTH.items():
        assert result.params[name] == pytest.approx(value, rel=0.1), name
    # 4. stored as a format-3 entry, read back typed
    cal = DeviceCalibration("H100", {"system": "h100-80gb-x8"})
    cal.put("vllm", "0.24.0", "elementwise", "norm",
            Entry(result.form, result.structure, result.params, result.harness,
                  result.summary()))
    path = save(cal, tmp_path / "H100.yaml")
    assert "form: elementwise/test-synced" in path.read_text()
    cal = load_file(path)
    assert cal.entry("vllm", "elementwise", "norm").structure == SyncedStructure(8)
    # 5. a query's norm is timed by the new form with the fitted constants
    timer = OpTimer(H100, load_software("vllm"), "simulate", "fp16", default_calibration(), cal)
    spec = OpSpec("norm", "LayerNorm", "stream", ("rmsnorm", 512, 8192))
    moved = 512 * 8192 * 2 * 2  # RMSNorm reads and writes its 16-bit activation
    stored = cal.entry("vllm", "elementwise", "norm").params  # 6 significant digits
    expected = form.predict(setting, {"rows": np.array([512]), "bytes": np.array([moved])},
                            stored, SyncedStructure(8))[0]
    assert timer(spec).time_s == pytest.approx(expected, rel=1e-12)
    assert "elementwise (norm)" in timer.sources
    r = Simulator(H100, "vllm", gpu_calibration=cal).run(get_preset("llama2-7b"), 1, 1, 128, 2)
    assert "norm; held-out MAPE" in r.kernel_sources["elementwise (norm)"]


def test_an_entry_of_a_form_that_is_not_registered_is_a_clear_error(form, tmp_path):
    cal = DeviceCalibration("H100", {"system": "h100-80gb-x8"})
    cal.put("vllm", "0.24.0", "elementwise", "norm",
            Entry(form.name, SyncedStructure(8), dict(TRUTH)))
    path = save(cal, tmp_path / "H100.yaml")
    base.unregister(form.name)
    from krakenlm.simulator.constants.gpu_kernels import GpuCalibrationError

    with pytest.raises(GpuCalibrationError, match="no kernel form 'elementwise/test-synced'"):
        load_file(path)
    base.register(form)
    text = path.read_text().replace("rows_per_cta: 8", "rows_per_cta: 3")
    path.write_text(text)
    with pytest.raises(GpuCalibrationError, match="structure rows_per_cta must be one of 1, 8"):
        load_file(path)
