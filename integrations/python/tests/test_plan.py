"""tierzero.plan() against `tierzero plan --json`: the same builder (src/cli/plan_report.cpp), so
the same settings give the same dict; no fit and bad settings raise tierzero.Error."""
import json
import os
import pathlib
import subprocess

import pytest

import tierzero

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Fixed rates, so the plan does not depend on this machine's measurements or load.
RATES = ROOT / "tests" / "robust" / "fixed_rates.json"


def cli_binary():
    """The command of the build this package came from: $TIERZERO_CLI, else the build that
    scripts/test_python.sh was given (TIERZERO_BUILD), else build/ci."""
    if os.environ.get("TIERZERO_CLI"):
        return pathlib.Path(os.environ["TIERZERO_CLI"])
    build = ROOT / os.environ.get("TIERZERO_BUILD", "build/ci")
    return build / "src" / "cli" / "tierzero"


def test_plan_returns_what_the_command_prints_as_json():
    binary = cli_binary()
    if not binary.exists():
        pytest.skip(f"no tierzero command at {binary} to compare with (set TIERZERO_CLI)")
    settings = dict(model="gpt2", device_mem=2 << 30, host_mem=8 << 30, ranks=2, seq=256,
                    global_batch=8, calibration=str(RATES), device="cpu")
    ours = tierzero.plan(**settings)
    out = subprocess.run(
        [str(binary), "plan", "--json", "--model", "gpt2", "--device-mem", str(2 << 30),
         "--host-mem", str(8 << 30), "--ranks", "2", "--seq", "256", "--global-batch", "8",
         "--calibration", str(RATES), "--device", "cpu"],
        check=True, capture_output=True, text=True).stdout
    theirs = json.loads(out)
    assert ours == theirs
    assert ours["found"] and ours["chosen"]["step_s"] > 0
    assert ours["world"]["ranks"] == 2 and ours["rates"]["gemm_gflops"] == 50
    assert ours["config"]["zero_optimization"]["stage"] == ours["chosen"]["stage"]
    tiers = ours["chosen"]["tiers"]
    assert all(tiers[t]["need"] <= tiers[t]["usable"] for t in ("device", "host", "nvme"))


def test_plan_that_fits_nowhere_is_a_tierzero_error():
    with pytest.raises(tierzero.Error) as info:
        tierzero.plan(model="gpt2", device_mem=1 << 20, host_mem=1 << 20, calibration=str(RATES),
                      device="cpu")
    assert "fits" in info.value.what and info.value.hint


def test_plan_rejects_bad_settings():
    with pytest.raises(tierzero.Error):
        tierzero.plan(model="no-such-model", device_mem=1 << 30, calibration=str(RATES),
                      device="cpu")
    with pytest.raises(TypeError, match="unknown settings"):
        tierzero.plan(device_mem=1 << 30, stage=3)


def test_plan_searches_only_the_recompute_mode_asked_and_refuses_others():
    settings = dict(model="gpt2", device_mem=2 << 30, host_mem=8 << 30, seq=256, global_batch=8,
                    calibration=str(RATES), device="cpu")
    for mode in ("none", "full"):
        chosen = tierzero.plan(recompute=mode, **settings)["chosen"]
        assert chosen["recompute"] == mode
    with pytest.raises(tierzero.Error) as e:
        tierzero.plan(recompute="some", **settings)
    assert "recompute 'some' is not a recompute mode" in str(e.value)


def test_plan_writes_the_asked_precision_and_computes_as_the_device_would():
    settings = dict(model="gpt2", device_mem=3 << 30, host_mem=8 << 30, seq=256, global_batch=8,
                    calibration=str(RATES))
    gpu = tierzero.plan(precision="bf16", device="cuda", **settings)
    assert gpu["precision"] == {"working": "bf16", "compute": "bf16"}
    assert gpu["config"]["bf16"] == {"enabled": True}
    cpu = tierzero.plan(precision="fp16", device="cpu", **settings)
    assert cpu["precision"] == {"working": "fp16", "compute": "fp32"}
    assert cpu["config"]["fp16"] == {"enabled": True} and "bf16" not in cpu["config"]
    assert "bf16" not in tierzero.plan(device="cpu", **settings)["config"]
    with pytest.raises(tierzero.Error) as e:
        tierzero.plan(precision="fp8", device="cpu", **settings)
    assert "precision 'fp8'" in str(e.value)
