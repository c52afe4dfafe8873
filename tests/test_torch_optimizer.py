"""accord.torch with the app's torch.optim optimizer as the update rule, and Distributed Lion with
param groups and clipping (registered with ctest, one test per case):
  ddp_equals_torch     DDP with torch's AdamW (a decay and a no-decay group with its own lr) and
                       SGD with momentum, clipping at a norm the gradients exceed, equals plain
                       torch on the big batch: train() with 2 workers in one process (or 2
                       processes under accord-launch -n 2), and a Job whose loop steps a torch
                       lr_scheduler on the optimizer, its steps' learning_rate the scheduler's (StepMetrics
                       and the metrics file)
  elementwise_classes  NAdam, RAdam, Adamax, RMSprop, Adagrad, Rprop, Adadelta, ASGD and Adam with
                       amsgrad map their state (tensors and numbers) to accord's slots: one worker
                       equals torch, and the optimizer's state_dict() then torch's
  acco_resumes         ACCO with torch's AdamW trains (the loss falls; evaluated on accord's
                       evaluator thread meanwhile); a DDP Job resumed from state_dict() equals the
                       straight run bit for bit, optimizer state included; the optimizer's
                       state_dict() holds the last checkpoint's state; an ACCO one resumed
                       twice from one state ends bit for bit the same; it resumes with 2 workers
  refusals             LBFGS, SparseAdam, a per-tensor-norm optimizer, a stepped one, one lacking
                       a trainable parameter, settings it owns, D-Lion or local-sgd with it: one
                       ValueError naming the class and why, before anything trains
  dlion_groups         Distributed Lion with param groups and clipping: one worker equals Lion by
                       hand with the groups' rates and decays after torch's clip_grad_norm_; ACCO-
                       D-Lion with them trains on 2 workers
Run: PYTHONPATH=build/python /usr/bin/python3 tests/test_torch_optimizer.py CASE"""
import copy
import json
import os
import sys
import tempfile

import accord

accord.require("numpy", "torch")
import numpy  # noqa: E402
import torch  # noqa: E402

import accord.torch  # noqa: E402
from test_python import EXAMPLES, data, mean_loss, model, raises  # noqa: E402


def grouped(optimizer_class, net, **settings):
    """The optimizer over two param groups, as a DDP script writes it: decay on the weights, none
    and a larger rate on the biases."""
    weights = [p for name, p in net.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in net.named_parameters() if name.endswith("bias")]
    return optimizer_class([{"params": weights, "weight_decay": 0.1},
                            {"params": biases, "weight_decay": 0.0, "lr": 2 * settings["lr"]}], **settings)


ADAMW = (torch.optim.AdamW, dict(lr=0.01, betas=(0.9, 0.95)))
SGD = (torch.optim.SGD, dict(lr=0.05, momentum=0.9))


def close_to(values):
    """`values`, equal to within float32's rounding of a rate (accord reports a double of it)."""
    class Close(list):
        def __eq__(self, other):
            return len(other) == len(self) and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(other, self))
    return Close(values)


def torch_reference(optimizer_class, settings, steps, big_batch, clip=0.0, scheduler=None):
    """Plain torch: `steps` steps of the grouped optimizer on consecutive big batches; the model
    (its optimizer as `net.optimizer`)."""
    x, y = data()
    net = model()
    optimizer = grouped(optimizer_class, net, **settings)
    schedule = scheduler(optimizer) if scheduler else None
    clipped = False
    for step in range(steps):
        optimizer.zero_grad()
        mean_loss(net, x, y, step * big_batch, big_batch).backward()
        if clip:
            clipped |= torch.nn.utils.clip_grad_norm_(net.parameters(), clip).item() > clip
        optimizer.step()
        if schedule:
            schedule.step()
    assert clipped or not clip, "the clipping norm was never reached"
    net.optimizer = optimizer
    return net


def largest_difference(net, reference):
    return max((mine - theirs).abs().max().item() for mine, theirs in zip(net.parameters(), reference.parameters()))


def ddp_equals_torch():
    x, y = data()
    group = accord.process_group()
    workers, micro_batch, accumulation, steps, clip = group.world_size if group else 2, 4, 2, 6, 0.5
    for optimizer_class, settings in (ADAMW, SGD):
        net = model()
        result = accord.torch.train(
            net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), algorithm="ddp",
            workers=workers, steps=steps, micro_batch=micro_batch, accumulation=accumulation,
            max_accumulation=accumulation, optimizer=grouped(optimizer_class, net, **settings),
            max_gradient_norm=clip, eval_interval=0)
        reference = torch_reference(optimizer_class, settings, steps, workers * accumulation * micro_batch, clip)
        largest = largest_difference(net, reference)
        assert result.replicas_identical and largest < 1e-6, f"{optimizer_class.__name__}: {largest}"
        assert largest_difference(net, model()) > 1e-3, "training did not move the parameters"
        print(f"ddp, {workers} workers, torch's {optimizer_class.__name__} with 2 groups and clipping == torch "
              f"after {steps} steps (largest difference {largest:.1e})")

    # The app's loop steps a scheduler on the optimizer, as with DDP: each step takes its rates.
    def halving(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 ** step)

    net, reported = model(), []
    optimizer = grouped(*ADAMW[:1], net, **ADAMW[1])
    schedule = halving(optimizer)
    metrics = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
    job = accord.torch.Job(net, algorithm="ddp", steps=steps, micro_batch=micro_batch, optimizer=optimizer,
                           eval_interval=0, on_step=lambda m: reported.append(m.learning_rate), metrics_path=metrics)
    while (request := job.request) is not None:
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        loss.backward()
        job.step(loss)
        schedule.step()
    result = job.finish()
    # Each step reports the rate the scheduler gave its update (the first param group's).
    rates = [ADAMW[1]["lr"] * 0.5 ** step for step in range(steps)]
    if job.rank == 0:  # the metrics file too
        with open(metrics) as lines:
            written = [json.loads(line)["learning_rate"] for line in lines if '"learning_rate"' in line]
        assert [s.learning_rate for s in result.steps] == reported == close_to(rates), (reported, rates)
        assert written == close_to(rates), (written, rates)
    os.remove(metrics)
    reference = torch_reference(*ADAMW, steps, job.workers * micro_batch, scheduler=halving)
    largest = largest_difference(net, reference)
    unscheduled = largest_difference(net, torch_reference(*ADAMW, steps, job.workers * micro_batch))
    assert largest < 1e-6 < unscheduled, (largest, unscheduled)
    print(f"a Job with a LambdaLR on the optimizer == torch with it (largest difference {largest:.1e}; "
          f"{unscheduled:.1e} from torch without), and its steps report the scheduler's rates")


def elementwise_classes():
    x, y = data()
    micro_batch, steps = 16, 5
    for optimizer_class, settings in ((torch.optim.NAdam, dict(lr=0.01)), (torch.optim.RAdam, dict(lr=0.01)),
                                      (torch.optim.Adamax, dict(lr=0.01)), (torch.optim.Adagrad, dict(lr=0.05)),
                                      (torch.optim.RMSprop, dict(lr=0.01, momentum=0.5, centered=True)),
                                      (torch.optim.Rprop, dict(lr=0.01)), (torch.optim.Adadelta, dict(lr=1.0)),
                                      (torch.optim.ASGD, dict(lr=0.05, t0=2)),
                                      (torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
                                      (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True))):
        net = model()
        optimizer = grouped(optimizer_class, net, **settings)
        job = accord.torch.Job(net, group=None, algorithm="ddp", steps=steps, micro_batch=micro_batch,
                               optimizer=optimizer, eval_interval=0)
        while (request := job.request) is not None:
            loss = mean_loss(net, x, y, request.first_position, request.examples)
            loss.backward()
            job.step(loss)
        job.finish()
        reference = torch_reference(optimizer_class, settings, steps, micro_batch)
        largest = largest_difference(net, reference)
        slots = job.state_dict()["optimizer"].shape[0]
        assert largest < 1e-6, f"{optimizer_class.__name__}: {largest}"
        # The optimizer's state_dict() holds what torch's would: accord's gathered slots, shaped
        # as the parameters, its numbers and step count.
        mine, theirs = optimizer.state_dict()["state"], reference.optimizer.state_dict()["state"]
        assert mine.keys() == theirs.keys() and all(mine[i].keys() == theirs[i].keys() for i in theirs), (mine, theirs)
        for index, state in theirs.items():
            for key, value in state.items():
                ours, what = mine[index][key], f"{optimizer_class.__name__} {key}: {mine[index][key]} != {value}"
                if torch.is_tensor(value):
                    assert (ours.shape, ours.dtype) == (value.shape, value.dtype), what
                    assert torch.allclose(ours, value, rtol=1e-5, atol=1e-7), what
                else:  # a number (Rprop's and ASGD's step in some torch versions)
                    assert type(ours) is type(value) and abs(ours - value) <= 1e-5 * abs(value), what
        print(f"{optimizer_class.__name__} == torch after {steps} steps ({slots} slots; largest difference "
              f"{largest:.1e}), its state_dict() too")


def run_job(algorithm, steps, x, y, state=None, **settings):
    """A one-worker Job with torch's AdamW over the app's loop (its fixed steps: DDP one
    micro-batch, ACCO one per stage), from `state` when given: the model (its optimizer as
    `net.optimizer`) and the Job."""
    net = model()
    net.optimizer = grouped(*ADAMW[:1], net, **ADAMW[1])
    job = accord.torch.Job(net, group=None, algorithm=algorithm, steps=steps, micro_batch=8,
                           optimizer=net.optimizer, max_gradient_norm=0.5, eval_interval=0, **settings)
    if state is not None:
        job.load_state_dict(state)
    while (request := job.request) is not None:
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        loss.backward()
        job.step(loss)
    job.finish()
    return net, job


def acco_resumes():
    x, y = data()
    net, evaluated = model(), []
    result = accord.torch.train(
        net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), group=None,
        evaluate=lambda m: evaluated.append(mean_loss(m, x, y, 0, EXAMPLES).item()) or evaluated[-1],
        algorithm="acco", workers=2, steps=40, micro_batch=16, max_accumulation=2,
        optimizer=grouped(*ADAMW[:1], net, lr=0.03, betas=(0.9, 0.95)), eval_interval=10)
    first = sum(s.train_loss for s in result.steps[:3]) / 3
    last = sum(s.train_loss for s in result.steps[-3:]) / 3
    assert result.replicas_identical and last < 0.8 * first and len(evaluated) >= 4, (first, last, evaluated)
    print(f"acco with torch's AdamW, 2 workers: train loss {first:.4f} -> {last:.4f}, eval {evaluated}")

    # DDP: 4 steps, then 4 resumed from its state_dict(), are the 8 straight ones.
    straight, straight_job = run_job("ddp", 8, x, y)
    half, half_job = run_job("ddp", 4, x, y)
    half_state = copy.deepcopy(half.optimizer.state_dict()["state"])
    resumed, resumed_job = run_job("ddp", 8, x, y, half_job.state_dict())
    for mine, theirs in zip(resumed.parameters(), straight.parameters()):
        assert torch.equal(mine, theirs), "4 + 4 resumed steps differ from 8 straight ones"
    ending = straight_job.state_dict()["optimizer"]
    assert ending.shape[0] == 2 and numpy.array_equal(resumed_job.state_dict()["optimizer"], ending)
    print("ddp with torch's AdamW: 4 + 4 resumed steps == 8 straight ones bit for bit, exp_avg and exp_avg_sq too")

    # The optimizer's state_dict() follows the checkpoints accord writes: after step 5 of a job
    # checkpointed every 4 steps it is the 4-step job's final state; at the end, the last one.
    net, seen = model(), []
    optimizer = grouped(*ADAMW[:1], net, **ADAMW[1])
    job = accord.torch.Job(net, group=None, algorithm="ddp", steps=8, micro_batch=8, max_accumulation=1,
                           optimizer=optimizer, max_gradient_norm=0.5, eval_interval=0, checkpoint_interval=4,
                           on_step=lambda m: seen.append(copy.deepcopy(optimizer.state_dict()["state"]))
                           if m.step == 5 else None)
    while (request := job.request) is not None:
        mean_loss(net, x, y, request.first_position, request.examples).backward()
        job.step(0.0)
    job.finish()
    for mine, theirs in ((seen[0], half_state), (optimizer.state_dict()["state"],
                                                               straight.optimizer.state_dict()["state"])):
        assert mine.keys() == theirs.keys() and all(
            torch.equal(mine[i][key], theirs[i][key]) for i in theirs for key in theirs[i]), (mine, theirs)
    assert seen[0][0]["step"] == 4 and optimizer.state_dict()["state"][0]["step"] == 8, seen[0][0]["step"]
    print("the torch optimizer's state_dict() holds the state of accord's last checkpoint: step 4's during "
          "step 5, step 8's at the end")

    # ACCO drops the micro-batches in flight at a checkpoint, so its resumed run is not the straight
    # one; resumed twice from one state, it is the same bit for bit.
    _, half_job = run_job("acco", 4, x, y)
    state = half_job.state_dict()
    assert state["optimizer"].any(), "the checkpoint holds no optimizer state"
    ends = [run_job("acco", 8, x, y, state) for _ in range(2)]
    for mine, theirs in zip(ends[0][0].parameters(), ends[1][0].parameters()):
        assert torch.equal(mine, theirs), "two ACCO runs resumed from one checkpoint differ"
    assert numpy.array_equal(ends[0][1].state_dict()["optimizer"], ends[1][1].state_dict()["optimizer"])
    print("acco with torch's AdamW: resumed twice from step 4, the same 8th step bit for bit")

    with tempfile.TemporaryDirectory() as scratch:
        resume_path = os.path.join(scratch, "half")
        with open(resume_path, "wb") as f:
            f.write(state["checkpoint"])
        net = model()
        result = accord.torch.train(
            net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), group=None, algorithm="acco",
            workers=2, steps=8, micro_batch=8, optimizer=grouped(*ADAMW[:1], net, **ADAMW[1]),
            resume_path=resume_path, eval_interval=0)
        assert result.replicas_identical and [s.step for s in result.steps] == [5, 6, 7, 8]
    print("the 1-worker ACCO state resumed with 2 workers")


class Normalized(torch.optim.Optimizer):
    """Each tensor steps along its gradient over the gradient's norm: not elementwise."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad / p.grad.norm(), alpha=-group["lr"])


def refusals():
    x, y = data()

    def start(optimizer, net, **settings):
        return lambda: accord.torch.train(net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples),
                                          group=None, workers=1, steps=2, optimizer=optimizer, **settings)

    net = model()
    raises(ValueError, "torch.optim.LBFGS cannot be accord's update rule: its step needs a closure",
           start(torch.optim.LBFGS(net.parameters()), net))
    raises(ValueError, "torch.optim.SparseAdam cannot be accord's update rule: param group 0's settings fail",
           start(torch.optim.SparseAdam(net.parameters()), net))
    raises(ValueError, "Normalized cannot be accord's update rule: its update of an element depends on the other",
           start(Normalized(net.parameters()), net))
    stepped = torch.optim.AdamW(net.parameters())
    mean_loss(net, x, y, 0, 8).backward()
    stepped.step()
    raises(ValueError, "torch.optim.AdamW cannot be accord's update rule: it has state already",
           start(stepped, net))
    raises(ValueError, "parameter '0.weight' is trainable but in none of the AdamW's param groups",
           start(torch.optim.AdamW(net[2].parameters()), net))
    raises(ValueError, "learning_rate, weight_decay belong to the torch optimizer (AdamW)",
           start(torch.optim.AdamW(net.parameters()), net, learning_rate=0.1, weight_decay=0.1))
    raises(ValueError, "param_groups and a torch optimizer (AdamW)",
           start(torch.optim.AdamW(net.parameters()), net, param_groups=[{"params": net[0].parameters()}]))
    raises(ValueError, "optimizer 'torch.optim.AdamW' does not apply",
           start(torch.optim.AdamW(net.parameters()), net, algorithm="dlion-mavo"))
    raises(ValueError, "app optimizer torch.optim.AdamW: it steps the shards of a sharded-optimizer algorithm",
           start(torch.optim.AdamW(net.parameters()), net, algorithm="ddp", topology="local-sgd"))


def lion_by_hand(steps, micro_batch, clip, lr=0.01, betas=(0.9, 0.99)):
    """Lion (lion-notes.md) with a decay group and a no-decay group at half the rate, after torch's
    clip_grad_norm_, on consecutive micro-batches."""
    x, y = data()
    net = model()
    rates = {name: (lr, 0.5) if name.endswith("weight") else (lr / 2, 0.0) for name, _ in net.named_parameters()}
    momenta = {name: torch.zeros_like(p) for name, p in net.named_parameters()}
    clipped = False
    for step in range(steps):
        net.zero_grad()
        mean_loss(net, x, y, step * micro_batch, micro_batch).backward()
        clipped |= torch.nn.utils.clip_grad_norm_(net.parameters(), clip).item() > clip
        with torch.no_grad():
            for name, p in net.named_parameters():
                rate, decay = rates[name]
                direction = betas[0] * momenta[name] + (1 - betas[0]) * p.grad
                p.mul_(1 - rate * decay).add_(direction.sign(), alpha=-rate)
                momenta[name] = betas[1] * momenta[name] + (1 - betas[1]) * p.grad
    assert clipped, "the clipping norm was never reached"
    return net


def dlion_groups():
    x, y = data()
    micro_batch, steps, clip = 16, 6, 0.5

    def lion_groups(net):
        weights = [p for name, p in net.named_parameters() if name.endswith("weight")]
        biases = [p for name, p in net.named_parameters() if name.endswith("bias")]
        return [{"params": weights}, {"params": biases, "lr": 0.005, "weight_decay": 0.0}]

    net = model()
    result = accord.torch.train(
        net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), group=None, algorithm="dlion-mavo",
        workers=1, steps=steps, micro_batch=micro_batch, param_groups=lion_groups(net), learning_rate=0.01,
        weight_decay=0.5, max_gradient_norm=clip, cosine=False, eval_interval=0)
    reference = lion_by_hand(steps, micro_batch, clip)
    largest = largest_difference(net, reference)
    assert result.replicas_identical and largest < 1e-6, largest
    print(f"dlion-mavo, 1 worker, 2 groups and clipping == Lion by hand (largest difference {largest:.1e})")

    net = model()
    result = accord.torch.train(
        net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), group=None, algorithm="acco-dlion",
        workers=2, steps=40, micro_batch=16, max_accumulation=2, param_groups=lion_groups(net),
        learning_rate=0.01, weight_decay=0.5, max_gradient_norm=clip, eval_interval=0)
    first = sum(s.train_loss for s in result.steps[:3]) / 3
    last = sum(s.train_loss for s in result.steps[-3:]) / 3
    assert result.replicas_identical and last < 0.8 * first, (first, last)
    print(f"acco-dlion, 2 workers, 2 groups and clipping: train loss {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    cases = {f.__name__: f for f in (ddp_equals_torch, elementwise_classes, acco_resumes, refusals, dlion_groups)}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        sys.exit(f"usage: test_torch_optimizer.py {'|'.join(cases)}")
    cases[sys.argv[1]]()
