"""A short CUDA workload for compute-sanitizer (``scripts/gpu_check.sh OUT sanitize``):
every kernel path of every op once, each scatter and segment reduction and the
deterministic mode included, out-of-range indices and backward too. Its
scatters are small, so they take the atomic rows; the sanitize step runs it
again with TORCHPLUG_SCATTER_ATOMIC_LIMIT=0 for the CSR kernels. Not a test:
it checks nothing itself; the sanitizer's report is the result."""

import sys

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


def segment_paths(reduce: str) -> None:
    """segment_csr over a shared indptr (the plan's indptr mode: short
    segments, one past the long-row limit, positions past the last segment,
    a malformed indptr outside checked mode) and per slice; segment_coo; the
    gathers; backward."""
    torch.manual_seed(1)
    E = 6000
    lengths = torch.tensor([0, 3, 2500, 7, 0, 1200, 1])
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).cuda()
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for F in (1, 16, 64):
            src = (torch.randn(E, F, device="cuda") * 10).to(dtype)
            torchplug.segment_csr(src, indptr, reduce=reduce)
            torchplug.segment_csr(src, torch.tensor([0, 5, 3, E + 100, 40], device="cuda"), reduce=reduce)
            torchplug.segment_csr(src, torch.tensor([0, E] * 200, device="cuda"), reduce=reduce)  # past the hub list
            if F > 1:  # along the last dim: indptr shared by the rows, or one per row
                rows = src.t().contiguous()[:2]
                torchplug.segment_csr(rows, indptr.view(1, -1), reduce=reduce)
                torchplug.segment_csr(rows, torch.stack([indptr, indptr.flip(0).neg() + indptr[-1]]),
                                      reduce=reduce)
            index = torch.repeat_interleave(torch.arange(7, device="cuda"), lengths.cuda())
            torchplug.segment_coo(src[: index.numel()], index, dim_size=9, reduce=reduce)
            out = torch.zeros(9, F, device="cuda", dtype=dtype)
            torchplug.segment_coo(src[: index.numel()], index, out=out, reduce=reduce)
            if reduce == "sum":
                small = src[:7]
                torchplug.gather_csr(small, indptr)
                torchplug.gather_coo(small, torch.randint(-1, 8, (E,), device="cuda"))
                if F > 1:
                    torchplug.gather_coo(src.t().contiguous()[:2, :7], torch.randint(0, 7, (2, E), device="cuda"))
    src = torch.randn(E, 8, device="cuda", dtype=torch.float64, requires_grad=True)
    torchplug.segment_csr(src, indptr, reduce=reduce).sum().backward()
    torchplug.gather_csr(src[:7], indptr).sum().backward()


def composite_paths() -> None:
    """Every row program: short rows sorted and permuted, a row past the
    long-row limit, an index of src's shape (flattened rows), out-of-range
    values, logsumexp into out, float16 and float64, the fused backward."""
    torch.manual_seed(2)
    E, N = 5000, 300
    for dtype in (torch.float32, torch.float16, torch.float64):
        for F in (1, 3, 8, 64):
            src = torch.randn(E, F, device="cuda").to(dtype)
            index = torch.cat([torch.zeros(1500, dtype=torch.long), torch.randint(0, N, (E - 1500,))]).cuda()
            index[11], index[13] = N + 2, -1
            for order in (index, index.sort().values):
                torchplug.scatter_softmax(src, order, 0, N)
                torchplug.scatter_log_softmax(src, order, 0, N)
                torchplug.scatter_logsumexp(src, order, 0, dim_size=N)
                torchplug.scatter_logsumexp(src, order, 0, out=torch.randn(N, F, device="cuda").to(dtype))
                torchplug.scatter_std(src, order, 0, dim_size=N)
            full = torch.randint(-1, 40, (E, F), device="cuda")
            torchplug.scatter_softmax(src, full, 0, 40)
            torchplug.scatter_std(src, full, 0, dim_size=40)
    indptr = torch.tensor([0, 3, 1503, 1510, 1510, E], device="cuda")
    torchplug.softmax_csr(torch.randn(E, 4, device="cuda"), indptr)
    src = torch.randn(E, 8, device="cuda", dtype=torch.float64, requires_grad=True)
    index = torch.randint(-1, 200, (E,), device="cuda")
    (torchplug.scatter_softmax(src, index, 0, 200) + torchplug.scatter_log_softmax(src, index, 0, 200)).sum().backward()
    torchplug.scatter_std(src, index.clamp(0), 0, dim_size=200).sum().backward()


def spmm_paths() -> None:
    """Every reduction, weighted or not, over short rows, empty rows, two hub
    rows past the long-row limit (one starting inside a chunk of edges), a
    col outside [0, N) and a malformed rowptr outside checked mode; the
    transpose and sddmm; backward, with the transpose built and cached."""
    torch.manual_seed(3)
    M, N = 300, 200
    rows = torch.cat([torch.zeros(3000, dtype=torch.long), torch.full((1500,), M - 1),
                      torch.randint(0, M, (4000,))]).sort().values
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)]).cuda()
    col = torch.randint(0, N, (rows.numel(),), device="cuda")
    col[17], col[4000] = N + 5, -1
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for F in (1, 3, 16, 64):
            x = torch.randn(N, F, device="cuda").to(dtype)
            value = torch.randn(col.numel(), device="cuda").to(dtype)
            for reduce in ("sum", "mean", "min", "max"):
                torchplug.spmm((rowptr, col, value), x, reduce)
                torchplug.spmm((rowptr, col, None), x, reduce)
                torchplug.spmm((torch.tensor([0, 5, 3, 9000, 40], device="cuda"), col, None), x, reduce)
    # The transpose and sddmm over the same edges (a col outside [0, N) goes
    # last, in no column, and gets a product of 0), a malformed rowptr too.
    bad_rowptr = torch.tensor([0, 5, 3, 9000, 40], device="cuda")
    for ptr in (rowptr, bad_rowptr):
        torchplug.spmm_transpose(ptr, col, N)
        M_ptr = ptr.numel() - 1
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            for F in (1, 3, 16, 64, 256):
                a = torch.randn(M_ptr, F, device="cuda").to(dtype)
                b = torch.randn(N, F, device="cuda").to(dtype)
                for mean in (False, True):
                    torchplug.sddmm(ptr, col, a, b, mean)
    x = torch.randn(N, 8, device="cuda", dtype=torch.float64, requires_grad=True)
    value = torch.randn(col.numel(), device="cuda", dtype=torch.float64, requires_grad=True)
    good = col.clamp(0, N - 1)
    transpose = torchplug.spmm_transpose(rowptr, good, N)
    for reduce in ("sum", "mean", "max"):
        torchplug.spmm((rowptr, good, value), x, reduce).sum().backward()
        torchplug.spmm((rowptr, good, value), x, reduce, transpose=transpose).sum().backward()
        torchplug.spmm((rowptr, col, value), x, reduce).sum().backward()


def add_paths() -> None:
    for shape in ((1000003,), (7, 1001), (3, 1, 5)):
        a = torch.randn(shape, device="cuda")
        torchplug.add(a, a)
        torchplug.add(a, a[..., :1])
        torchplug.add(a[1:], a[:-1])
    # The row kernel's layouts: outer broadcast, bias, transposed, mixed dtypes, odd widths.
    for dtype in (torch.bfloat16, torch.float32):
        column = torch.randn(513, 1, device="cuda", dtype=dtype)
        row = torch.randn(1, 1027, device="cuda", dtype=dtype)
        torchplug.add(column, row)
        torchplug.add(torch.randn(513, 1027, device="cuda", dtype=dtype), row.float())
        torchplug.add(torch.randn(1027, 513, device="cuda", dtype=dtype).t(), column)
    torchplug.add(torch.randint(0, 9, (333, 77), device="cuda", dtype=torch.int32), torch.randn(77, device="cuda"))


def last_dim_paths() -> None:
    """Along dim=-1 into few slots: the ordered bins (two chunks and a part,
    values outside [0, N)), float64 rows of a thousand slots, whose block
    takes shared memory past 48 KB, and slices enough for two spans of the
    three chunks (two waves of blocks over 8 blocks a slice and SM), where
    a block loads its next chunk while it walks one."""
    torch.manual_seed(0)
    many = 8 * torch.cuda.get_device_properties(0).multi_processor_count
    for outer, E, N, dtypes in ((3, 9000, 300, (torch.float32, torch.bfloat16, torch.int64)),
                                (3, 20000, 1000, (torch.float64,)), (many, 9000, 300, (torch.float32,))):
        index = torch.randint(0, N, (E,), device="cuda")
        index[5], index[8] = N, -1
        for dtype in dtypes:
            src = (torch.randn(outer, E, device="cuda") * 10).to(dtype)
            for reduce in REDUCTIONS:
                torchplug.scatter(src, index, -1, dim_size=N, reduce=reduce)


if __name__ == "__main__":
    families = {"composite": composite_paths, "spmm": spmm_paths, "add": add_paths, "last_dim": last_dim_paths,
                "segment": lambda: [segment_paths(reduce) for reduce in REDUCTIONS]}
    if len(sys.argv) == 2 and sys.argv[1] in families:  # one family alone
        families[sys.argv[1]]()
        torch.cuda.synchronize()
        print("workload done")
        sys.exit(0)
    scatter_paths("sum", (torch.float32, torch.bfloat16, torch.float64, torch.int64), (1, 4, 16, 64, 256))
    for reduce in REDUCTIONS[1:]:
        scatter_paths(reduce, (torch.float32, torch.bfloat16, torch.int64), (1, 16, 64))
    add_paths()
    for reduce in REDUCTIONS:
        segment_paths(reduce)
    composite_paths()
    spmm_paths()
    last_dim_paths()
    # The ordered segments of deterministic mode (floating types only), backward included.
    torch.use_deterministic_algorithms(True)
    for reduce in REDUCTIONS:
        scatter_paths(reduce, (torch.float32, torch.bfloat16), (1, 16))
        segment_paths(reduce)
    composite_paths()
    last_dim_paths()
    torch.cuda.synchronize()
    print("workload done")
