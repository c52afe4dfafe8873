"""Train an existing torch.nn.Module with accord (ACCO, Distributed Lion, DDP, ...), in one of
two shapes.

accord runs the loop, asking for micro-batches by their position in the data stream:

    import accord.torch
    def loss_fn(model, request):          # the micro-batch of examples [first_position, +examples)
        x, y = my_batch(request.first_position, request.examples)
        return torch.nn.functional.cross_entropy(model(x), y)
    result = accord.torch.train(model, loss_fn, algorithm="acco", steps=300, micro_batch=32)

or the app keeps its own loop and DataLoader, as with DistributedDataParallel:

    with accord.torch.Job(model, algorithm="acco", steps=300, micro_batch=32, accumulation=4) as job:
        for x, y in loader:               # each batch one micro-batch; 4 of them make a step
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if not job.step(loss):        # the parameters for the next micro-batch are in place
                break                     # (False: the job's steps are done)
    result = job.finish()                 # the loader ran out first: the last completed step's

In one process train() runs `workers` replicas of the model on threads (a Job's worker(i) are
its replicas, for the app's own threads); under accord-launch or torchrun (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) each process is one worker, over UCX. The model's float32 CPU
parameters, their gradients and its floating-point buffers are views of flat float32 buffers,
which accord writes and reads in place: the model sees every new parameter without a copy. A CUDA module's flat buffers are on its device when
accord was built with CUDA (accord keeps that worker's parameters and gradient sums there), else
on the host. bfloat16 and float16 modules (also mixed with float32) compute with their own
dtype: accord keeps float32 master weights and optimizer state, widens their gradients and
rounds its parameters back into them each step (docs/python.md, "Precisions and devices").
"""
import copy
import os
import signal
import sys
import tempfile
import threading
import time

import torch

import accord
from accord._flat_module import FlatModule, signature
from accord._shard_optimizer import ShardOptimizer

__all__ = ["FlatModule", "Job", "signature", "train"]

def _torch_optimizer(module, settings, param_groups, who):
    """A torch.optim optimizer in settings["optimizer"] (taken out of them) and the param groups
    it implies (torch's form, its groups' parameters), or None and `param_groups`. One error for
    settings that are the optimizer's, and for trainable parameters it does not hold."""
    optimizer = settings.get("optimizer")
    if not isinstance(optimizer, torch.optim.Optimizer):
        return None, param_groups
    del settings["optimizer"]
    name = type(optimizer).__name__
    if param_groups is not None:
        raise ValueError(f"{who}: param_groups and a torch optimizer ({name}): its param groups are the groups")
    theirs = [key for key in ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay") if key in settings]
    if theirs:
        raise ValueError(f"{who}: {', '.join(theirs)} belong to the torch optimizer ({name}): set them on it")
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for parameter_name, p in module.named_parameters():
        if p.requires_grad and id(p) not in held:
            raise ValueError(f"{who}: parameter '{parameter_name}' is trainable but in none of the {name}'s param "
                             "groups: add it, or freeze it (requires_grad_(False))")
    settings.setdefault("cosine", False)  # the groups' own rates, as torch steps them, unless asked for a schedule
    return optimizer, [{"params": group["params"]} for group in optimizer.param_groups]


class _Start:
    """What train() and Job share: the process group, the settings, the flat layout of the
    model (and of its replicas and the evaluator's copy), with a torch optimizer the
    ShardOptimizer that steps the shards, and, once launched, the accord job over them.
    `scratch_checkpoint`: without a checkpoint_path, the job's end is written to a temporary
    one (Job.state_dict() reads it; a torch optimizer's state comes from it)."""

    def __init__(self, module, settings, *, optimizer, param_groups, buffers, loss_scale, evaluate, on_step, group,
                 status_port, log_interval, log_unit, scratch_checkpoint, who):
        if isinstance(group, str) and group == "environment":
            group = accord.process_group()
        if group is not None and not group.join:  # a joiner gets its place from the running job
            if settings.setdefault("workers", group.world_size) != group.world_size:
                raise ValueError(f"{who}: workers={settings['workers']} but the job has "
                                 f"WORLD_SIZE {group.world_size} processes (one worker each)")
        settings.setdefault("workers", 1)
        if scratch_checkpoint and settings.get("checkpoint_path") is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="accord-job-")
            settings["checkpoint_path"] = os.path.join(self._scratch.name, "checkpoint")
        if not (isinstance(log_interval, int) and log_interval >= 0):
            raise ValueError(f"{who}: log_interval={log_interval!r} must be an int >= 0 (0: no progress line)")
        if status_port is not None and not (isinstance(status_port, int) and 0 <= status_port <= 65535):
            raise ValueError(f"{who}: status_port={status_port!r} must be a port in 0..65535 (0: a free one)")
        self.config = accord.config(**settings)
        self.group, self.on_step, self.module = group, on_step, module
        self.status_port, self.log_interval, self.log_unit = status_port, log_interval, log_unit
        local_workers = 1 if group is not None else max(self.config.workers, 1)
        models = [module] + [copy.deepcopy(module) for _ in range(local_workers - 1)]
        evaluated = copy.deepcopy(module) if evaluate is not None else None
        self.flats = [FlatModule(m, _same_groups(param_groups, module, m), buffers, loss_scale) for m in models]
        self.shard_optimizer = None
        if optimizer is not None:
            self.shard_optimizer = ShardOptimizer(optimizer, [(begin, end) for _, begin, end in self.flats[0].group_settings])
            self.config.optimizer = self.shard_optimizer.name
            self.config.learning_rate = float(optimizer.defaults["lr"])  # the schedule's peak: factor 1 there
        if param_groups or self.flats[0].buffers:
            groups = self.flats[0].parameter_groups(buffers, self.config.learning_rate, self.config.weight_decay)
            # A torch optimizer's groups are its own: accord's groups only carry the buffers.
            self.config.parameter_groups = [g for g in groups
                                            if self.shard_optimizer is None or g.role != "trained"]
        self.evaluate_at = None
        if evaluated is not None:
            # The evaluator's copy has the models' layout: accord's parameters hold the buffers too.
            evaluation = FlatModule(evaluated, _same_groups(param_groups, module, evaluated), buffers)

            def evaluate_at(parameters):
                evaluation.parameters.copy_(torch.from_numpy(parameters))
                evaluation.to_module()
                with torch.no_grad():
                    return float(evaluate(evaluation.module))
            self.evaluate_at = evaluate_at
        self.job, self.interrupted = None, False
        self._finishing, self._result, self._failure = threading.Lock(), None, None

    def check(self):
        """ValueError naming what accord would refuse of the job, without starting it."""
        accord.Job.check(self.flats[0].parameters, self.config, signature(self.module), group=self.group,
                         evaluates=self.evaluate_at is not None, optimizer=self.shard_optimizer)

    def launch(self):
        self.job = accord.Job(self.flats[0].parameters, self.config, signature(self.module), group=self.group,
                              on_step=self.on_step, evaluate=self.evaluate_at, optimizer=self.shard_optimizer,
                              status_port=self.status_port, log_interval=self.log_interval, log_unit=self.log_unit,
                              on_checkpoint=self._optimizer_state_from if self.shard_optimizer is not None else None)

    def _optimizer_state_from(self, path, step):
        """The torch optimizer's state becomes the checkpoint's, gathered from the shards: after
        each checkpoint accord writes (at the end, and every checkpoint_interval steps), on the
        coordinator's thread (rank 0's, between processes)."""
        with open(path, "rb") as f:
            state = accord.read_checkpoint(f.read(), path)
        self.shard_optimizer.load_state(state["optimizer"], state["optimizer_step"], self.flats[0].trained_offsets())

    def finish(self, errors=()):
        """The JobResult, its final parameters and buffers in every local model. Every local
        worker's thread may call it: the first waits, the others get the same result (or
        failure)."""
        with self._finishing:
            if self._result is None and self._failure is None:
                try:
                    self._result = self._ended()
                except BaseException as failure:
                    self._failure = failure
        if self._failure is not None:
            if errors and isinstance(self._failure, RuntimeError):  # the app's error failed the job
                raise errors[0] from self._failure
            if self.interrupted and isinstance(self._failure, RuntimeError):  # Ctrl-C before the job started
                raise KeyboardInterrupt(str(self._failure)) from self._failure
            raise self._failure
        return self._result

    def _ended(self):
        result = self.job.wait()
        if result.parameters.size:
            for flat in self.flats:
                flat.parameters.copy_(torch.from_numpy(result.parameters))
                flat.to_module()
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
          buffers="broadcast", loss_scale=1.0, status_port=None, log_interval=0, log_unit="ex", **settings):
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
    `loss_scale`: backward runs through the loss times it (float16's small gradients would
    underflow), and accord divides the gradients by it in float32; a bfloat16 or float16
    gradient (or a scaled one) that is inf or NaN raises FloatingPointError naming the parameter.
    `group`: a ProcessGroup, None for a job in this process, or read from the environment
    (accord-launch, torchrun, srun; also ACCORD_ELASTIC and ACCORD_JOIN) by default.
    `optimizer`: accord's by name (adamw, lion, sgd), or a torch.optim optimizer over the
    module's parameters, whose class and param groups' settings step each worker's shard
    (docs/python.md, "A torch.optim optimizer"); its state_dict() holds the job's final state.
    `status_port` (0: a free port): accord-train's status page at http://HOST:PORT/ and its
    Prometheus metrics at /metrics, from the process that leads the job. `log_interval`:
    accord-train's progress line every this many steps (0: none), the throughput in
    `log_unit`/s ("ex": examples; "tok" where the items are tokens).
    Ctrl-C stops every worker after the current step and returns the result so far.
    """
    optimizer, param_groups = _torch_optimizer(module, settings, param_groups, "accord.torch.train")
    settings.setdefault("accumulation_mode", "growing-steps")  # accord runs the loop: ACCO's accumulation grows while a round flies
    start = _Start(module, settings, optimizer=optimizer, param_groups=param_groups, buffers=buffers,
                   loss_scale=loss_scale, evaluate=evaluate, on_step=on_step, group=group, status_port=status_port,
                   log_interval=log_interval, log_unit=log_unit, scratch_checkpoint=optimizer is not None,
                   who="accord.torch.train")
    start.launch()
    job, flats, errors = start.job, start.flats, []

    def drive(worker, flat):
        try:
            while (request := flat.next_request(worker)) is not None:
                flat.zero_gradients()
                out = loss_fn(flat.module, request)
                loss, items = out if isinstance(out, tuple) else (out, request.examples)
                (loss * loss_scale if loss_scale != 1 else loss).backward()
                flat.collect_gradients()
                flat.submit(worker, float(items), float(loss))
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

    A step is `accumulation` of the app's micro-batches, as torch's gradient accumulation
    (accumulation_mode="fixed", the default here): N batches make N / accumulation steps on
    every run, and `steps` counts those. ACCO splits them between its estimate and real stages
    (estimate_accumulation of them, default half) and needs at least 2 (its default here).
    accumulation_mode="growing" keeps ACCO's accumulation growing while a round is in flight
    (at most max_accumulation): fewer, larger steps, a count that depends on timing, and a
    learning-rate schedule that counts examples (a nominal step's micro-batches). The job
    says at its start how it counts steps (stderr, rank 0). When the data runs out first,
    finish() (or leaving a `with` block, also on an exception) ends the job at the last completed
    step: the module keeps that step's parameters and buffers, and no optimizer step is taken on
    a partial step's gradient.

    Settings as train()'s (JobConfig fields, evaluate, on_step, group, param_groups, buffers,
    loss_scale: the app runs backward through `loss * job.loss_scale`; optimizer: accord's by
    name or the app's torch.optim optimizer, which accord then steps in place of the app;
    status_port, log_interval, log_unit). Job(...) checks them all, as accord would at the
    start: ValueError or TypeError naming what is wrong, before any step.
    Under accord-launch or torchrun the job has one worker per process. In one process it has
    `workers` (default 1): this Job is worker 0, on `module`; worker(i) is worker i, on a copy
    of it, for a thread of the app's to drive the same way.
    """

    def __init__(self, module, *, evaluate=None, on_step=None, group="environment", param_groups=None,
                 buffers="broadcast", loss_scale=1.0, status_port=None, log_interval=0, log_unit="ex", **settings):
        if isinstance(group, str) and group == "environment":
            group = accord.process_group()
        optimizer, param_groups = _torch_optimizer(module, settings, param_groups, "accord.torch.Job")
        self._module, self._group, self._index, self.loss_scale = module, group, 0, loss_scale
        if (settings.get("accumulation_mode", "fixed") == "fixed" and "accumulation" not in settings
                and settings.get("algorithm", "acco").startswith("acco")):
            settings["accumulation"] = 2  # one micro-batch per stage: the least a fixed ACCO step takes
        self._prepared = _Start(module, settings, evaluate=evaluate, on_step=on_step, group=group, optimizer=optimizer,
                                param_groups=param_groups, buffers=buffers, loss_scale=loss_scale,
                                status_port=status_port, log_interval=log_interval, log_unit=log_unit,
                                scratch_checkpoint=True, who="accord.torch.Job")
        self._prepared.check()
        self.checkpoint_path = self._prepared.config.checkpoint_path
        self._start = self._worker = self._request = self._result = None
        self._replicas = []
        self._loop_seconds = dict.fromkeys(("gradients", "submit", "parameters", "end"), 0.0)
        self._micro_batches = 0

    def _begin(self):
        self._prepared.launch()
        self._start = self._prepared
        self._restore = self._start.stop_on_interrupt()
        self._flat = self._start.flats[0]
        self._worker = self._start.job.worker(0)
        if self.rank == 0:
            print(self._start.job.step_counting, file=sys.stderr)
        self._request = self._flat.next_request(self._worker)
        self._replicas = [self._replica(index) for index in range(1, self._start.job.local_workers)]

    def _replica(self, index):
        """Local worker `index` (> 0) as a Job of its own: its model copy, its requests."""
        replica = Job.__new__(Job)
        replica._module, replica._group, replica._index, replica.loss_scale = (
            self._start.flats[index].module, self._group, index, self.loss_scale)
        replica._prepared, replica._start, replica._result, replica._replicas = None, self._start, None, []
        replica.checkpoint_path, replica._restore = self.checkpoint_path, lambda: None
        replica._loop_seconds, replica._micro_batches = dict.fromkeys(self._loop_seconds, 0.0), 0
        replica._flat, replica._worker = self._start.flats[index], self._start.job.worker(index)
        replica._request = replica._flat.next_request(replica._worker)
        return replica

    def worker(self, index):
        """Local worker `index` of a job in one process (starts the job): 0 is this Job, on
        `module`; i > 0 a Job with the same step(), request and finish() on its own copy of the
        module (its `module`), for an app thread of its own. Every worker's loop runs until its
        step() returns False (or it calls finish()); each finish() returns the job's JobResult,
        and every copy then holds the final parameters. Take them before starting the threads."""
        if self._start is None:
            self._begin()
        if index == self._index:
            return self
        if self._index != 0 or not 0 < index <= len(self._replicas):
            raise IndexError(f"accord.torch.Job.worker: no local worker {index} (this process has "
                             f"{1 + len(self._replicas)}; worker() is the first Job's)")
        return self._replicas[index - 1]

    @property
    def module(self):
        """The module this worker computes with (worker(i)'s own copy)."""
        return self._module

    @property
    def status_port(self):
        """The status page's port, where this process serves one (starts the job); else None."""
        if self._start is None:
            self._begin()
        return self._start.job.status_port

    @property
    def request(self):
        """The Request the current micro-batch answers (its position in accord's stream, the
        parameters' version; starts the job); None once the job is over."""
        if self._start is None:
            self._begin()
        return self._request

    @property
    def rank(self):
        """This worker's rank, for the app's sampler (in one process: its index)."""
        return self._group.rank if self._group is not None and not self._group.join else self._index

    @property
    def workers(self):
        """The job's worker count at the start, for the app's sampler."""
        if self._group is not None and not self._group.join:
            return self._group.world_size
        return (self._start or self._prepared).config.workers

    def step(self, loss, items=None):
        """Hands this micro-batch's gradient (autograd's, from loss.backward()) and its mean
        `loss` over `items` examples (default: the job's micro_batch) to accord, zeroes the
        gradients, and waits for the parameters of the next micro-batch. False once the job is
        over (its steps done, or Ctrl-C): the module then holds the final parameters and buffers,
        and finish() returns the result. FloatingPointError (the job fails) naming a bfloat16 or
        float16 parameter whose gradient is inf or NaN."""
        if self._result is not None:
            raise RuntimeError("accord.torch.Job.step: the job is over; call finish()")
        if self._start is None:
            self._begin()
        if self._request is None:
            return False
        clock, spent = time.perf_counter, self._loop_seconds
        started = clock()
        try:
            self._flat.collect_gradients()
            collected = clock()
            self._flat.submit(self._worker, float(items if items is not None else self._request.examples), float(loss))
        except BaseException as error:
            self._worker.fail(f"{type(error).__name__}: {error}")
            raise
        self._flat.zero_gradients()
        submitted = clock()
        self._request = self._flat.next_request(self._worker)
        spent["gradients"] += collected - started
        spent["submit"] += submitted - collected
        spent["parameters" if self._request is not None else "end"] += clock() - submitted
        self._micro_batches += 1
        if self._request is None:
            self.finish()  # the final parameters into the module
        return self._request is not None

    @property
    def loop_seconds(self):
        """Where this worker's step() calls spent their time, in seconds summed over its
        micro-batches (`micro_batches` of them): `gradients`, autograd's gradients copied into
        accord's flat buffer (and checked finite); `submit`, the hand-off to accord and the
        gradients zeroed; `parameters`, the wait for the next micro-batch's parameters (the
        round, where one was due) and their copy into the module; `end`, the last step()'s wait
        for the job's end (its last rounds and deferred evaluations). The rest of the loop is
        the app's own forward and backward."""
        return dict(self._loop_seconds, micro_batches=self._micro_batches)

    def finish(self):
        """Waits for the end and returns the JobResult; the module holds the final parameters
        and buffers. Called with steps left (the app's data ran out, or its loop stopped), the
        job ends at the last step whose micro-batches every worker submitted: a step in progress
        is dropped, with no optimizer step on its partial gradient, on every worker."""
        if self._result is not None:
            return self._result
        if self._start is None:
            self._begin()
        if self._request is not None:
            self._worker.end()
            self._request = None
        try:
            self._result = self._start.finish()
        finally:
            self._restore()
        return self._result

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        """finish(), also when the loop raised (its error goes on): the module keeps the last
        completed step."""
        if error is None:
            self.finish()
        elif self._result is None and self._start is not None:
            try:
                self.finish()
            except Exception as failure:  # the job's own failure, from the loop's error
                error.__context__ = failure
        return False

    def state_dict(self):
        """The job's checkpoint (accord's own format, recovery/checkpoint.hpp: parameters and
        buffers, the optimizer shards gathered, the schedule's step, the data position) once it
        is over, and the module's buffers accord does not hold (BatchNorm's num_batches_tracked;
        all of them with buffers="local"): {"checkpoint": bytes, "steps", "data_position",
        "algorithm", "parameters", "optimizer", "buffers"}; parameters (the float32 master
        weights, in the flat layout) and optimizer (float32, a row per slot: AdamW m then v) are
        numpy arrays, buffers {name: tensor}."""
        if self._result is None:
            raise RuntimeError("accord.torch.Job.state_dict: the job is still running; call finish() first "
                               "(or read checkpoint_path, written every checkpoint_interval steps)")
        with open(self.checkpoint_path, "rb") as f:
            state = _state_of(f.read(), self.checkpoint_path)
        state["buffers"] = {name: b.detach().clone() for name, b in _own_buffers(self._flat)}
        return state

    def load_state_dict(self, state):
        """Continues from a state_dict() (of a job with any worker count), before the first step:
        the module takes its parameters and buffers (rounded to its dtype), and accord the float32
        master weights, its optimizer state and step. The job's settings are checked against the
        checkpoint here."""
        if self._start is not None:
            raise RuntimeError("accord.torch.Job.load_state_dict: call it before the first step")
        values = torch.from_numpy(_state_of(state["checkpoint"], "state_dict")["parameters"])
        flats = self._prepared.flats
        if flats[0].parameters.numel() != len(values):
            raise ValueError(f"accord.torch.Job.load_state_dict: the checkpoint holds {len(values)} values, "
                             f"this module's parameters and buffers {flats[0].parameters.numel()}")
        for flat in flats:
            own = dict(_own_buffers(flat))
            for name, value in state.get("buffers", {}).items():
                if name not in own:
                    raise ValueError(f"accord.torch.Job.load_state_dict: the state's buffer '{name}' is none of "
                                     "this module's buffers that accord does not hold")
                own[name].copy_(value)
            flat.parameters.copy_(values.to(flat.parameters.device))
            flat.to_module()
        self._resume = tempfile.NamedTemporaryFile(prefix="accord-resume-", delete=False)
        with self._resume:
            self._resume.write(state["checkpoint"])
        self._prepared.config.resume_path = self._resume.name
        self._prepared.check()

    def __del__(self):
        resume = getattr(self, "_resume", None)
        if resume is not None:
            os.unlink(resume.name)


def _own_buffers(flat):
    """(name, buffer) of the buffers of `flat`'s module that accord does not hold."""
    held = {id(b) for b in flat.buffers}
    return [(name, b) for name, b in flat.module.named_buffers() if id(b) not in held]


def _state_of(data, name):
    state = accord.read_checkpoint(data, name)
    return {"checkpoint": bytes(data), "steps": state["steps"], "data_position": state["data_position"],
            "algorithm": state["algorithm"], "parameters": state["parameters"], "optimizer": state["optimizer"]}
