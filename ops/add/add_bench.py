"""add's benchmark workloads: elementwise ``a + b`` against ``torch.add``,
contiguous and in the layouts add must be as fast in."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label, dtype_label


@dataclass(frozen=True)
class AddInputs:
    """The two operands (views where the layout asks for one)."""

    a: Tensor
    b: Tensor


def _shape_label(shape: tuple[int, ...]) -> str:
    """``(8192, 1) -> "[8192,1]"``."""
    return "[" + ",".join(str(s) for s in shape) + "]"


@dataclass(frozen=True)
class AddWorkload:
    """Elementwise ``a + b``: two contiguous operands of ``numel`` elements, or
    ``a`` of ``shape_a`` and ``b`` of ``shape_b`` broadcast together. ``dtype_b``
    is b's dtype where it differs from a's (the result takes PyTorch's
    promotion); ``transposed``: a is the transpose (``.t()``) of a contiguous
    tensor, a view that is not contiguous."""

    op: ClassVar[str] = "add"
    numel: int = 0
    dtype: torch.dtype = torch.float32
    shape_a: tuple[int, ...] = ()
    shape_b: tuple[int, ...] = ()
    dtype_b: torch.dtype | None = None
    transposed: bool = False
    terms_per_output: ClassVar[float] = 1.0

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """a's and b's shapes (both ``(numel,)`` when none was given)."""
        return (self.shape_a, self.shape_b) if self.shape_a else ((self.numel,), (self.numel,))

    @property
    def out_dtype(self) -> torch.dtype:
        return torch.promote_types(self.dtype, self.dtype_b or self.dtype)

    @property
    def name(self) -> str:
        """Table label, e.g. ``add n=2^29 float32`` or
        ``add [8192,1]+[1,16384] bfloat16``."""
        dtypes = dtype_label(self.dtype)
        if self.dtype_b is not None:
            dtypes += f"+{dtype_label(self.dtype_b)}"
        if not self.shape_a:
            return f"add n={count_label(self.numel)} {dtypes}"
        a, b = self.shapes
        a_label = _shape_label(a[::-1]) + ".t()" if self.transposed else _shape_label(a)
        return f"add {a_label}+{_shape_label(b)} {dtypes}"

    def _out_numel(self) -> int:
        return math.prod(torch.broadcast_shapes(*self.shapes))

    def min_bytes(self) -> int:
        """Read both operands once, write the result once."""
        a, b = self.shapes
        return (math.prod(a) * self.dtype.itemsize + math.prod(b) * (self.dtype_b or self.dtype).itemsize
                + self._out_numel() * self.out_dtype.itemsize)

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        a, b = self.shapes
        return {"numel": self._out_numel(), "a": list(a), "b": list(b), "dtype": dtype_label(self.dtype),
                "dtype_b": dtype_label(self.dtype_b or self.dtype), "transposed": self.transposed}

    def make_inputs(self, device: torch.device) -> AddInputs:
        """Two random operands (integers in [-1000, 1000))."""

        def operand(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            if dtype.is_floating_point:
                return torch.randn(shape, device=device, dtype=dtype)
            return torch.randint(-1000, 1000, shape, device=device, dtype=dtype)

        a_shape, b_shape = self.shapes
        if self.transposed:
            a = operand(a_shape[::-1], self.dtype).t()
        else:
            a = operand(a_shape, self.dtype)
        return AddInputs(a, operand(b_shape, self.dtype_b or self.dtype))

    def lineup(self, device: torch.device) -> Lineup:
        """torchplug.add against torch.add."""
        x = self.make_inputs(device)
        a, b = x.a, x.b
        candidates = (
            Candidate(TORCHPLUG, lambda: torchplug.add(a, b)),
            Candidate("torch.add", lambda: torch.add(a, b)),
        )
        return Lineup(candidates, reference="torch.add")


def add_layouts(numel: int) -> tuple[AddWorkload, ...]:
    """The layouts add must be as fast as ``torch.add`` in, at about ``numel``
    outputs (a power of two): an outer broadcast ``[R, 1] + [1, C]`` in bfloat16
    and float32, a bias ``[N, 256] + [256]`` and a column ``[N, 256] + [N, 1]``,
    a transposed input, and mixed dtypes (bfloat16, float16 or int32 with
    float32, contiguous, and a bfloat16 ``[N, 256]`` plus a float32 bias)."""
    cols = 2 ** ((numel.bit_length() - 1 + 1) // 2)
    rows = max(1, numel // cols)
    n = max(1, numel // 256)
    outer = ((rows, 1), (1, cols))
    return (
        AddWorkload(dtype=torch.bfloat16, shape_a=outer[0], shape_b=outer[1]),
        AddWorkload(shape_a=outer[0], shape_b=outer[1]),
        AddWorkload(shape_a=(n, 256), shape_b=(256,)),
        AddWorkload(dtype=torch.bfloat16, shape_a=(n, 256), shape_b=(256,)),
        AddWorkload(shape_a=(n, 256), shape_b=(n, 1)),
        AddWorkload(shape_a=(rows, cols), shape_b=(rows, cols), transposed=True),
        AddWorkload(numel, torch.bfloat16, dtype_b=torch.float32),
        AddWorkload(numel, torch.float16, dtype_b=torch.float32),
        AddWorkload(numel, torch.int32, dtype_b=torch.float32),
        AddWorkload(dtype=torch.bfloat16, shape_a=(n, 256), shape_b=(256,), dtype_b=torch.float32),
    )


def workloads(scale: Scale) -> tuple[AddWorkload, ...]:
    """Contiguous operands (2^29 elements on a GPU), then the other layouts."""
    if scale.gpu:
        return (AddWorkload(2**29), *add_layouts(2**27))
    return (AddWorkload(scale.numel), *add_layouts(scale.numel))
