"""tierzero.torch.OffloadAdamW: a PyTorch optimizer over TierZero's offloaded AdamW.

Adam's moments live in pinned host memory under a hard budget (``state="host"``) or on NVMe
through io_uring with checksummed extents (``state="nvme"``). With the states on the host, an fp32
CPU parameter is its own master (as with DeepSpeed's CPU Adam): the vectorised, multithreaded CPU
AdamW kernel updates it where it lies, nothing copied. Other parameters (bf16, CUDA), and every
parameter with state="nvme", keep an fp32 master in TierZero's partition store, updated by the
zero layer's AdamW (on NVMe the read-ahead / write-behind chunk pipeline). Gradients cross into the library through DLPack
(CUDA ones staged through host memory first), and the updated values are written back into the
parameters. PyTorch is needed only here; the library does not link it.
"""
import torch
from torch.utils.dlpack import to_dlpack

from . import _tierzero


def _is_host_f32(t):
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()


def _host_f32(t):
    """t as a contiguous fp32 CPU tensor (t itself when it already is one)."""
    if _is_host_f32(t):
        return t
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous()


class OffloadAdamW(torch.optim.Optimizer):
    """AdamW (torch.optim.AdamW's update, decoupled weight decay) whose states are offloaded.

    state: "host" (pinned host pool of ``host_budget`` bytes, a hard limit: construction fails
    with tierzero.Error when the states do not fit) or "nvme" (swap files under ``nvme_path``;
    host memory then holds the pipeline's slots only). One parameter group; closures are
    supported. Parameters without a gradient in a step take it as zero (their moments still
    decay), unlike torch, which skips them.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 state="host", nvme_path=None, host_budget=None, nvme_chunk_elems=0):
        if lr < 0.0:
            raise ValueError(f"invalid learning rate {lr}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("OffloadAdamW takes one parameter group")
        self._params = list(self.param_groups[0]["params"])
        # fp32 CPU parameters are their own masters, updated where they lie (only the moments are
        # offloaded); the others (bf16, CUDA, ...) keep an fp32 master in the store.
        self._engine = _tierzero.OffloadAdamWEngine(
            [p.numel() for p in self._params], [_is_host_f32(p) for p in self._params],
            float(betas[0]), float(betas[1]), float(eps),
            float(weight_decay), state, nvme_path or "", int(host_budget or 0),
            int(nvme_chunk_elems))
        self.tier = state
        with torch.no_grad():
            for i, p in enumerate(self._params):
                if not self._engine.in_place(i):
                    self._engine.load_param(i, to_dlpack(_host_f32(p.detach())))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        group = self.param_groups[0]
        if tuple(group["betas"]) != self.defaults["betas"] or group["eps"] != self.defaults["eps"] \
                or group["weight_decay"] != self.defaults["weight_decay"]:
            raise ValueError("OffloadAdamW: only lr may change after construction")
        grads = [None if p.grad is None else to_dlpack(_host_f32(p.grad)) for p in self._params]
        # fp32 CPU parameters are updated (or, through the store, overwritten) where they lie;
        # others go through an fp32 CPU copy.
        targets = [_host_f32(p.data) for p in self._params]
        self._engine.step(float(group["lr"]), grads, [to_dlpack(t) for t in targets])
        for p, t in zip(self._params, targets):
            if t is not p.data:
                p.data.copy_(t)
        return loss

    @property
    def steps_taken(self):
        return self._engine.steps_taken

    def memory_report(self):
        """Bytes TierZero holds in this process, per tier ("device": the compute memory, here
        host RAM; "host": the pinned pool; "nvme") and category, with each tier's total and
        peak."""
        return _tierzero.memory_report()

    def state_dict(self):
        blocks = [(index, kind, begin, elem_bytes, torch.from_numpy(data))
                  for index, kind, begin, elem_bytes, data in self._engine.save_state()]
        return {"state": {"tierzero_blocks": blocks, "step": self._engine.steps_taken,
                          "tier": self.tier},
                "param_groups": [{k: v for k, v in self.param_groups[0].items() if k != "params"}
                                 | {"params": list(range(len(self._params)))}]}

    def load_state_dict(self, state_dict):
        state = state_dict["state"]
        if "tierzero_blocks" not in state:
            raise ValueError("not an OffloadAdamW state_dict (no tierzero_blocks)")
        blocks = [(index, kind, begin, elem_bytes, data.contiguous().numpy())
                  for index, kind, begin, elem_bytes, data in state["tierzero_blocks"]]
        self._engine.load_state(blocks, int(state["step"]))
        self.param_groups[0]["lr"] = state_dict["param_groups"][0]["lr"]
        # The parameters follow the restored fp32 values: the masters, or the working parameters
        # where no separate master is kept.
        values = {}
        for index, kind, begin, elem_bytes, data in blocks:
            if elem_bytes == 4 and kind in ("master", "param") and begin == 0:
                if kind == "master" or index not in values:
                    values[index] = data
        with torch.no_grad():
            for index, data in values.items():
                p = self._params[index]
                flat = torch.from_numpy(data.view("float32"))[:p.numel()]
                p.data.copy_(flat.reshape(p.shape))
