"""Plain-PyTorch references for the scatter family, shared by the test suites
(ops/scatter/ and tests/python/; conftest.py puts every op folder on the
path): every reduction (sum, mean, min, max with arg, mul) and its gradient
in float64, and the error bounds the tolerances are written in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from index_reference import broadcast_index, default_dim_size  # noqa: F401  (the suites' too)
from torchplug._reductions import BY_NAME


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at |x| (float64), subnormal spacing below the normal
    range. frexp gives the exponent exactly (log2 may round up just below a
    power of two)."""
    info = torch.finfo(dtype)
    x = x.to(torch.float64).abs().clamp_min(info.tiny)
    _, exponent = torch.frexp(x)
    return info.eps * torch.pow(2.0, (exponent - 1).to(torch.float64))


def gamma(k: torch.Tensor, u: float) -> torch.Tensor:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of a sum
    (or a product) of k terms computed in any order with unit roundoff u
    ("Accuracy and Stability of Numerical Algorithms", 2nd ed., sec. 3.1, 4.2)."""
    return k * u / (1 - k * u)


def unit_roundoff(dtype: torch.dtype) -> float:
    """The unit roundoff of the type a kernel accumulates `dtype` in (float16
    and bfloat16 accumulate in float32)."""
    return 2.0**-53 if dtype == torch.float64 else 2.0**-24


@dataclass
class Reduced:
    """A plain-PyTorch scatter reduction, not rounded back to src's dtype.

    value: float64 (int64 for integer dtypes). arg: int64 for min/max, else
    None. count: float64, the number of sources landing in each slot (out='s
    initial value not counted). terms: float64, count plus one where out= was
    given (the factors or addends each slot combined). mag: float64, the sum of
    the |terms| (out='s |initial value| included)."""

    value: torch.Tensor
    arg: Optional[torch.Tensor]
    count: torch.Tensor
    terms: torch.Tensor
    mag: torch.Tensor


def reduce_reference(src: torch.Tensor, index: torch.Tensor, dim: int, reduce: str,
                     dim_size: Optional[int] = None, out: Optional[torch.Tensor] = None,
                     keep: Optional[torch.Tensor] = None) -> Reduced:
    """torch_scatter's scatter(reduce=) in plain PyTorch (docs/ops.md): a
    ``scatter_reduce(include_self=False)`` into a zeros (ones for mul) base,
    or ``include_self=True`` into out= (whose values take part), in float64 or
    int64; empty slots hold 0 (mul: 1). mean divides by the count clamped at
    1 (integers floor-divide). min/max: NaN wins; arg is the smallest source
    position along dim whose value equals the result, else src.size(dim).
    `keep` (src's shape, bool) drops the sources whose index is out of range,
    as CUDA kernels do without checked mode."""
    assert reduce in BY_NAME, reduce
    d = dim % src.dim()
    E = src.size(d)
    floating = src.dtype.is_floating_point
    wide = torch.float64 if floating else torch.int64
    if out is not None:
        n = out.size(d)
        shape = list(out.shape)
    else:
        n = default_dim_size(index, src, d) if dim_size is None else dim_size
        shape = list(src.shape)
        shape[d] = n
    full = broadcast_index(index, src, d)
    terms = src.to(wide)
    # Dropped sources (keep False) go to an extra slot n, cut off at the end.
    extra = keep is not None
    if extra:
        full = torch.where(keep, full, torch.full_like(full, n))
        if out is not None:
            pad_shape = list(shape)
            pad_shape[d] = 1
            out = torch.cat([out, out.new_zeros(pad_shape)], d)
        shape[d] += 1
    count = torch.zeros(shape, dtype=torch.float64, device=src.device)
    mag = torch.zeros(shape, dtype=torch.float64, device=src.device)
    scatters = src.numel() > 0 and shape[d] > 0
    if scatters:
        count.scatter_add_(d, full, torch.ones(src.shape, dtype=torch.float64, device=src.device))
        mag.scatter_add_(d, full, terms.to(torch.float64).abs())
    total_terms = count.clone()
    if out is not None:
        total_terms += 1
        mag += out.to(torch.float64).abs()

    identity = 1 if reduce == "mul" else 0
    base = out.to(wide, copy=True) if out is not None else torch.full(shape, identity, dtype=wide,
                                                                        device=src.device)
    arg = None
    if reduce in ("sum", "mean"):
        if scatters:
            base.scatter_add_(d, full, terms)
        if reduce == "mean":
            divisor = count.clamp(min=1)
            if floating:
                base = base / divisor
            else:
                base = torch.div(base, divisor.to(torch.int64), rounding_mode="floor")
    else:
        if scatters:
            base.scatter_reduce_(d, full, terms, BY_NAME[reduce].native, include_self=out is not None)
        if BY_NAME[reduce].arg:
            arg = torch.full(shape, E, dtype=torch.int64, device=src.device)
            if scatters:
                result_at = base.gather(d, full)
                same = terms == result_at
                if floating:
                    same = same | (torch.isnan(terms) & torch.isnan(result_at))
                view = [1] * src.dim()
                view[d] = E
                pos = torch.arange(E, device=src.device).view(view).expand(src.shape)
                candidate = torch.where(same, pos, torch.full_like(pos, E))
                arg.scatter_reduce_(d, full, candidate, "amin", include_self=True)
    if extra:
        base, count, total_terms, mag = (t.narrow(d, 0, n) for t in (base, count, total_terms, mag))
        arg = None if arg is None else arg.narrow(d, 0, n)
    return Reduced(base, arg, count, total_terms, mag)


def assert_reduced_close(actual: torch.Tensor, ref: Reduced, reduce: str, dtype: torch.dtype,
                         context: str = "") -> None:
    """`actual` (src's dtype) against the float64/int64 reference, within the
    error bound of the reduction (docs in tests/python/test_properties.py):

    * integers, min, max: exact (min and max select a value; NaN where the
      reference is NaN).
    * sum: ``(gamma(k, u) + gamma(k, 2**-53)) * mag`` with k the terms of the
      slot (out='s initial value included) and u the accumulator's roundoff;
      float16/bfloat16 add half an ulp of the result for the final rounding.
    * mean: the sum's bound divided by the count, plus one rounding of the
      division (u * |value|), plus the half type's final rounding.
    * mul: ``(gamma(k, u) + gamma(k, 2**-53)) * |value|`` (each product
      rounds once), plus the half type's final rounding.

    Empty slots are exact whatever the reduction. Inputs must keep results
    finite wherever the reference is finite."""
    assert actual.dtype == dtype, f"{context}: dtype {actual.dtype} != {dtype}"
    assert actual.shape == ref.value.shape, (
        f"{context}: shape {tuple(actual.shape)} != {tuple(ref.value.shape)}")
    if not dtype.is_floating_point or reduce in ("min", "max"):
        torch.testing.assert_close(actual.to(ref.value.dtype), ref.value, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{context}\n{m}")
        return
    finite = torch.isfinite(ref.value)
    torch.testing.assert_close(actual.to(torch.float64)[~finite], ref.value[~finite], rtol=0, atol=0,
                               equal_nan=True, msg=lambda m: f"{context}: non-finite slots\n{m}")
    got = actual.to(torch.float64)
    u = unit_roundoff(dtype)
    k = ref.terms
    if reduce == "sum":
        tol = (gamma(k, u) + gamma(k, 2.0**-53)) * ref.mag
    elif reduce == "mean":
        tol = (gamma(k, u) + gamma(k, 2.0**-53)) * ref.mag / ref.count.clamp(min=1) \
            + u * ref.value.abs()
    else:
        tol = (gamma(k, u) + gamma(k, 2.0**-53)) * ref.value.abs()
    if dtype in (torch.float16, torch.bfloat16):
        tol = tol + 0.5 * ulp(got, dtype)
    tol = torch.where(finite, tol, torch.zeros_like(tol))
    err = torch.where(finite, (got - ref.value).abs(), torch.zeros_like(got))
    bad = (err > tol) | (finite & ~torch.isfinite(got))
    if bad.any():
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise AssertionError(
            f"{context}: {int(bad.sum())} of {bad.numel()} elements off; first at {where}: "
            f"actual {float(got[where])!r}, expected {float(ref.value[where])!r}, "
            f"tolerance {float(tol[where])!r}, terms {int(k[where])}")


def reduce_grad_reference(src: torch.Tensor, index: torch.Tensor, dim: int, reduce: str,
                          grad: torch.Tensor, out: Optional[torch.Tensor] = None,
                          dim_size: Optional[int] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The gradients of the reduction w.r.t. src and (when given) out='s
    initial value, for `grad` w.r.t. the result, in float64 (docs/ops.md):
    sum gathers; mean gathers grad / count; min/max route the gradient to the
    arg position only (out= gets it where arg is src.size(dim)); mul gives
    each source grad times the product of the slot's other factors (out='s
    initial value included), exact with zeros in the slot."""
    d = dim % src.dim()
    E = src.size(d)
    full = broadcast_index(index, src, d)
    ref = reduce_reference(src, index, dim, reduce, dim_size, out)
    grad = grad.to(torch.float64)
    x = src.to(torch.float64)
    if src.numel() == 0:
        g_src = torch.zeros_like(x)
    if reduce == "sum":
        g_src = grad.gather(d, full) if src.numel() else g_src
        g_out = grad
    elif reduce == "mean":
        scaled = grad / ref.count.clamp(min=1)
        g_src = scaled.gather(d, full) if src.numel() else g_src
        g_out = scaled
    elif reduce in ("min", "max"):
        if src.numel():
            view = [1] * src.dim()
            view[d] = E
            pos = torch.arange(E, device=src.device).view(view).expand(src.shape)
            g_src = torch.where(ref.arg.gather(d, full) == pos, grad.gather(d, full), 0.0)
        g_out = torch.where(ref.arg == E, grad, 0.0)
    else:
        # Per slot: the number of zero factors and the product of the others.
        shape = list(ref.value.shape)
        zeros = torch.zeros(shape, dtype=torch.float64, device=src.device)
        nonzero_prod = torch.ones(shape, dtype=torch.float64, device=src.device)
        if out is not None:
            o = out.to(torch.float64)
            zeros += (o == 0).double()
            nonzero_prod = torch.where(o == 0, 1.0, o)
        if src.numel():
            zeros.scatter_add_(d, full, (x == 0).double())
            nonzero_prod.scatter_reduce_(d, full, torch.where(x == 0, 1.0, x), "prod", include_self=True)
        if src.numel():
            z = zeros.gather(d, full)
            p = nonzero_prod.gather(d, full)
            others = torch.where(x == 0, torch.where(z == 1, p, 0.0),
                                 torch.where(z == 0, p / torch.where(x == 0, 1.0, x), 0.0))
            g_src = grad.gather(d, full) * others
        g_out = None
        if out is not None:
            o = out.to(torch.float64)
            others = torch.where(o == 0, torch.where(zeros == 1, nonzero_prod, 0.0),
                                 torch.where(zeros == 0, nonzero_prod / torch.where(o == 0, 1.0, o), 0.0))
            g_out = grad * others
    return g_src, (g_out if out is not None else None)
