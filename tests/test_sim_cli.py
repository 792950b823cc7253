"""`krakenlm sim` commands: JSON keys, errors as one line with exit code 2, torch-free."""

import json
import subprocess
import sys

import pytest

from krakenlm.cli import main


def _run(args, capsys):
    """Run the CLI in-process; a successful command exits 0 (typer's standalone mode)."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_run_json_keys(capsys):
    out = json.loads(_run(["sim", "run", "--system", "a100-80gb-x4", "--model", "llama3-8b",
                           "--tp", "2", "--batch", "2", "--prompt", "128", "--gen", "8",
                           "--json"], capsys))
    assert {"ttft_s", "tpot_s", "e2e_s", "memory_bytes_per_device", "breakdown"} <= set(out)
    assert out["ttft_s"] > 0 and out["tpot_s"] > 0 and out["e2e_s"] > out["ttft_s"]
    assert all({"op", "time_s"} <= set(row) for row in out["breakdown"])
    assert {row["op"] for row in out["breakdown"]} >= {"qkv", "attention", "ffn_up", "lm_head"}


def test_run_table_and_arch_kraken(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = _run(["sim", "run", "--system", "mi210-x4", "--model", "gpt3-1.3b", "--tp", "4",
                "--batch", "1", "--prompt", "128", "--gen", "4", "--arch", "kraken"], capsys)
    assert "TTFT" in out and "memory per device" in out and "allreduce_prev_outputs" in out
    assert "gpt3-1.3b as kraken" in out


def test_run_config_json_path(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
                                "num_attention_heads": 8, "num_key_value_heads": 2,
                                "num_hidden_layers": 4, "vocab_size": 32000}))
    out = json.loads(_run(["sim", "run", "--system", "a100-80gb-x4", "--model", str(path),
                           "--tp", "2", "--prompt", "64", "--gen", "2", "--json"], capsys))
    assert out["arch"] == "gpt"


@pytest.mark.parametrize("args,message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--system", "nope"], "unknown system 'nope'"),
    (["--tp", "3"], "does not divide the model's 32 attention heads"),
    (["--model", "gpt3-175b", "--batch", "8", "--prompt", "1024", "--gen", "1024"],
     "does not fit on a100-80gb-x4"),
    (["--model", "gpt3-175b", "--prompt", "2048", "--gen", "2"],
     "needs 2049 positions but gpt3-175b has a context of 2048 tokens"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    base = {"--system": "a100-80gb-x4", "--model": "llama2-7b", "--tp": "4", "--prompt": "16",
            "--gen": "2"}
    for key, value in zip(args[::2], args[1::2]):
        base[key] = value
    argv = ["sim", "run"] + [x for kv in base.items() for x in kv]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: ") and message in err
    assert err.count("\n") == 1


def test_malformed_system_yaml_and_config_json(tmp_path, capsys):
    bad_yaml = tmp_path / "sys.yaml"
    bad_yaml.write_text("name: x\ndevice: {core_count: [\n")
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{nope")
    for args in (["--system", str(bad_yaml), "--model", "llama2-7b"],
                 ["--system", "a100-80gb-x4", "--model", str(bad_json)]):
        with pytest.raises(SystemExit) as exc:
            main(["sim", "run", *args, "--prompt", "8", "--gen", "2"])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not valid YAML at line" in err and "not valid JSON" in err


def test_systems_lists_presets(capsys):
    rows = json.loads(_run(["sim", "systems", "--json"], capsys))
    assert {"a100-80gb-x4", "mi210-x4"} <= {r["name"] for r in rows}


def test_every_sim_command_has_help(capsys):
    for cmd in ("systems", "run", "validate", "calibrate", "cost", "sweep"):
        out = _run(["sim", cmd, "--help"], capsys)
        assert f"Usage: krakenlm sim {cmd}" in out and "--help" in out


def test_simulator_runs_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # any torch import would now fail
            "from krakenlm.simulator import simulate\n"
            "from krakenlm.models import get_preset\n"
            "r = simulate(get_preset('gpt3-1.3b'), 'a100-80gb-x4', 2, 1, 64, 3)\n"
            "assert r.ttft_s > 0\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_gpu_calibration_of_another_device_is_a_warning(capsys):
    """Plausible for a what-if device modelled on a measured GPU, but never silent."""
    from krakenlm.simulator.constants import gpu_kernels as store

    args = ["sim", "run", "--model", "llama3-8b", "--tp", "8", "--prompt", "8", "--gen", "2",
            "--json", "--gpu-calibration", str(store.shipped_dir() / "H100.yaml")]
    _run(args + ["--system", "a100-80gb-x8"], capsys)  # (reads stdout)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--system", "a100-80gb-x8"])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 0 and len(err) == 1 and err[0].startswith("warning: ")
    assert "measured on H100" in err[0] and "A100 80GB" in err[0]
    _run(args + ["--system", "h100-80gb-x8"], capsys)
    assert capsys.readouterr().err == ""


def test_sweep_does_not_rank_dies_beyond_the_reticle(capsys, monkeypatch):
    from krakenlm.design.sweep import Workload, sweep

    result = sweep("a100-80gb-x8", Workload("gpt3-13b", 8, 4, 256, 4), cores=(108, 128),
                   memories=("HBM3-5",), global_buffers_mib=(10, 160)).to_json()
    big = [r for r in result["designs"] if r["die_area_mm2"] > 858]
    assert [(r["cores"], r["global_buffer_bytes"] / 2**20) for r in big] == [(108, 160),
                                                                            (128, 160)]
    assert all(not r["feasible"] and "reticle limit 858 mm^2" in r["reason"]
               and "perf_per_usd_vs_base" not in r for r in big)
    assert all(r["feasible"] and r["perf_per_usd_vs_base"] > 0
               for r in result["designs"] if r not in big)
    monkeypatch.setenv("COLUMNS", "200")
    out = _run(["sim", "sweep", "--model", "gpt3-13b", "--batch", "4", "--prompt", "256",
                "--gen", "4", "--cores", "108,128", "--memories", "HBM3-5",
                "--global-buffers", "10,160"], capsys)
    assert "2 designs have a die beyond the reticle limit" in out
    assert out.count("HBM3") == 2  # the two ranked rows only
