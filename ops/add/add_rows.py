"""The add family's op-table rows (tests/python/op_table.py): elementwise
``a + b`` against PyTorch's own, bit for bit."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from op_table import FLOATS, OpRow, Sample, assert_bitwise, randint, randn, values

ADD_DTYPES = FLOATS + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def add_samples(device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """add: broadcasting, 0-d, empty, non-contiguous and mixed-dtype operands."""
    def v(shape, dt=dtype):
        if dt.is_floating_point:
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dt).to(device)
        return torch.randint(-20, 20, shape, generator=g).to(dt).to(device)

    return [
        Sample((v((3, 4)), v((4,))), desc="broadcast"),
        Sample((v((3, 1, 4)), v((2, 1))), desc="both broadcast"),
        Sample((v((5,)), v(()),), desc="0-d"),
        Sample((v((4, 3)).t(), v((3, 4))), desc="non-contiguous"),
        Sample((v((0, 4)), v((4,))), desc="empty"),
        Sample((v((2, 3)), v((3,), torch.float32)), desc="promotion"),
    ]


class ElementwiseRow(OpRow):
    """``fn(a, b)``, both operands differentiable; exact against PyTorch."""

    leaf_count = 2
    bitwise_repeatable = True

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(*inputs)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        return add_samples(device, dtype, torch.Generator().manual_seed(seed))

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [s for s in add_samples(device, torch.float64, g) if all(t.dtype == torch.float64 for t in s.inputs)]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        return Sample((values((E, F), dtype, None, g).to(device), values((F,), dtype, None, g).to(device)))

    def thread_samples(self, seed: int, device: str) -> list[Sample]:
        """Past TensorIterator's grain (2**15): mixed dtypes (float16 + bfloat16
        promote to float32), int64 + int8, a non-contiguous operand."""
        g = torch.Generator().manual_seed(seed)
        pairs = [
            (randn((200, 300), torch.float32, g, device), randn((300,), torch.float32, g, device)),
            (randn((50, 1, 300), torch.float16, g, device), randn((40, 300), torch.bfloat16, g, device)),
            (randint(-(2**40), 2**40, (200, 300), g, device), randint(-100, 100, (200, 1), g, device, torch.int8)),
            (randn((300, 200), torch.float64, g, device).t(), randn((200, 300), torch.float64, g, device)),
        ]
        return [Sample(pair, desc="add") for pair in pairs]

    def backward_sample(self, g: torch.Generator, seed: int, device: str, E: int, F: int, N: int) -> Sample:
        return Sample((randn((E, F), torch.float64, g, device), randn((F,), torch.float64, g, device)))

    def reference(self, sample: Sample) -> Tensor:
        a, b = sample.inputs
        return a + b

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        assert_bitwise(outputs[0], self.reference(sample), f"{self.name} {sample!r} {context}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        a, b = sample.inputs
        return (grad.sum_to_size(a.shape).to(a.dtype), grad.sum_to_size(b.shape).to(b.dtype))


ROWS = [ElementwiseRow("add", ADD_DTYPES, differentiable=(0,), gradgrad=True)]
