"""tierzero.train / Run: per-step records, stopping from the callback, Ctrl-C with a checkpoint,
errors as tierzero.Error, and the profile and checkpoint readers over the run's files."""
import math
import os
import signal
import struct

import numpy as np
import pytest

import tierzero


def test_train_hands_each_step_to_the_callback(tiny_config):
    seen = []
    result = tierzero.train(tiny_config, seen.append, quiet=True)
    assert [m["step"] for m in seen] == [1, 2, 3, 4]
    assert [m["loss"] for m in seen] == [s["loss"] for s in result["steps"]]
    for m in seen:
        assert math.isfinite(m["loss"]) and m["loss"] > 0
        assert m["tokens_per_second"] > 0 and m["lr"] >= 0
    assert result["parameter_count"] > 0
    assert not result["interrupted"]


def test_train_reads_a_config_file(tiny_config, tmp_path):
    import json
    path = tmp_path / "run.json"
    path.write_text(json.dumps(tiny_config))
    assert len(tierzero.train(str(path), quiet=True)["steps"]) == 4


def test_callback_returning_false_stops_after_that_step(tiny_config):
    seen = []
    result = tierzero.train(tiny_config, lambda m: seen.append(m) or m["step"] < 2, quiet=True)
    assert [m["step"] for m in seen] == [1, 2]
    assert len(result["steps"]) == 2


def test_an_exception_in_the_callback_stops_the_run_and_propagates(tiny_config):
    def boom(m):
        raise ValueError("from the callback")
    with pytest.raises(ValueError, match="from the callback"):
        tierzero.train(tiny_config, boom, quiet=True)


def test_run_iterates_over_the_steps(tiny_config):
    run = tierzero.Run(tiny_config, quiet=True)
    steps = [m["step"] for m in run]
    assert steps == [1, 2, 3, 4]
    assert len(run.result["steps"]) == 4


def test_leaving_a_run_early_stops_it(tiny_config):
    tiny_config["tierzero"]["steps"] = 50
    run = tierzero.Run(tiny_config, quiet=True)
    for m in run:
        if m["step"] == 2:
            break
    assert run.result is not None and len(run.result["steps"]) <= 3


def test_a_bad_config_is_a_tierzero_error_with_what_where_hint(tiny_config):
    tiny_config["tierzero"]["seq_len"] = 64  # beyond the model's context of 16
    with pytest.raises(tierzero.Error) as info:
        tierzero.train(tiny_config, quiet=True)
    e = info.value
    assert "seq_len" in str(e)
    assert isinstance(e.what, str) and e.what
    assert isinstance(e.where, str) and isinstance(e.hint, str)


def test_an_unknown_key_is_a_tierzero_error(tiny_config):
    tiny_config["zero_optimization"]["offload_parm"] = {}
    with pytest.raises(tierzero.Error, match="offload_param"):
        tierzero.train(tiny_config, quiet=True)


def _llmc_wte_wpe(path):
    """wte (Vp, C) and wpe (maxT, C) of an llm.c model file (header: magic, version, maxT, V, L,
    NH, C, Vp)."""
    with open(path, "rb") as f:
        header = struct.unpack("256i", f.read(1024))
        assert header[0] == 20240326
        context, channels, vocab_padded = header[2], header[6], header[7]
        wte = np.frombuffer(f.read(4 * vocab_padded * channels), dtype=np.float32)
        wpe = np.frombuffer(f.read(4 * context * channels), dtype=np.float32)
    return wte.reshape(vocab_padded, channels), wpe.reshape(context, channels)


def test_sigint_saves_the_checkpoint_and_raises_keyboard_interrupt(tiny_config, tmp_path):
    tiny_config["tierzero"]["steps"] = 50
    tiny_config["tierzero"]["checkpoint"] = {"save_dir": str(tmp_path / "ckpt")}
    seen = []

    def interrupt_at_two(m):
        seen.append(m["step"])
        if m["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C would

    with pytest.raises(KeyboardInterrupt):
        tierzero.train(tiny_config, interrupt_at_two, quiet=True)
    assert seen == [1, 2]
    ckpt = tierzero.open_checkpoint(tmp_path / "ckpt")
    assert ckpt.step == 2
    # Python's own handler is back: a later run trains normally.
    tiny_config["tierzero"]["steps"] = 1
    del tiny_config["tierzero"]["checkpoint"]
    assert len(tierzero.train(tiny_config, quiet=True)["steps"]) == 1


def test_sigterm_stops_cleanly_with_the_checkpoint_saved(tiny_config, tmp_path):
    # SIGTERM reaches the trainer's own handler (Python has none): the run ends after the step
    # with the checkpoint written and returns normally, marked interrupted.
    tiny_config["tierzero"]["steps"] = 50
    tiny_config["tierzero"]["checkpoint"] = {"save_dir": str(tmp_path / "ckpt")}

    def terminate_at_two(m):
        if m["step"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    result = tierzero.train(tiny_config, terminate_at_two, quiet=True)
    assert result["interrupted"] and len(result["steps"]) == 2
    assert tierzero.open_checkpoint(tmp_path / "ckpt").step == 2


def _signal_at(step, sig, seen):
    # A step callback that records each step and sends `sig` to this process (as Ctrl-C would
    # SIGINT) at `step`.
    def callback(m):
        seen.append(m["step"])
        if m["step"] == step:
            os.kill(os.getpid(), sig)

    return callback


def test_sigint_without_checkpoints_stops_after_the_step(tiny_config):
    tiny_config["tierzero"]["steps"] = 50
    seen = []
    with pytest.raises(KeyboardInterrupt):
        tierzero.train(tiny_config, _signal_at(2, signal.SIGINT, seen), quiet=True)
    assert seen == [1, 2]


def test_sigint_with_only_a_model_to_save_writes_it_and_raises(tiny_config, tmp_path):
    # No training checkpoints, but save_checkpoint: the trainer takes the signal, ends after the
    # step, writes the model, and KeyboardInterrupt is still raised.
    tiny_config["tierzero"]["steps"] = 50
    tiny_config["tierzero"]["save_checkpoint"] = str(tmp_path / "model.bin")
    seen = []
    with pytest.raises(KeyboardInterrupt):
        tierzero.train(tiny_config, _signal_at(2, signal.SIGINT, seen), quiet=True)
    assert seen == [1, 2]
    assert (tmp_path / "model.bin").stat().st_size > 0


def test_checkpoint_tensors_match_the_model_file(tiny_config, tmp_path):
    tiny_config["tierzero"]["checkpoint"] = {"save_dir": str(tmp_path / "ckpt")}
    tiny_config["tierzero"]["save_checkpoint"] = str(tmp_path / "model.bin")
    tierzero.train(tiny_config, quiet=True)
    ckpt = tierzero.open_checkpoint(tmp_path / "ckpt")
    assert ckpt.step == 4 and "wte.weight" in ckpt.names()
    wte, wpe = _llmc_wte_wpe(tmp_path / "model.bin")
    got_wte = ckpt["wte.weight"]
    assert got_wte.shape == (257, 32) and got_wte.dtype == np.float32
    np.testing.assert_array_equal(got_wte, wte[:257])
    np.testing.assert_array_equal(ckpt["wpe.weight"], wpe)
    m = ckpt.tensor("h.0.mlp.c_fc.weight", "exp_avg_sq")
    assert m.shape == (32, 128) and np.all(m >= 0) and np.any(m > 0)
    with pytest.raises(tierzero.Error, match="no tensor"):
        ckpt["h.9.attn.c_attn.weight"]


def test_bf16_working_copy_reads_as_bfloat16(tiny_config, tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tiny_config["bf16"] = {"enabled": True}
    tiny_config["zero_optimization"]["stage"] = 1
    tiny_config["tierzero"]["checkpoint"] = {"save_dir": str(tmp_path / "ckpt")}
    tiny_config["tierzero"]["steps"] = 2
    tierzero.train(tiny_config, quiet=True)
    ckpt = tierzero.open_checkpoint(tmp_path / "ckpt")
    w = ckpt.tensor("h.1.attn.c_proj.weight", "working")
    assert w.dtype == ml_dtypes.bfloat16 and w.shape == (32, 32)
    master = ckpt.tensor("h.1.attn.c_proj.weight")
    # The working copy is the master rounded to bf16.
    np.testing.assert_array_equal(w, master.astype(ml_dtypes.bfloat16))


def test_profile_timeline_as_numpy(tiny_config, tmp_path):
    path = tmp_path / "profile.json"
    tiny_config["zero_optimization"] = {"stage": 3, "offload_optimizer": {"device": "cpu"}}
    tierzero.train(tiny_config, quiet=True, profile=str(path), timeline=True)
    p = tierzero.open_profile(path)
    assert list(p.step) == [1, 2, 3, 4]
    assert p.tiers == ["device", "host", "nvme"] and "optimizer" in p.categories
    assert p.at_end.shape == (4, 3, len(p.categories))
    host_opt = p.bytes("host", "optimizer", series="at_end")
    assert np.all(host_opt > 0)  # Adam's states live in the pinned pool
    assert p.timeline_bytes.shape[0] == p.timeline_time_s.shape[0] > 1
    assert np.all(np.diff(p.timeline_time_s) >= 0)
    assert p.bytes("device").max() <= p.tier_peak[:, 0].max()


def test_estimate_returns_plain_data():
    e = tierzero.estimate(model="gpt2", stage=3, ranks=4, offload_optimizer="cpu")
    assert e["stage"] == 3 and e["world"]["ranks"] == 4
    assert e["totals"]["host"] > 0 and e["tiers"]["host"]["optimizer"] > 0
    assert any(row["valid"] for row in e["table"])
    with pytest.raises(tierzero.Error):
        tierzero.estimate(model="no-such-model")


def test_estimate_takes_the_precision_device_and_recompute():
    base = dict(model="gpt2", stage=3, micro_batch=2, seq=128)
    gpu = tierzero.estimate(precision="bf16", device="cuda", **base)
    assert (gpu["working_dtype"], gpu["compute_dtype"]) == ("bf16", "bf16")
    cpu = tierzero.estimate(precision="bf16", device="cpu", **base)
    assert (cpu["working_dtype"], cpu["compute_dtype"]) == ("bf16", "fp32")
    assert gpu["buffers"]["device"]["activation"] < cpu["buffers"]["device"]["activation"]
    full = tierzero.estimate(recompute="full", **base)
    assert full["checkpointing"] and full["recompute"] == "full"
    with pytest.raises(tierzero.Error):
        tierzero.estimate(device="tpu", **base)
    with pytest.raises(tierzero.Error) as e:
        tierzero.estimate(activation_offload="hots", **base)
    assert '--activation-offload = "hots" is not a place for state' in str(e.value)
