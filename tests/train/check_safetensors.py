"""Reads a safetensors file with the `safetensors` package (as a Hugging Face user would) and
checks every GPT-2 tensor against an llm.c checkpoint (256 x int32 header, then fp32 parameters in
llm.c's order): names, shapes (HF's Conv1D matrices transposed, wte's real vocabulary rows) and
values, exactly. Exit 0 when all match; prints what differs otherwise.
usage: check_safetensors.py <model.safetensors> <model.bin>"""
import sys

import numpy as np
from safetensors.numpy import load_file


def llmc_tensors(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240326 and header[1] == 3, f"{path} is not an fp32 llm.c checkpoint"
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    data = np.fromfile(path, dtype=np.float32, offset=256 * 4)
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
              ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
              ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
              ("lnfw", (C,)), ("lnfb", (C,))]
    out, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = data[at:at + n].reshape(shape)
        at += n
    assert at == data.size, f"{path}: {data.size} values, the header's shape needs {at}"
    return out, V, L


def main():
    st = load_file(sys.argv[1])
    ref, V, L = llmc_tensors(sys.argv[2])
    want = {"wte.weight": ref["wte"][:V], "wpe.weight": ref["wpe"],
            "ln_f.weight": ref["lnfw"], "ln_f.bias": ref["lnfb"]}
    per_layer = {"ln_1.weight": ("ln1w", False), "ln_1.bias": ("ln1b", False),
                 "attn.c_attn.weight": ("qkvw", True), "attn.c_attn.bias": ("qkvb", False),
                 "attn.c_proj.weight": ("attprojw", True), "attn.c_proj.bias": ("attprojb", False),
                 "ln_2.weight": ("ln2w", False), "ln_2.bias": ("ln2b", False),
                 "mlp.c_fc.weight": ("fcw", True), "mlp.c_fc.bias": ("fcb", False),
                 "mlp.c_proj.weight": ("fcprojw", True), "mlp.c_proj.bias": ("fcprojb", False)}
    for l in range(L):
        for name, (kind, transpose) in per_layer.items():
            t = ref[kind][l]
            want[f"h.{l}.{name}"] = t.T if transpose else t
    bad = 0
    if set(st) != set(want):
        print("names differ: extra", sorted(set(st) - set(want)), "missing", sorted(set(want) - set(st)))
        bad += 1
    for name, w in want.items():
        if name not in st:
            continue
        got = st[name]
        if got.dtype != np.float32 or got.shape != w.shape or not np.array_equal(got, w):
            print(f"{name}: {got.dtype} {got.shape} vs {w.shape}, "
                  f"max diff {np.abs(got.astype(np.float64) - w).max() if got.shape == w.shape else 'n/a'}")
            bad += 1
    print(f"{len(want)} tensors checked with the safetensors package: {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
