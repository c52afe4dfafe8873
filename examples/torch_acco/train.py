"""An existing PyTorch model trained with ACCO through accord: a small MLP on Fashion-MNIST
(Debian's dataset-fashion-mnist), one worker per process over UCX:

    PYTHONPATH=build/python build/apps/accord-launch -n 2 -- python3 examples/torch_acco/train.py

Alone (no RANK in the environment) it trains --workers replicas on threads of this process.
Exits 1 if the held-out loss did not fall well below the untrained model's.
"""
import argparse
import gzip
import os
import sys

import accord

accord.require("numpy", "torch")  # Debian: apt-get install python3-torch python3-numpy
import numpy  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import accord.torch  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    """An IDX file of Fashion-MNIST as a numpy array (magic, dimensions, then uint8 values)."""
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return numpy.frombuffer(raw, numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split):
    images = torch.from_numpy(idx(f"{split}-images-idx3-ubyte.gz").reshape(-1, 784).astype(numpy.float32) / 255.0)
    labels = torch.from_numpy(idx(f"{split}-labels-idx1-ubyte.gz").astype(numpy.int64))
    return images, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="acco")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--workers", type=int, default=2, help="in one process (ignored under accord-launch)")
    args = parser.parse_args()

    # Each process takes its share of the cores (accord-launch and torchrun set LOCAL_WORLD_SIZE).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    test_x, test_y = test_x[:2000], test_y[:2000]
    order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(1))  # the same on every rank

    torch.manual_seed(0)  # every worker starts from the same parameters
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def loss_fn(net, request):
        index = order[torch.arange(request.first_position, request.first_position + request.examples) % len(order)]
        return F.cross_entropy(net(train_x[index]), train_y[index])

    def evaluate(net):
        return F.cross_entropy(net(test_x), test_y).item()

    def progress(step):
        if step.step % 20 == 0 or step.step == args.steps:
            evaluated = f" | eval {step.eval_loss:.4f}" if step.eval_loss >= 0 else ""
            print(f"step {step.step:4d}/{args.steps} | loss {step.train_loss:.4f}{evaluated} | "
                  f"{step.items_per_second:.0f} images/s | hidden {100 * step.hidden_fraction:.0f}%", flush=True)

    with torch.no_grad():
        untrained = evaluate(model)
    launched = accord.process_group() is not None
    result = accord.torch.train(model, loss_fn, evaluate=evaluate, on_step=progress, algorithm=args.algorithm,
                                steps=args.steps, micro_batch=args.micro_batch, learning_rate=args.learning_rate,
                                eval_interval=50, **({} if launched else {"workers": args.workers}))
    with torch.no_grad():
        accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
    final = evaluate(model)
    print(f"{args.algorithm}: held-out loss {untrained:.4f} -> {final:.4f}, accuracy {100 * accuracy:.1f}%, "
          f"{result.seconds:.1f}s, replicas identical: {result.replicas_identical}")
    if not final < 0.6 * untrained:
        print("accord-example-torch-acco: training did not converge", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
