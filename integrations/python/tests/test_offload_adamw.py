"""tierzero.torch.OffloadAdamW against torch.optim.AdamW: 20 steps of a small model give the same
parameters within fp32 roundoff with the states in pinned host memory and on NVMe; a host budget
too small is a clear error; a state_dict round trip continues exactly."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import tierzero  # noqa: E402
from tierzero.torch import OffloadAdamW  # noqa: E402

HYPER = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def small_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 24, generator=g), torch.randint(0, 10, (16,), generator=g))
            for _ in range(n)]


def train(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def max_errors(a, b):
    worst_abs, worst_rel = 0.0, 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        d = (p.detach() - q.detach()).abs()
        worst_abs = max(worst_abs, d.max().item())
        worst_rel = max(worst_rel, (d / q.detach().abs().clamp_min(1e-3)).max().item())
    return worst_abs, worst_rel


@pytest.mark.parametrize("state", ["host", "nvme"])
def test_twenty_steps_match_torch_adamw(state, tmp_path):
    data = batches(20)
    ref = small_model()
    train(ref, torch.optim.AdamW(ref.parameters(), **HYPER), data)
    ours = small_model()
    opt = OffloadAdamW(ours.parameters(), **HYPER, state=state, nvme_path=str(tmp_path),
                       host_budget=64 << 20, nvme_chunk_elems=500)
    train(ours, opt, data)
    abs_err, rel_err = max_errors(ours, ref)
    print(f"OffloadAdamW({state}) vs torch.optim.AdamW after 20 steps: max abs error "
          f"{abs_err:.3e}, max rel error {rel_err:.3e}")
    assert opt.steps_taken == 20
    assert abs_err < 1e-5, abs_err
    report = opt.memory_report()
    if state == "host":
        assert report["host"]["optimizer"] > 0
    else:
        assert report["nvme"]["optimizer"] > 0
    # The model moved: the comparison is not of two untouched models.
    assert max_errors(ours, small_model())[0] > 1e-3


def test_a_host_budget_too_small_is_a_clear_error():
    model = small_model()
    with pytest.raises(tierzero.Error) as info:
        OffloadAdamW(model.parameters(), **HYPER, state="host", host_budget=4096)
    e = info.value
    print("error:", e)
    assert "host" in str(e).lower()
    assert e.hint


def test_nvme_without_a_path_is_a_clear_error():
    with pytest.raises(tierzero.Error, match="nvme_path"):
        OffloadAdamW(small_model().parameters(), **HYPER, state="nvme")


@pytest.mark.parametrize("state", ["host", "nvme"])
def test_state_dict_round_trip_continues_exactly(state, tmp_path):
    data = batches(10)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    kw = dict(HYPER, state=state, nvme_path=str(tmp_path / "a"), host_budget=64 << 20)
    straight = small_model()
    opt = OffloadAdamW(straight.parameters(), **kw)
    train(straight, opt, data)

    first = small_model()
    opt1 = OffloadAdamW(first.parameters(), **kw)
    train(first, opt1, data[:5])
    saved_model = {k: v.clone() for k, v in first.state_dict().items()}
    saved_opt = opt1.state_dict()
    del opt1

    resumed = small_model(seed=7)  # different values: the state_dict brings them back
    resumed.load_state_dict(saved_model)
    opt2 = OffloadAdamW(resumed.parameters(), **dict(kw, nvme_path=str(tmp_path / "b")))
    opt2.load_state_dict(saved_opt)
    assert opt2.steps_taken == 5
    train(resumed, opt2, data[5:])
    for p, q in zip(resumed.parameters(), straight.parameters()):
        assert torch.equal(p, q)


def test_parameters_of_another_dtype_and_missing_gradients():
    model = small_model().double()  # converted to fp32 on the way in, back on the way out
    opt = OffloadAdamW(model.parameters(), **HYPER)
    x, y = batches(1)[0]
    torch.nn.functional.cross_entropy(model(x.double()), y).backward()
    model[2].bias.grad = None
    before = model[2].bias.detach().clone()
    opt.step()
    # Without a gradient the bias only decays (its moments see zero): it barely moves.
    assert model[2].bias.dtype == torch.float64
    assert np.allclose(model[2].bias.detach().numpy(), before.numpy() * (1 - 3e-3 * 0.1),
                       atol=1e-7)
    assert not torch.equal(model[0].weight, small_model()[0].weight.double())


@pytest.mark.parametrize("state", ["host", "nvme"])
def test_fp32_cpu_parameters_are_updated_where_they_lie_beside_others(state, tmp_path):
    """fp32 CPU tensors take the in-place path (their storage is updated, no master; on NVMe only
    the moments are swapped); a bf16 one goes through the store's fp32 master; both follow
    torch.optim.AdamW, and a state_dict round trip of the mix continues exactly. Chunks of 7000
    elements cut the first tensor and hold the end of it and the whole second one."""
    g = torch.Generator().manual_seed(3)
    shapes = [(300, 200), (200,), (64, 64)]

    def params():
        torch.manual_seed(5)
        return [torch.nn.Parameter(torch.randn(s)) for s in shapes]

    def grads(step):
        gen = torch.Generator().manual_seed(100 + step)
        return [torch.randn(s, generator=gen) * 1e-2 for s in shapes]

    ref = params()
    ref_opt = torch.optim.AdamW(ref, **HYPER)
    ours = params()
    ours[2].data = ours[2].data.to(torch.bfloat16)  # through the store
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    kw = dict(HYPER, host_budget=64 << 20, state=state, nvme_chunk_elems=7000)
    opt = OffloadAdamW(ours, **kw, nvme_path=str(tmp_path / "a"))
    assert [opt._engine.in_place(i) for i in range(3)] == [True, True, False]
    where = ours[0].data_ptr()
    for step in range(5):
        for p, q, grad in zip(ref, ours, grads(step)):
            p.grad = grad.clone()
            q.grad = grad.clone().to(q.dtype)
        ref_opt.step()
        opt.step()
    assert ours[0].data_ptr() == where
    for p, q in zip(ref[:2], ours[:2]):
        err = (p.detach() - q.detach()).abs().max().item()
        print(f"in place vs torch after 5 steps: max abs error {err:.3e}")
        assert err < 1e-6
    assert (ref[2].detach() - ours[2].detach().float()).abs().max().item() < 2e-2  # bf16 rounding
    moments = opt.memory_report()["host" if state == "host" else "nvme"]["optimizer"]
    assert moments >= 2 * 4 * (300 * 200 + 200)

    saved = opt.state_dict()
    values = [p.detach().clone() for p in ours]
    opt.step()
    after = [p.detach().clone() for p in ours]
    for p, v in zip(ours, values):
        p.data.copy_(v)
    again = OffloadAdamW(ours, **kw, nvme_path=str(tmp_path / "b"))
    again.load_state_dict(saved)
    assert again.steps_taken == 5
    again.step()
    for p, a in zip(ours, after):
        assert torch.equal(p.detach(), a)


def test_nvme_in_place_without_a_gradient_and_with_too_small_a_budget(tmp_path):
    """The in-place NVMe path takes a missing gradient as zeros (the parameter only decays, its
    moments on the drive decay too), and a budget that cannot hold its staging and bounce buffers
    is a clear error naming the host budget."""
    model = small_model()
    opt = OffloadAdamW(model.parameters(), **HYPER, state="nvme", nvme_path=str(tmp_path),
                       host_budget=64 << 20, nvme_chunk_elems=1000)
    assert all(opt._engine.in_place(i) for i in range(4))
    x, y = batches(1)[0]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    model[2].bias.grad = None
    before = model[2].bias.detach().clone()
    weight_before = model[0].weight.detach().clone()
    opt.step()
    assert torch.allclose(model[2].bias.detach(), before * (1 - 3e-3 * 0.1), atol=1e-7)
    assert not torch.equal(model[0].weight.detach(), weight_before)
    with pytest.raises(tierzero.Error) as info:
        OffloadAdamW(small_model().parameters(), **HYPER, state="nvme", nvme_path=str(tmp_path),
                     host_budget=1 << 20)
    print("error:", info.value)
    assert "host_budget" in info.value.hint


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (runs on a GPU machine)")
@pytest.mark.parametrize("state", ["host", "nvme"])
def test_cuda_parameters_follow_torch_adamw_on_the_gpu(state, tmp_path):
    """CUDA parameters take the store's path: gradients copied to fp32 host tensors, the fp32
    masters updated on the host tier or through NVMe, the new values copied back into the CUDA
    parameters. fp32 ones follow torch.optim.AdamW on the GPU within fp32 roundoff over 10 steps;
    bf16 ones (fp32 masters kept by us) stay within bf16 rounding of the fp32 reference."""
    data = [(x.cuda(), y.cuda()) for x, y in batches(10)]
    ref = small_model().cuda()
    train(ref, torch.optim.AdamW(ref.parameters(), **HYPER), data)
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        ours = small_model().cuda().to(dtype)
        opt = OffloadAdamW(ours.parameters(), **HYPER, state=state, nvme_path=str(tmp_path),
                           host_budget=64 << 20)
        assert not any(opt._engine.in_place(i) for i in range(4))
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ours(x.to(dtype)).float(), y).backward()
            opt.step()
        assert all(p.is_cuda and p.dtype == dtype for p in ours.parameters())
        err = max((p - q.float()).abs().max().item()
                  for p, q in zip(ref.parameters(), ours.parameters()))
        print(f"OffloadAdamW({state}) with {dtype} CUDA parameters vs torch after 10 steps: "
              f"max abs error {err:.3e}")
        assert err < tolerance, err
