"""Trains GraphSAGE (Hamilton et al., NeurIPS 2017) on mini-batches sampled
by torchplug from a synthetic power-law graph.

Each step takes a batch of training nodes, samples their neighbourhoods hop
by hop with ``torchplug.neighbor_sample`` (``--fanouts`` per hop, over the
graph's incoming edges), gathers the sampled nodes' features and runs one
SAGE layer per hop over the sampled subgraph (the mean aggregation is
``torchplug.spmm_mean``). Accuracy is measured on the nodes held out,
sampled the same way.

    python examples/sage_minibatch.py                     # small: seconds on a CPU
    python examples/sage_minibatch.py --nodes 2400000 --edges 26 --features 100 --device cuda
    python examples/sage_minibatch.py ... --device cuda --host-graph
    torchrun --nproc-per-node 2 examples/sage_minibatch.py --ddp

On CUDA the graph and the features lie on the GPU, and sampling, feature
gathering (``torchplug.gather_rows``) and training all run there. With
``--host-graph`` the graph and the features stay in pinned host memory, read
in place by the GPU's sampler and gather over PCIe: graphs larger than the
GPU's memory train this way. With ``--ddp`` (under ``torchrun``) there is
one process per GPU (NCCL) or per CPU worker (gloo): every epoch each rank
takes its share of one shuffled order of the training nodes, and
DistributedDataParallel averages the gradients. ``--report FILE`` writes
what each rank did (JSON: the seeds it visited per epoch, its final
parameters).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import List, NamedTuple, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

import torchplug
from torchplug.datasets import power_law_graph

#: Fraction of the nodes trained on; the rest are scored.
TRAIN_FRACTION = 0.6


class Csr(NamedTuple):
    """Each node's incoming edges: ``rowptr [n + 1]`` and ``col`` (the sources)."""

    rowptr: Tensor
    col: Tensor


def incoming(src: Tensor, dst: Tensor, num_nodes: int) -> Csr:
    order = torch.argsort(dst, stable=True)
    return Csr(torch.cat([dst.new_zeros(1), torch.bincount(dst, minlength=num_nodes).cumsum(0)]), src[order])


class SAGE(nn.Module):
    """Layers ``W_l mean_{j -> i} x_j + W_r x_i``, ReLU between them."""

    def __init__(self, sizes: List[int]) -> None:
        super().__init__()
        self.neighbours = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.roots = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: Tensor, csr: Csr) -> Tensor:
        for depth, (neighbours, root) in enumerate(zip(self.neighbours, self.roots)):
            x = neighbours(torchplug.spmm_mean(csr.rowptr, csr.col, None, x)) + root(x)
            if depth < len(self.neighbours) - 1:
                x = F.relu(x)
        return x


def sample_batch(graph: Csr, seeds: Tensor, fanouts: List[int], generator: torch.Generator) -> tuple[Tensor, Csr]:
    """(the sampled nodes' ids, seeds first; the sampled subgraph's incoming
    CSR over them), on the seeds' device."""
    row, col, node_id, _, _, _ = torchplug.neighbor_sample(graph.rowptr, graph.col, seeds, fanouts, csc=True,
                                                           return_edge_id=False, generator=generator)
    return node_id, incoming(row, col, node_id.numel())


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    has_cuda = torch.cuda.is_available() and torchplug.with_cuda
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=10, help="edges per node (each direction)")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--host-graph", action="store_true",
                        help="CUDA: keep the graph and features in pinned host memory (zero-copy)")
    parser.add_argument("--ddp", action="store_true", help="one process per rank, under torchrun")
    parser.add_argument("--report", help="write this rank's record here (JSON; {rank} is replaced)")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rank, world = 0, 1
    device = torch.device(args.device)
    if args.ddp:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if args.device == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
            torch.cuda.set_device(device)
    torch.manual_seed(args.seed)  # the same initial parameters on every rank

    data = power_law_graph(args.nodes, 2 * args.edges, num_classes=args.classes, num_features=args.features,
                           seed=args.seed)
    graph = incoming(data.edge_index[0], data.edge_index[1], data.num_nodes)
    x, y = data.x, data.y.view(-1, 1)
    if args.host_graph and device.type == "cuda":
        place = Tensor.pin_memory
    else:
        place = lambda t: t.to(device)  # noqa: E731
    graph, x, y = Csr(place(graph.rowptr), place(graph.col)), place(x), place(y)
    order = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(args.seed)).to(device)
    train = order[: int(TRAIN_FRACTION * data.num_nodes)]
    held_out = order[int(TRAIN_FRACTION * data.num_nodes):]

    model = SAGE([args.features] + [args.hidden] * (len(args.fanouts) - 1) + [args.classes]).to(device)
    trained = nn.parallel.DistributedDataParallel(model) if args.ddp else model
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    sampling = torch.Generator(device).manual_seed(args.seed * 1000 + rank)
    if rank == 0:
        where = "pinned host memory" if args.host_graph and device.type == "cuda" else str(device)
        print(f"power-law graph: {data.num_nodes} nodes, {data.edge_index.size(1)} edges, {args.features} features "
              f"in {where}; fanouts {args.fanouts}, batches of {args.batch_size}, {world} rank(s), device {device}")

    def forward(seeds: Tensor) -> Tensor:
        node_id, csr = sample_batch(graph, seeds, args.fanouts, sampling)
        return trained(torchplug.gather_rows(x, node_id), csr)[: seeds.numel()]


    visited: List[List[int]] = []
    for epoch in range(1, args.epochs + 1):
        # One shuffled order of the training nodes for all ranks; each takes every world-th.
        shuffled = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(epoch)).to(device)]
        mine = shuffled[rank::world]
        visited.append(mine.tolist())
        start, losses = time.perf_counter(), []
        trained.train()
        # As many steps on every rank (the largest share's), so that DDP needs
        # no join: the join's all-reduces hold Python tensors that gloo's worker
        # threads may still be freeing when the interpreter exits (an abort).
        steps = math.ceil(train.numel() / (world * args.batch_size))
        for seeds in mine.tensor_split(steps):
            loss = F.cross_entropy(forward(seeds), torchplug.gather_rows(y, seeds).view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        elapsed = time.perf_counter() - start
        model.eval()
        with torch.no_grad():  # on mini-batches too: the whole graph may not fit the device
            correct = sum(int((forward(seeds).argmax(1) == torchplug.gather_rows(y, seeds).view(-1)).sum())
                          for seeds in held_out.split(4 * args.batch_size))
        acc = correct / held_out.numel()
        if rank == 0:
            print(f"epoch {epoch:3d}  loss {sum(losses) / max(len(losses), 1):.4f}  held-out acc {acc:.4f}  "
                  f"{len(losses)} steps  {elapsed:.2f} s")

    if args.report:
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        with open(args.report.replace("{rank}", str(rank)), "w") as file:
            json.dump({"rank": rank, "world": world, "visited": visited, "checksum": checksum,
                       "parameters": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}, file)
    print(f"final: rank={rank} acc={acc:.4f}")
    if args.ddp:
        dist.barrier()  # every rank done with its collectives before any tears the group down
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
