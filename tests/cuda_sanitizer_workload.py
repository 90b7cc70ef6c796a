"""A short CUDA workload for compute-sanitizer (``scripts/gpu_check.sh OUT sanitize``):
every kernel path of every op once, each scatter reduction and the
deterministic mode included, out-of-range indices and backward too. Its
scatters are small, so they take the atomic rows; the sanitize step runs it
again with TORCHPLUG_SCATTER_ATOMIC_LIMIT=0 for the CSR kernels. Not a test:
it checks nothing itself; the sanitizer's report is the result."""

import torch

import torchplug

REDUCTIONS = ("sum", "mean", "mul", "min", "max")


def scatter_paths(reduce: str, dtypes: tuple, widths: tuple) -> None:
    torch.manual_seed(0)
    E, N = 3000, 200
    for F in widths:
        for order in ("random", "sorted"):
            for dtype in dtypes:
                src = (torch.randn(E, F, device="cuda") * 10).to(dtype)
                index = torch.randint(0, N, (E,), device="cuda")
                index[7], index[9] = N + 3, -2
                if order == "sorted":
                    index = index.sort().values
                torchplug.scatter(src, index, 0, dim_size=N, reduce=reduce)
                out = torch.zeros(N, F, device="cuda", dtype=dtype)
                torchplug.scatter(src, index, 0, out=out, reduce=reduce)
                torchplug.scatter(src[1:], index[1:], 0, dim_size=N, reduce=reduce)
                full = torch.randint(-1, N + 1, (E, F), device="cuda")
                torchplug.scatter(src, full, 0, dim_size=N, reduce=reduce)
                torchplug.scatter(src.t(), index, 1, dim_size=N, reduce=reduce)
    # One row with every source: the long-row kernels; then shuffled with
    # out-of-range values, so that they walk a permutation shorter than E
    # (rows of 24 floats: narrower ones would take the atomic rows).
    hot = torch.zeros(5000, dtype=torch.long, device="cuda")
    torchplug.scatter(torch.randn(5000, 24, device="cuda"), hot, 0, dim_size=3, reduce=reduce)
    hot[torch.randperm(5000, device="cuda")[:2000]] = 2
    hot[::97], hot[5::101] = -1, 3
    torchplug.scatter(torch.randn(5000, 24, device="cuda"), hot, 0, dim_size=3, reduce=reduce)
    # Two long rows with scratch slots by position (N > E / 1024), bfloat16, into out=.
    hot = torch.randint(0, 4000, (8000,), device="cuda")
    hot[:3000], hot[3000:4500] = 10, 2000
    for index in (hot, hot.sort().values):
        out = torch.ones(4000, 8, device="cuda", dtype=torch.bfloat16)
        torchplug.scatter(torch.randn(8000, 8, device="cuda", dtype=torch.bfloat16), index, 0,
                          out=out, reduce=reduce)
    src = torch.randn(500, 16, device="cuda", dtype=torch.float64, requires_grad=True)
    index = torch.randint(-1, 60, (500,), device="cuda")
    torchplug.scatter(src, index, 0, dim_size=50, reduce=reduce).sum().backward()


def add_paths() -> None:
    for shape in ((1000003,), (7, 1001), (3, 1, 5)):
        a = torch.randn(shape, device="cuda")
        torchplug.add(a, a)
        torchplug.add(a, a[..., :1])
        torchplug.add(a[1:], a[:-1])


if __name__ == "__main__":
    scatter_paths("sum", (torch.float32, torch.bfloat16, torch.float64, torch.int64), (1, 4, 16, 64, 256))
    for reduce in REDUCTIONS[1:]:
        scatter_paths(reduce, (torch.float32, torch.bfloat16, torch.int64), (1, 16, 64))
    add_paths()
    # The ordered segments of deterministic mode (floating types only), backward included.
    torch.use_deterministic_algorithms(True)
    for reduce in REDUCTIONS:
        scatter_paths(reduce, (torch.float32, torch.bfloat16), (1, 16))
    torch.cuda.synchronize()
    print("workload done")
