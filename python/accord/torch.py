"""Train an existing torch.nn.Module with accord (ACCO, Distributed Lion, DDP, ...), in one of
two shapes.

accord runs the loop, asking for micro-batches by their position in the data stream:

    import accord.torch
    def loss_fn(model, request):          # the micro-batch of examples [first_position, +examples)
        x, y = my_batch(request.first_position, request.examples)
        return torch.nn.functional.cross_entropy(model(x), y)
    result = accord.torch.train(model, loss_fn, algorithm="acco", steps=300, micro_batch=32)

or the app keeps its own loop and DataLoader, as with DistributedDataParallel:

    job = accord.torch.Job(model, algorithm="acco", steps=300, micro_batch=32)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if not job.step(loss):            # the parameters for the next micro-batch are in place
            break
    result = job.finish()

In one process train() runs `workers` replicas of the model on threads (a Job is one worker);
under accord-launch or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) each process is one
worker, over UCX. The model's trainable parameters, their gradients and its floating-point
buffers are views of flat float32 buffers, which accord writes and reads in place: the model
sees every new parameter without a copy.
"""
import copy
import hashlib
import os
import signal
import tempfile
import threading

import torch

import accord

__all__ = ["FlatModule", "Job", "signature", "train"]

# The buffers= settings and the role of the buffers' ParameterGroup (none: buffers stay local).
BUFFER_ROLES = {"broadcast": "broadcast", "average": "averaged", "local": None}
BUFFER_MODES = tuple(BUFFER_ROLES)


def _layout(module, param_groups, buffers):
    """The tensors accord's flat buffer holds, in order: the trainable parameters of each param
    group (torch's form: dicts with "params"), the other trainable ones, then the floating-point
    buffers unless buffers="local"; and each param group's other settings with its range."""
    if buffers not in BUFFER_MODES:
        raise ValueError(f"accord.torch: buffers={buffers!r} is not one of {', '.join(BUFFER_MODES)}")
    names = {id(p): name for name, p in module.named_parameters()}
    trainable = [p for p in module.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("accord.torch: the module has no trainable parameters")
    for p in trainable:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise TypeError(f"accord.torch: parameter '{names[id(p)]}' is {p.dtype} on {p.device}; "
                            "accord trains float32 parameters on the CPU")
    ordered, placed, group_settings = [], set(), []
    for index, group in enumerate(param_groups or []):
        members = [p for p in group["params"] if p.requires_grad]
        for p in members:
            if id(p) not in names:
                raise ValueError(f"accord.torch: param group {index} holds a tensor that is not the module's")
            if id(p) in placed:
                raise ValueError(f"accord.torch: parameter '{names[id(p)]}' is in two param groups")
            placed.add(id(p))
        begin = sum(p.numel() for p in ordered)
        ordered += members
        settings = {key: value for key, value in group.items() if key != "params"}
        group_settings.append((settings, begin, begin + sum(p.numel() for p in members)))
    ordered += [p for p in trainable if id(p) not in placed]
    kept = [] if buffers == "local" else [b for b in module.buffers() if b.is_floating_point()]
    for b in kept:
        if b.dtype != torch.float32 or b.device.type != "cpu":
            raise TypeError(f"accord.torch: a buffer is {b.dtype} on {b.device}; accord keeps float32 CPU "
                            "buffers (or buffers='local')")
    return ordered, kept, group_settings


class FlatModule:
    """A module whose trainable parameters (requires_grad: frozen ones stay as they are, neither
    trained nor decayed) and floating-point buffers (BatchNorm's running statistics; none with
    buffers="local") are views of `parameters`, one flat contiguous float32 CPU tensor, in
    _layout's order; the parameters' gradients are views of `gradients`."""

    def __init__(self, module, param_groups=None, buffers="broadcast"):
        ordered, self.buffers, self.group_settings = _layout(module, param_groups, buffers)
        self.module = module
        self.trained = sum(p.numel() for p in ordered)
        total = self.trained + sum(b.numel() for b in self.buffers)
        self.parameters = torch.empty(total, dtype=torch.float32)
        self.gradients = torch.zeros(total, dtype=torch.float32)
        self._views = []
        offset = 0
        with torch.no_grad():
            for tensor in ordered + self.buffers:
                n = tensor.numel()
                values = self.parameters[offset:offset + n].view_as(tensor)
                values.copy_(tensor)
                tensor.data = values
                if offset < self.trained:
                    gradient = self.gradients[offset:offset + n].view_as(tensor)
                    if tensor.grad is not None:  # a backward pass before the job started (Job's first step)
                        gradient.copy_(tensor.grad)
                    tensor.grad = gradient
                    self._views.append((tensor, tensor.grad))
                offset += n

    def collect_gradients(self):
        """Autograd accumulates into the gradient views in place; a gradient it replaced (or one
        the user set to None) is copied back into the flat buffer. The buffers' current values
        go where their gradients would be: accord averages or broadcasts them."""
        for p, view in self._views:
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
            else:
                continue
            p.grad = view
        self.gradients[self.trained:] = self.parameters[self.trained:]

    def zero_gradients(self):
        self.gradients[:self.trained].zero_()

    def parameter_groups(self, buffers, learning_rate, weight_decay):
        """accord's ParameterGroups for this layout: each param group's "lr" and "weight_decay"
        as scales of the job's learning_rate and weight_decay, and the buffers' range."""
        groups = []
        for index, (settings, begin, end) in enumerate(self.group_settings):
            unknown = set(settings) - {"lr", "weight_decay"}
            if unknown:
                raise ValueError(f"accord.torch: param group {index} sets {', '.join(sorted(unknown))}; "
                                 "accord's groups take lr and weight_decay")
            if begin == end:
                continue
            if "lr" in settings and not learning_rate:
                raise ValueError(f"accord.torch: param group {index} sets lr but the job's learning_rate is "
                                 "the algorithm's default (groups scale it: set learning_rate)")
            lr_scale = settings.get("lr", learning_rate) / learning_rate if learning_rate else 1.0
            decay = settings.get("weight_decay", weight_decay)
            if decay and not weight_decay:
                raise ValueError(f"accord.torch: param group {index} has weight_decay {decay} but the job's "
                                 "weight_decay is 0 (groups scale it)")
            groups.append(accord.ParameterGroup(begin, end, lr_scale, decay / weight_decay if weight_decay else 1.0))
        if self.parameters.numel() > self.trained:
            groups.append(accord.ParameterGroup(self.trained, self.parameters.numel(), role=BUFFER_ROLES[buffers]))
        return groups


def signature(module):
    """Names the architecture: the class, the parameter count and a hash of every parameter's
    name and shape (workers of one job must agree)."""
    shapes = ";".join(f"{name}{tuple(p.shape)}" for name, p in module.named_parameters())
    count = sum(p.numel() for p in module.parameters())
    return (f"torch {type(module).__name__}, {count} parameters, "
            f"shapes {hashlib.sha1(shapes.encode()).hexdigest()[:12]}")


class _Start:
    """What train() and Job share: the process group, the settings, the flat layout of the
    model (and of its replicas and the evaluator's copy) and the accord job over it."""

    def __init__(self, module, settings, *, param_groups, buffers, evaluate, on_step, group, replicas, who):
        if isinstance(group, str) and group == "environment":
            group = accord.process_group()
        if group is not None and not group.join:  # a joiner gets its place from the running job
            if settings.setdefault("workers", group.world_size) != group.world_size:
                raise ValueError(f"{who}: workers={settings['workers']} but the job has "
                                 f"WORLD_SIZE {group.world_size} processes (one worker each)")
        elif replicas:
            settings.setdefault("workers", 1)
        elif settings.setdefault("workers", 1) != 1:
            raise ValueError(f"{who}: workers={settings['workers']} in one process; a Job is one worker "
                             "(run one process per worker under accord-launch, or use train())")
        self.config = accord.config(**settings)
        local_workers = 1 if group is not None else max(self.config.workers, 1)
        models = [module] + [copy.deepcopy(module) for _ in range(local_workers - 1)]
        evaluated = copy.deepcopy(module) if evaluate is not None else None
        self.flats = [FlatModule(m, _same_groups(param_groups, module, m), buffers) for m in models]
        if param_groups or self.flats[0].buffers:
            self.config.parameter_groups = self.flats[0].parameter_groups(
                buffers, self.config.learning_rate, self.config.weight_decay)
        if evaluated is not None:
            # The evaluator's copy has the models' layout: accord's parameters hold the buffers too.
            evaluation = FlatModule(evaluated, _same_groups(param_groups, module, evaluated), buffers)

            def evaluate_at(parameters):
                evaluation.parameters.copy_(torch.from_numpy(parameters))
                with torch.no_grad():
                    return float(evaluate(evaluation.module))
        self.job = accord.Job(self.flats[0].parameters, self.config, signature(module), group=group,
                              on_step=on_step, evaluate=evaluate_at if evaluated is not None else None)
        self.interrupted = False

    def finish(self, errors=()):
        """The JobResult, its final parameters and buffers in the first model."""
        try:
            result = self.job.wait()
        except RuntimeError as failure:
            if errors:
                raise errors[0] from failure
            raise
        if result.parameters.size:
            self.flats[0].parameters.copy_(torch.from_numpy(result.parameters))
        return result

    def stop_on_interrupt(self):
        """From the main thread, Ctrl-C (SIGINT) cancels the job: every worker stops after the
        current step, and the checkpoint is written when one is configured. A second Ctrl-C
        raises KeyboardInterrupt as usual. Returns what restores the previous handler."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def interrupted(signum, frame):
            self.interrupted = True
            signal.signal(signal.SIGINT, previous)
            self.job.cancel()

        signal.signal(signal.SIGINT, interrupted)
        return lambda: signal.signal(signal.SIGINT, previous) if not self.interrupted else None


def _same_groups(param_groups, module, copied):
    """`param_groups` with the module's parameters replaced by the copy's (same names)."""
    if not param_groups or copied is module:
        return param_groups
    by_name = dict(copied.named_parameters())
    names = {id(p): name for name, p in module.named_parameters()}
    return [dict(group, params=[by_name[names[id(p)]] for p in group["params"]]) for group in param_groups]


def train(module, loss_fn, *, evaluate=None, on_step=None, group="environment", param_groups=None,
          buffers="broadcast", **settings):
    """Trains `module` in place and returns accord's JobResult.

    loss_fn(model, request) returns the mean loss over the micro-batch of examples
    [request.first_position, +request.examples) (or a pair (loss, items) when the mean is over
    another count, e.g. tokens); accord calls backward through it. Every worker's stream of
    positions is disjoint. evaluate(model) -> float (optional) gives the held-out loss, on a
    copy of the model with the current parameters and buffers, from accord's evaluator thread.
    on_step(StepMetrics) sees every step. `param_groups`: torch's form (dicts of "params" and
    "lr" and/or "weight_decay"). `buffers`: broadcast (rank 0's each round), average or local.
    `settings` are JobConfig fields (algorithm, workers, steps, micro_batch, accumulation,
    optimizer, learning_rate, weight_decay, max_gradient_norm, checkpoint_path, resume_path, ...).
    `group`: a ProcessGroup, None for a job in this process, or read from the environment
    (accord-launch, torchrun, srun; also ACCORD_ELASTIC and ACCORD_JOIN) by default.
    Ctrl-C stops every worker after the current step and returns the result so far.
    """
    start = _Start(module, settings, param_groups=param_groups, buffers=buffers, evaluate=evaluate,
                   on_step=on_step, group=group, replicas=True, who="accord.torch.train")
    job, flats, errors = start.job, start.flats, []

    def drive(worker, flat):
        try:
            while (request := worker.next(into=flat.parameters)) is not None:
                flat.zero_gradients()
                out = loss_fn(flat.module, request)
                loss, items = out if isinstance(out, tuple) else (out, request.examples)
                loss.backward()
                flat.collect_gradients()
                worker.submit(flat.gradients, float(items), float(loss))
        except BaseException as error:  # the job fails with it; finish() below re-raises it
            errors.append(error)
            worker.fail(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=drive, args=(job.worker(i), flats[i]),
                                name=f"accord worker {i}") for i in range(1, job.local_workers)]
    restore = start.stop_on_interrupt()
    try:
        for thread in threads:
            thread.start()
        drive(job.worker(0), flats[0])
        for thread in threads:
            thread.join()
    finally:
        restore()
    return start.finish(errors)


class Job:
    """One worker of a job whose loop the app runs, as torch's DistributedDataParallel: per
    micro-batch, the app runs forward and loss.backward() on `module`, then step(loss), which
    hands the gradient to accord and returns once the parameters for the next micro-batch are
    in the module. ACCO's overlap and delay correction happen inside accord.

    Settings as train()'s (JobConfig fields, evaluate, on_step, group, param_groups, buffers).
    In one process the job has one worker; under accord-launch or torchrun, one per process.
    """

    def __init__(self, module, *, evaluate=None, on_step=None, group="environment", param_groups=None,
                 buffers="broadcast", **settings):
        if isinstance(group, str) and group == "environment":
            group = accord.process_group()
        self._module, self._settings, self._group = module, settings, group
        self._options = dict(evaluate=evaluate, on_step=on_step, group=group, param_groups=param_groups,
                             buffers=buffers)
        if settings.get("checkpoint_path") is None:  # state_dict() reads the checkpoint of the end
            self._scratch = tempfile.TemporaryDirectory(prefix="accord-job-")
            settings["checkpoint_path"] = os.path.join(self._scratch.name, "checkpoint")
        self._start = self._worker = self._request = self._result = None
        self.checkpoint_path = settings["checkpoint_path"]

    def _begin(self):
        self._start = _Start(self._module, self._settings, replicas=False, who="accord.torch.Job", **self._options)
        self._restore = self._start.stop_on_interrupt()
        self._flat = self._start.flats[0]
        self._worker = self._start.job.worker(0)
        self._request = self._worker.next(into=self._flat.parameters)

    @property
    def request(self):
        """The Request the current micro-batch answers (its position in accord's stream, the
        parameters' version; starts the job); None once the job is over."""
        if self._start is None:
            self._begin()
        return self._request

    @property
    def rank(self):
        """This worker's rank, for the app's sampler (0 in one process)."""
        return self._group.rank if self._group is not None and not self._group.join else 0

    @property
    def workers(self):
        """The job's worker count at the start, for the app's sampler (1 in one process)."""
        return self._group.world_size if self._group is not None and not self._group.join else 1

    def step(self, loss, items=None):
        """Hands this micro-batch's gradient (autograd's, from loss.backward()) and its mean
        `loss` over `items` examples (default: the job's micro_batch) to accord, zeroes the
        gradients, and waits for the parameters of the next micro-batch. False once the job is
        over (its steps done, or Ctrl-C): call finish()."""
        if self._result is not None:
            raise RuntimeError("accord.torch.Job.step: the job is over; call finish()")
        if self._start is None:
            self._begin()
        if self._request is None:
            return False
        self._flat.collect_gradients()
        try:
            self._worker.submit(self._flat.gradients, float(items if items is not None else self._request.examples),
                                float(loss))
        except BaseException as error:
            self._worker.fail(f"{type(error).__name__}: {error}")
            raise
        self._flat.zero_gradients()
        self._request = self._worker.next(into=self._flat.parameters)
        return self._request is not None

    def finish(self):
        """Waits for the end and returns the JobResult; the module holds the final parameters.
        Called with steps left (the app's data ran out), the job stops after the current step,
        this worker's remaining micro-batches of it carrying no gradient."""
        if self._result is not None:
            return self._result
        if self._start is None:
            self._begin()
        if self._request is not None:
            self._start.job.cancel()
            # The other workers wait for this one's micro-batches of the current step: they carry
            # no gradient.
            self._flat.gradients.zero_()
            while self._request is not None:
                self._worker.submit(self._flat.gradients, 0.0, 0.0)
                self._request = self._worker.next(into=self._flat.parameters)
        try:
            self._result = self._start.finish()
        finally:
            self._restore()
        return self._result

    def state_dict(self):
        """The job's checkpoint (accord's own format, recovery/checkpoint.hpp: parameters and
        buffers, the optimizer shards gathered, the schedule's step, the data position) once it
        is over: {"checkpoint": bytes, "steps", "data_position", "algorithm", "parameters"}."""
        if self._result is None:
            raise RuntimeError("accord.torch.Job.state_dict: the job is still running; call finish() first "
                               "(or read checkpoint_path, written every checkpoint_interval steps)")
        with open(self.checkpoint_path, "rb") as f:
            return _state_of(f.read(), self.checkpoint_path)

    def load_state_dict(self, state):
        """Continues from a state_dict() (of a job with any worker count), before the first step:
        the module takes its parameters and buffers, and accord its optimizer state and step."""
        if self._start is not None:
            raise RuntimeError("accord.torch.Job.load_state_dict: call it before the first step")
        values = torch.from_numpy(_state_of(state["checkpoint"], "state_dict")["parameters"])
        ordered, kept, _ = _layout(self._module, self._options["param_groups"], self._options["buffers"])
        if sum(t.numel() for t in ordered + kept) != len(values):
            raise ValueError(f"accord.torch.Job.load_state_dict: the checkpoint holds {len(values)} values, "
                             f"this module's parameters and buffers {sum(t.numel() for t in ordered + kept)}")
        self._resume = tempfile.NamedTemporaryFile(prefix="accord-resume-", delete=False)
        with self._resume:
            self._resume.write(state["checkpoint"])
        self._settings["resume_path"] = self._resume.name
        offset = 0
        with torch.no_grad():
            for tensor in ordered + kept:
                tensor.copy_(values[offset:offset + tensor.numel()].view_as(tensor))
                offset += tensor.numel()

    def __del__(self):
        resume = getattr(self, "_resume", None)
        if resume is not None:
            os.unlink(resume.name)


def _state_of(data, name):
    state = accord.read_checkpoint(data, name)
    return {"checkpoint": bytes(data), "steps": state["steps"], "data_position": state["data_position"],
            "algorithm": state["algorithm"], "parameters": state["parameters"]}
