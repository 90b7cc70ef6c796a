"""example::edge_dot beside plain PyTorch, on link-prediction sizes.

    python plugins/example/bench.py [--device cuda] [--edges 4000000]

Builds the plugin against the installed torchplug if needed (cached), then
prints, for each F and dtype, the medians of edge_dot and of
``(x[src] * y[dst]).sum(-1)`` with the speedup, each output checked first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import torchplug
from torchplug.bench import compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=4_000_000)
    args = parser.parse_args()

    prefix = torchplug.jit.build_project(Path(__file__).resolve().parent)
    torchplug.load_plugin(prefix / "lib" / "libexample.so")
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(0, args.nodes, (args.edges,), generator=generator).to(args.device)
    dst = torch.randint(0, args.nodes, (args.edges,), generator=generator).to(args.device)
    for dtype in (torch.float32, torch.bfloat16):
        for f in (16, 64, 256):
            x = torch.randn(args.nodes, f, generator=generator).to(args.device, dtype)
            y = torch.randn(args.nodes, f, generator=generator).to(args.device, dtype)
            print(f"\nN={args.nodes} E={args.edges} F={f} {dtype} on {args.device}")
            compare(
                {
                    "edge_dot": lambda: torch.ops.example.edge_dot(x, y, src, dst),
                    "(x[src] * y[dst]).sum(-1)": lambda: (x[src] * y[dst]).sum(-1),
                },
                terms_per_output=f,
            )


if __name__ == "__main__":
    main()
