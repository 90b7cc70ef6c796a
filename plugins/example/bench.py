"""The example plugin's ops beside plain PyTorch, on graph sizes.

    python plugins/example/bench.py [--device cuda] [--nodes 1000000] [--edges 4000000]

Builds the plugin against the installed torchplug if needed (cached), then
prints the medians of each op and of its PyTorch alternative with the
speedup, each output checked first:

- edge_dot against ``(x[src] * y[dst]).sum(-1)``, for each F and dtype (link
  prediction: a score per edge);
- segment_l2norm against ``torch.segment_reduce(src * src, "sum",
  offsets=indptr).sqrt()``, for each F (the norm of each node's incoming
  edge features, the edges sorted by destination).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import torchplug
from torchplug.bench import compare


def bench_edge_dot(args: argparse.Namespace, generator: torch.Generator) -> None:
    src = torch.randint(0, args.nodes, (args.edges,), generator=generator).to(args.device)
    dst = torch.randint(0, args.nodes, (args.edges,), generator=generator).to(args.device)
    for dtype in (torch.float32, torch.bfloat16):
        for f in (16, 64, 256):
            x = torch.randn(args.nodes, f, generator=generator).to(args.device, dtype)
            y = torch.randn(args.nodes, f, generator=generator).to(args.device, dtype)
            print(f"\nedge_dot: N={args.nodes} E={args.edges} F={f} {dtype} on {args.device}")
            compare(
                {
                    "edge_dot": lambda: torch.ops.example.edge_dot(x, y, src, dst),
                    "(x[src] * y[dst]).sum(-1)": lambda: (x[src] * y[dst]).sum(-1),
                },
                terms_per_output=f,
                repeats=args.repeats,
            )


def bench_segment_l2norm(args: argparse.Namespace, generator: torch.Generator) -> None:
    # The nodes' segments of the edges cut at random points: about E / N edges
    # a node, some nodes with none.
    cuts = torch.randint(0, args.edges + 1, (args.nodes - 1,), generator=generator).sort().values
    indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([args.edges])]).to(args.device)
    for f in (1, 16, 128):
        src = torch.randn(args.edges, f, generator=generator).to(args.device)
        print(f"\nsegment_l2norm: N={args.nodes} E={args.edges} F={f} {src.dtype} on {args.device}")
        compare(
            {
                "segment_l2norm": lambda: torch.ops.example.segment_l2norm(src, indptr),
                "sqrt(segment_reduce(src * src))": lambda: torch.segment_reduce(
                    src * src, "sum", offsets=indptr, axis=0
                ).sqrt(),
            },
            terms_per_output=args.edges / args.nodes,
            repeats=args.repeats,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per candidate")
    args = parser.parse_args()

    prefix = torchplug.jit.build_project(Path(__file__).resolve().parent)
    torchplug.load_plugin(prefix / "lib" / "libexample.so")
    generator = torch.Generator().manual_seed(0)
    bench_edge_dot(args, generator)
    bench_segment_l2norm(args, generator)


if __name__ == "__main__":
    main()
