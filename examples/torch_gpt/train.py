"""examples/torch_gpt's GPT trained with accord.torch (ACCO by default): the same model, data,
optimizer settings and seeds as train_torch.py, its torch DistributedDataParallel twin. One
worker per process under accord-launch or torchrun, over UCX:

    PYTHONPATH=build/python build/apps/accord-launch -n 2 -- /usr/bin/python3 examples/torch_gpt/train.py

By default the script keeps its own loop, as a DDP user does (--loop own: accord.torch.Job,
forward, loss.backward(), job.step(loss) per micro-batch, its own stream of windows); --loop accord
lets accord drive it (accord.torch.train asks for each micro-batch). Alone (no RANK in the
environment) it trains --workers replicas on threads of this process (--loop accord only).
Evaluations are deferred to after the last round (accord's defer_evaluation), so the clock (the
metrics' "seconds") holds training only.
"""
import argparse
import itertools
import os
import sys
import time

import accord

accord.require("torch")
import accord.torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gpt.add_arguments(parser)
    parser.add_argument("--algo", default="acco", help="accord's algorithm (ddp, acco, ...; accord-train's --algo)")
    parser.add_argument("--max-accumulation", type=int, default=0,
                        help="overlapped algorithms: at most this many micro-batches per stage (0: no cap)")
    parser.add_argument("--accumulation-mode", choices=("fixed", "growing", "growing-steps"), default="fixed",
                        help="--loop own: fixed (a step is --accumulation micro-batches, and as many at ACCO's "
                             "estimate stage); growing-steps: ACCO's stages take at least --accumulation and "
                             "--estimate-accumulation and grow while a round flies (up to --max-accumulation), the "
                             "schedule counting steps; growing: the same, the schedule counting examples")
    parser.add_argument("--estimate-accumulation", type=int, default=0,
                        help="ACCO: micro-batches while an estimate round flies (0: as --accumulation)")
    parser.add_argument("--wire-precision", default="auto",
                        help="auto (fp8 rounds for ACCO, fp32 otherwise) | fp32 | bf16 | fp16 | int8 | fp8 | sign ...")
    parser.add_argument("--estimate-precision", default="", help="ACCO's estimate rounds (empty: as --wire-precision)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0,
                        help="DDP's gradient buckets, reduced during backward (MB of fp32; 0: after backward)")
    parser.add_argument("--workers", type=int, default=2, help="replicas on threads when alone (no RANK)")
    parser.add_argument("--loop", choices=("own", "accord"), default="own",
                        help="own: this script's loop with accord.torch.Job (as a DDP user's); accord: "
                             "accord.torch.train drives it")
    args = gpt.parse(parser)
    gpt.check_arguments(parser, args)
    if args.max_accumulation < 0 or args.estimate_accumulation < 0:
        parser.error("--max-accumulation and --estimate-accumulation must be at least 0")
    if args.warmup_steps >= args.steps:
        parser.error(f"--warmup-steps {args.warmup_steps}: accord's cosine schedule needs it below --steps {args.steps}")
    return args


def main():
    args = parse_arguments()
    gpt.dump_stacks_on_signal()
    gpt.use_share_of_cores()
    corpus = gpt.Corpus(args.data, args.context, args.seed)
    tokens, targets = corpus.evaluation_set(args.eval_windows)
    model = gpt.model_of(args)
    sent = gpt.SentCounter(args.count_sent)

    def loss_fn(net, request):
        sent.start()
        return gpt.loss_of(net, *corpus.micro_batch(request.first_position, request.examples))

    def evaluate(net):
        return gpt.loss_of(net, tokens, targets).item()

    launched = accord.process_group() is not None
    settings = dict(
        evaluate=evaluate, algorithm=args.algo, steps=args.steps, micro_batch=args.micro_batch,
        accumulation=args.accumulation, max_accumulation=args.max_accumulation,
        estimate_accumulation=args.estimate_accumulation, wire_precision=args.wire_precision,
        estimate_precision=args.estimate_precision, learning_rate=args.learning_rate, beta1=0.9, beta2=0.95,
        epsilon=1e-8, weight_decay=args.weight_decay, warmup_steps=args.warmup_steps, min_lr_ratio=0.1,
        max_gradient_norm=args.max_gradient_norm, eval_interval=args.eval_interval, defer_evaluation=True,
        metrics_path=args.metrics, seed=args.seed, bucket_cap_mb=args.bucket_cap_mb)
    if args.loop == "accord":
        result = accord.torch.train(model, loss_fn, **settings, **({} if launched else {"workers": args.workers}))
    else:
        result = own_loop(model, corpus, sent, settings, args)
    sent.write(args.steps)  # result.steps: rank 0 has them, the other ranks none
    for step in result.steps:
        if step.eval_loss >= 0:
            print(f"step {step.step:4d}/{args.steps} | loss {step.train_loss:.4f} | eval {step.eval_loss:.4f} | "
                  f"{step.seconds:.1f} s", flush=True)
    if result.steps:
        print(f"{args.algo}: final held-out loss {result.final_eval_loss:.4f} after {len(result.steps)} steps, "
              f"{result.seconds:.1f} s, {result.bits_per_parameter_per_step:.1f} bits/param/step, "
              f"replicas identical: {result.replicas_identical}")
    return 0


def own_loop(model, corpus, sent, settings, args):
    """The loop a DDP user writes: micro-batch i of this rank reads its windows from stream
    position (i * workers + rank) * micro_batch (as train_torch.py and a DistributedSampler
    stride), runs forward and backward, and hands the gradient to accord; the job says when its
    steps are done. Its steps are fixed by default (the Job's): --accumulation micro-batches, and
    for ACCO-style algorithms --accumulation at the real stage plus --estimate-accumulation
    (default: as many) at the estimate stage, as accord-train's flags count them. With
    --accumulation-mode growing(-steps) ACCO's stages take more while a round flies (the loop
    runs until the job says its steps are done, however many batches that is)."""
    settings["accumulation_mode"] = args.accumulation_mode
    if args.accumulation_mode == "fixed":
        if args.algo.startswith("acco"):  # accord-train's names count per stage; the Job's fixed step holds both
            estimate = args.estimate_accumulation or args.accumulation
            settings.update(accumulation=args.accumulation + estimate, estimate_accumulation=estimate)
        settings["max_accumulation"] = settings["accumulation"]  # a fixed step: no more while a round flies
    job = accord.torch.Job(model, **settings)
    started = None
    for index in itertools.count():
        sent.start()
        position = (index * job.workers + job.rank) * args.micro_batch
        loss = gpt.loss_of(model, *corpus.micro_batch(position, args.micro_batch))
        loss.backward()
        started = started or time.perf_counter()  # from the first micro-batch's step on
        if not job.step(loss):
            break
    result = job.finish()
    # Where the loop's time went, per micro-batch (the first one's forward and backward excluded).
    spent, loop = job.loop_seconds, time.perf_counter() - started
    count = max(1, spent.pop("micro_batches"))
    in_step, end = sum(spent.values()), spent.pop("end")
    print(f"rank {job.rank} own loop per micro-batch: forward+backward {1e3 * (loop - in_step) / count:.1f} ms, "
          + ", ".join(f"{name} {1e3 * seconds / count:.1f} ms" for name, seconds in spent.items())
          + f"; the job's end {end:.1f} s", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
