"""The plain-PyTorch reference of spmm, in float64: the E x F messages
value[k] * x[col[k]] (per head: value[k, h] * x[col[k], h]) reduced row by
row with scatter_reduce. Used by
ops/spmm/test_spmm.py and the op table."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from torchplug._reductions import BY_NAME


def spmm_reference(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor, reduce: str):
    """(values in float64 on x's device, differentiable in x and value; arg or
    None): empty rows give 0; arg is the first edge of the row whose message
    is the result, nnz for an empty row (on the CPU). A value of [nnz, H]
    weighs the heads of x [N, H, *] apart."""
    M = rowptr.numel() - 1
    H = value.size(1) if value is not None and value.dim() == 2 else 1
    x64 = x.double().cpu().reshape(x.size(0), H, -1)
    rowptr, col = rowptr.cpu(), col.cpu()
    row = torch.repeat_interleave(rowptr.diff(), output_size=col.numel())
    weight = torch.ones(col.numel(), H, dtype=torch.float64) if value is None else value.double().cpu()
    messages = (weight.reshape(-1, H, 1) * x64[col]).flatten(1)
    F = messages.size(1)
    out = torch.zeros(M, F, dtype=torch.float64).scatter_reduce(0, row.view(-1, 1).expand(-1, F), messages,
                                                                 BY_NAME[reduce].native, include_self=False)
    shape = (M,) + tuple(x.shape[1:])
    if not BY_NAME[reduce].arg:
        return out.view(shape).to(x.device), None
    arg = torch.full((M, F), col.numel(), dtype=torch.long)
    found = messages.detach() == out.detach()[row]
    for k in range(col.numel() - 1, -1, -1):
        arg[row[k]][found[k]] = k
    return out.view(shape).to(x.device), arg.view(shape)
