"""DDP on a toy regression (y = 3x + 1 with noise): every process trains a replica on its own
shard, gradients are all-reduced each step (gloo on CPU, nccl on GPUs). Rank 0 reports the loss
through tau_run and checks that every replica ended with the same weights."""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tau_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    use_gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if use_gpu else "cpu")
    torch.manual_seed(1234 + rank)  # each rank its own shard of the data
    x = torch.rand(256, 1, device=device)
    y = 3 * x + 1 + 0.05 * torch.randn_like(x)
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts them)
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        if rank == 0:
            tau_run.log(step, loss=float(mean))
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(w) for _ in range(world)]
    dist.all_gather(gathered, w)
    if rank == 0:
        same = all(torch.allclose(g, gathered[0]) for g in gathered)
        print(
            f"world {world}: weight {w[0]:.3f} bias {w[1]:.3f}; replicas equal: {same}", flush=True
        )
        if not same:
            raise SystemExit("the replicas diverged: the all-reduce did not happen")
    # every rank leaves together: a rank that tears gloo down while its peer still holds the
    # connection can abort the peer ("terminate called without an active exception", CI)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
