"""examples/torch_loop/train_torch.py trained with accord: the same loop, DataLoader and torch
AdamW (with its param groups), a sampler that gives each worker its share, and accord.torch.Job,
which steps each worker's shard with that optimizer, in place of optimizer.step() (ACCO by
default; docs/python.md shows the diff). One worker per process:

    PYTHONPATH=build/python build/apps/accord-launch -n 2 -- python3 examples/torch_loop/train.py
"""
import argparse
import sys

import accord

accord.require("torch")
import accord.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402


def dataset(examples=4096, inputs=8, classes=4):
    """A fixed classification task: labels from a random linear map of the inputs."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(examples, inputs, generator=g)
    return TensorDataset(x, (x @ torch.randn(inputs, classes, generator=g)).argmax(dim=1))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--algorithm", default="acco")
    args = parser.parse_args(argv)

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model[0].weight.requires_grad_(False)  # a frozen layer
    groups = [{"params": [p for n, p in model.named_parameters() if n.endswith("bias")], "weight_decay": 0.0},
              {"params": [p for n, p in model.named_parameters() if not n.endswith("bias")]}]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    job = accord.torch.Job(model, optimizer=optimizer, algorithm=args.algorithm, steps=args.steps, micro_batch=args.batch,
                           max_gradient_norm=0.5)  # a step: ddp 1 batch, acco 2 (one per stage), as the job says
    loader = DataLoader(dataset(), batch_size=args.batch, sampler=DistributedSampler(dataset(), job.workers, job.rank, False))
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if not job.step(loss):
            break
        print(f"step {step + 1} loss {loss.item():.4f}")
    return model, job.finish()  # the loader ran out first: the model keeps the last completed step


if __name__ == "__main__":
    main()
    sys.exit(0)
