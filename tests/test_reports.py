"""Reports below the CLI (krakenlm.console): what a command prints is a report's to_table() or
to_json(); `sim sweep` is a preset grid of the design-space runner, on the one memory table."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from krakenlm.cli import main
from krakenlm.console import Plain


@dataclass
class _Lines:
    items: list

    def to_json(self):
        return {"n": len(self.items)}

    def to_table(self):
        return self.items


def test_plain_lines_are_printed_as_they_are_and_the_others_through_rich(capsys):
    from krakenlm.cli._console import print_report

    long_path = "runs/[bold]x/" + "d" * 200 + ".yaml"
    print_report(_Lines([Plain(f"wrote {long_path}"), "[bold]rich[/bold] line"]))
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {long_path}", "rich line"]  # no wrap, no markup taken from a path
    print_report(_Lines([1, 2]), as_json=True)
    assert json.loads(capsys.readouterr().out) == {"n": 2}


def test_sweep_is_a_grid_of_the_design_runner():
    """A sweep design is the design tools' design of the same knobs, on the latency objective
    at the workload's batch with tp fixed, against the base at that tp."""
    from krakenlm.design.evaluate import Evaluator
    from krakenlm.design.sweep import Workload, sweep

    workload = Workload("gpt3-13b", 8, 4, 256, 4)
    report = sweep("a100-80gb-x8", workload, cores=(54,), memories=("HBM3-6", "DDR5-16"),
                   global_buffers_mib=(40,))
    ev = Evaluator("a100-80gb-x8", workload.objective(), reference={"tp": 8})
    assert report.base["e2e_s"] == ev.baseline["e2e_s"]
    for row, (tech, units) in zip(report.designs, (("HBM3", 6), ("DDR5", 16))):
        want = ev.evaluate({"cores": 54, "memory": tech, "memory_units": units,
                            "global_buffer_mib": 40, "tp": 8})
        assert (row["e2e_s"], row["die_area_mm2"], row["system_usd"]) == (
            want["e2e_s"], want["die_area_mm2"], want["system_usd"])
        assert row["tokens_per_s"] == 4 * 4 / want["e2e_s"]
    assert report.designs[0]["memory_bandwidth_bytes_per_s"] == 6 * 819e9  # the one table's
    assert report.designs[0]["system"] == "a100-80gb-x8:54c-HBM3-6-40M"


def test_a_memory_configuration_is_technology_units_of_the_table():
    from krakenlm.design.knobs import MEMORY_TECHNOLOGIES
    from krakenlm.design.sweep import DEFAULT_MEMORIES, memory_knobs
    from krakenlm.errors import KrakenError

    assert memory_knobs("LPDDR5-16") == {"memory": "LPDDR5", "memory_units": 16}
    assert {memory_knobs(m)["memory"] for m in DEFAULT_MEMORIES} == set(MEMORY_TECHNOLOGIES)
    assert all(t.source for t in MEMORY_TECHNOLOGIES.values())
    for bad in ("HBM9-5", "HBM3", "HBM3-0", "DDR5-x"):
        with pytest.raises(KrakenError, match="--memories: unknown"):
            memory_knobs(bad)


def test_validate_writes_what_it_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "layers", "--out", str(tmp_path / "v")])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Layers: operators of Llama-2-70B layers" in out
    assert out.rstrip().endswith(f"CSV and plots in {tmp_path / 'v'}/")
    assert (tmp_path / "v" / "layers.csv").read_text().startswith("source,model,system,")
    assert (tmp_path / "v" / "layers.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit):
        main(["sim", "validate", "--level", "layers", "--json"])
    assert set(json.loads(capsys.readouterr().out)) == {"skipped", "layers"}
