"""Train an existing torch.nn.Module with accord (ACCO, Distributed Lion, DDP, ...):

    import accord.torch
    def loss_fn(model, request):          # the micro-batch of examples [first_position, +examples)
        x, y = my_batch(request.first_position, request.examples)
        return torch.nn.functional.cross_entropy(model(x), y)
    result = accord.torch.train(model, loss_fn, algorithm="acco", steps=300, micro_batch=32)

In one process, `workers` replicas of the model train on threads; under accord-launch or
torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) each process is one worker, over UCX.
The model's parameters and gradients become views of two flat float32 buffers, which accord
writes and reads in place: the model sees every new parameter without a copy.
"""
import copy
import hashlib
import threading

import torch

import accord

__all__ = ["FlatModule", "signature", "train"]


class FlatModule:
    """A module whose parameters and gradients are views of `parameters` and `gradients`, two
    flat contiguous float32 CPU tensors (in the order of module.parameters())."""

    def __init__(self, module):
        named = list(module.named_parameters())
        if not named:
            raise ValueError("accord.torch: the module has no parameters")
        for name, p in named:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"accord.torch: parameter '{name}' is {p.dtype} on {p.device}; "
                                "accord trains float32 parameters on the CPU")
        total = sum(p.numel() for _, p in named)
        self.module = module
        self.parameters = torch.empty(total, dtype=torch.float32)
        self.gradients = torch.zeros(total, dtype=torch.float32)
        self._views = []
        offset = 0
        with torch.no_grad():
            for _, p in named:
                n = p.numel()
                values = self.parameters[offset:offset + n].view_as(p)
                values.copy_(p)
                p.data = values
                p.grad = self.gradients[offset:offset + n].view_as(p)
                self._views.append((p, p.grad))
                offset += n

    def collect_gradients(self):
        """Autograd accumulates into the gradient views in place; a gradient it replaced (or one
        the user set to None) is copied back into the flat buffer."""
        for p, view in self._views:
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
            else:
                continue
            p.grad = view


def signature(module):
    """Names the architecture: the class, the parameter count and a hash of every parameter's
    name and shape (workers of one job must agree)."""
    shapes = ";".join(f"{name}{tuple(p.shape)}" for name, p in module.named_parameters())
    count = sum(p.numel() for p in module.parameters())
    return (f"torch {type(module).__name__}, {count} parameters, "
            f"shapes {hashlib.sha1(shapes.encode()).hexdigest()[:12]}")


def train(module, loss_fn, *, evaluate=None, on_step=None, group="environment", **settings):
    """Trains `module` in place and returns accord's JobResult.

    loss_fn(model, request) returns the mean loss over the micro-batch of examples
    [request.first_position, +request.examples) (or a pair (loss, items) when the mean is over
    another count, e.g. tokens); accord calls backward through it. Every worker's stream of
    positions is disjoint. evaluate(model) -> float (optional) gives the held-out loss, on a
    copy of the model, from accord's evaluator thread. on_step(StepMetrics) sees every step.
    `settings` are JobConfig fields (algorithm, workers, steps, micro_batch, accumulation,
    optimizer, learning_rate, weight_decay, wire_precision, ...). `group`: a ProcessGroup, None
    for a job in this process, or read from the environment (accord-launch, torchrun, srun; also
    ACCORD_ELASTIC and ACCORD_JOIN) by default, as accord-train reads it.
    """
    if isinstance(group, str) and group == "environment":
        group = accord.process_group()
    if group is not None and not group.join:  # a joiner gets its place from the running job
        if settings.setdefault("workers", group.world_size) != group.world_size:
            raise ValueError(f"accord.torch.train: workers={settings['workers']} but the job has "
                             f"WORLD_SIZE {group.world_size} processes (one worker each)")
    else:
        settings.setdefault("workers", 1)
    config = accord.config(**settings)
    local_workers = 1 if group is not None else max(config.workers, 1)

    replicas = [module] + [copy.deepcopy(module) for _ in range(local_workers - 1)]
    evaluation = FlatModule(copy.deepcopy(module)) if evaluate is not None else None
    flats = [FlatModule(m) for m in replicas]

    def evaluate_at(parameters):
        evaluation.parameters.copy_(torch.from_numpy(parameters))
        with torch.no_grad():
            return float(evaluate(evaluation.module))

    job = accord.Job(flats[0].parameters, config, signature(module), group=group, on_step=on_step,
                     evaluate=evaluate_at if evaluate is not None else None)
    errors = []

    def drive(worker, flat):
        try:
            while (request := worker.next(into=flat.parameters)) is not None:
                flat.gradients.zero_()
                out = loss_fn(flat.module, request)
                loss, items = out if isinstance(out, tuple) else (out, request.examples)
                loss.backward()
                flat.collect_gradients()
                worker.submit(flat.gradients, float(items), float(loss))
        except BaseException as error:  # the job fails with it; wait() below re-raises it
            errors.append(error)
            worker.fail(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=drive, args=(job.worker(i), flats[i]), name=f"accord worker {i}")
               for i in range(1, job.local_workers)]
    for thread in threads:
        thread.start()
    drive(job.worker(0), flats[0])
    for thread in threads:
        thread.join()
    try:
        result = job.wait()
    except RuntimeError as failure:
        if errors:
            raise errors[0] from failure
        raise
    final = result.parameters
    if final.size:
        flats[0].parameters.copy_(torch.from_numpy(final))
    return result
