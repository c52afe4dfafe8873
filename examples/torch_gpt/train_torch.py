"""examples/torch_gpt's GPT trained with torch's DistributedDataParallel over gloo: the baseline
that train.py (the same model and data with accord.torch) is compared with. One process per rank
under accord-launch or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or alone as a group
of one:

    build/apps/accord-launch -n 2 -- /usr/bin/python3 examples/torch_gpt/train_torch.py --hook fp16

The gradients all-reduce plain (fp32), through torch's fp16_compress_hook, or through its
PowerSGD hook (low-rank, with error feedback, after a warm-up of plain rounds). AdamW, warm-up
and cosine to a tenth of the rate, clipping: as accord's. Held-out evaluations run after
training, on snapshots of the parameters, so the clock (the metrics' "seconds") holds training
only.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gpt.add_arguments(parser)
    parser.add_argument("--hook", choices=("none", "fp16", "powersgd"), default="none",
                        help="DDP's communication hook: none (fp32 all-reduce), fp16_compress_hook or powerSGD_hook")
    parser.add_argument("--powersgd-rank", type=int, default=2, help="PowerSGD's matrix approximation rank")
    parser.add_argument("--powersgd-warmup", type=int, default=10,
                        help="steps of plain all-reduce before PowerSGD compresses (at least 2)")
    args = gpt.parse(parser)
    gpt.check_arguments(parser, args)
    if args.powersgd_rank < 1:
        parser.error(f"--powersgd-rank {args.powersgd_rank}: must be at least 1")
    if args.powersgd_warmup < 2:
        parser.error(f"--powersgd-warmup {args.powersgd_warmup}: torch's PowerSGD with error feedback needs at least 2")
    return args


def learning_rate_factor(args):
    """accord's schedule as a factor of the peak rate for step s (0-based): linear warm-up, then
    cosine from 1 to a tenth at the last step."""
    def factor(step):
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        progress = min(1.0, (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def join_group():
    """The torchrun group of this process, or a group of one when none is in the environment."""
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        rendezvous = tempfile.NamedTemporaryFile(prefix="torch-gpt-", delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
        os.unlink(rendezvous)
    return dist.get_rank(), dist.get_world_size()


def bucketing(model, args):
    """DDP's bucket settings: torch's defaults, but one bucket for PowerSGD. torch 1.13's PowerSGD
    hook launches its P and Q all-reduces from gloo's threads, where with several buckets they
    interleave with the next bucket's in an order that differs between ranks (4 ranks: gloo
    fails "op.preamble.length <= op.nbytes"); DDP's first bucket (1 MiB) is sized apart."""
    if args.hook != "powersgd":
        return {}
    megabytes = 2 * sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20 + 1
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(megabytes * 2**20)
    return {"bucket_cap_mb": megabytes}


def register_hook(model, args):
    if args.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_warmup)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def main():
    args = parse_arguments()
    gpt.dump_stacks_on_signal()
    gpt.use_share_of_cores()
    rank, workers = join_group()
    corpus = gpt.Corpus(args.data, args.context, args.seed)
    model = gpt.model_of(args)
    replicated = DistributedDataParallel(model, **bucketing(model, args))  # broadcasts rank 0's parameters
    register_hook(replicated, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=args.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(args))
    sent = gpt.SentCounter(args.count_sent)
    evaluated_at = set(range(args.eval_interval, args.steps + 1, args.eval_interval)) | {args.steps}
    snapshots, records = {}, []
    clock = 0.0  # training seconds: snapshots for the evaluations are not counted
    dist.barrier()
    for step in range(1, args.steps + 1):
        began = time.perf_counter()
        losses, unsynchronised = [], []
        for k in range(args.accumulation):
            sent.start()
            position = (((step - 1) * args.accumulation + k) * workers + rank) * args.micro_batch
            tokens, targets = corpus.micro_batch(position, args.micro_batch)
            last = k == args.accumulation - 1
            started = time.perf_counter()
            with contextlib.nullcontext() if last else replicated.no_sync():
                loss = gpt.loss_of(replicated, tokens, targets)
                (loss / args.accumulation).backward()  # the last one's backward all-reduces the sum
            if not last:
                unsynchronised.append(time.perf_counter() - started)
            losses.append(loss.item())
        updating = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_gradient_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        now = time.perf_counter()
        clock += now - began
        # The all-reduce overlaps the last backward: compute is estimated as the micro-batches
        # computed without it, scaled to all of them, plus the update.
        compute = (args.accumulation * statistics.mean(unsynchronised) + now - updating
                   if unsynchronised else float("nan"))
        records.append({"step": step, "train_loss": statistics.mean(losses), "seconds": clock,
                        "items": args.accumulation * args.micro_batch * args.context * workers,
                        "compute": compute, "communication": max(0.0, now - began - compute)})
        if rank == 0 and step in evaluated_at:
            snapshots[step] = [p.detach().clone() for p in model.parameters()]
    sent.write(args.steps)
    per_rank = [None] * workers  # each rank's loss, compute and communication seconds per step
    dist.all_gather_object(per_rank, [(r["train_loss"], r["compute"], r["communication"]) for r in records])
    if rank == 0:
        report(args, model, corpus, records, per_rank, snapshots)
    end(0)  # `replicated` still holds the gloo group: it is never freed


def end(code):
    """Ends the process at once, freeing nothing. torch 1.13 can deadlock wherever the last
    reference to a gloo process group goes while the GIL is held (DDP's reducer, main's locals
    as it returns, the interpreter's teardown): the group's destructor joins its worker threads
    holding the GIL, and a worker that has just finished an operation (the last all_gather) may be
    waiting for the GIL to free a tensor that Python already dropped. It hung rank 1 once at the
    end of main() (destroy_process_group only drops the Python names), so neither main() nor the
    interpreter may free the group."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def report(args, model, corpus, records, per_rank, snapshots):
    """Evaluates the snapshots, writes the metrics (accord-train's fields that apply; the train
    loss as the mean over the ranks) and prints a line per evaluation."""
    for index, record in enumerate(records):
        record["train_loss"] = statistics.mean(rank[index][0] for rank in per_rank)
    tokens, targets = corpus.evaluation_set(args.eval_windows)
    for step, values in snapshots.items():
        with torch.no_grad():
            for p, value in zip(model.parameters(), values):
                p.copy_(value)
            records[step - 1]["eval_loss"] = gpt.loss_of(model, tokens, targets).item()
        print(f"step {step:4d}/{args.steps} | loss {records[step - 1]['train_loss']:.4f} | "
              f"eval {records[step - 1]['eval_loss']:.4f} | {records[step - 1]['seconds']:.1f} s", flush=True)
    if args.metrics:
        with open(args.metrics, "w") as f:
            for index, record in enumerate(records):
                line = {key: value for key, value in record.items() if key not in ("compute", "communication")}
                line["worker_compute_seconds"] = [rank[index][1] for rank in per_rank]
                line["worker_communication_seconds"] = [rank[index][2] for rank in per_rank]
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception:  # the traceback's frames hold the group: the interpreter must not free them
        traceback.print_exc()
        end(1)
