"""The Python module over a torch model (registered with ctest, one test per case):
  ddp_equals_adamw   accord's DDP over 2 workers x 2 micro-batches equals torch's AdamW on the
                     big batch of the same examples (2 threads here, or 2 processes when run
                     under accord-launch -n 2)
  loop_equals_torch  examples/torch_loop: the app's own loop with accord.torch.Job and DDP (param
                     groups without decay on biases, a frozen layer, clipping at norm 0.5) equals
                     the plain torch script on the big batch (1 process, or 2 under accord-launch),
                     and with ACCO the loss falls
  acco_and_dlion     ACCO and Distributed Lion train: the loss falls
  buffers            BatchNorm's running statistics broadcast from rank 0, averaged or local, seen
                     by the evaluator; frozen parameters neither trained nor decayed; with DDP and
                     Distributed Lion (2 threads, or 2 processes under accord-launch -n 2)
  epochs             the app's epoch loop with a Job (ddp, acco, dlion-mavo): N batches make
                     N / accumulation steps on every run; when the data runs out mid-step, or the
                     loop raises, the module keeps the last step's parameters and BatchNorm
                     statistics, those of a job of exactly that many steps
  checkpoints        Job.state_dict() / load_state_dict() continue a job exactly, also with another
                     worker count, BatchNorm's buffers included (num_batches_tracked, local ones);
                     Ctrl-C stops train() after the step, with its checkpoint
  precisions         bfloat16 and float16 modules (mixed with float32): accord's float32 master
                     weights and AdamW state equal the mixed-precision recipe by hand (float16
                     with a loss scale) at a learning rate their dtype would lose, the module
                     holds them rounded, a checkpoint resumes exactly, bfloat16 buffers are
                     synchronised, ACCO trains; float16 overflow stops the job naming the parameter
  devices            where FlatModule keeps accord's flat buffers: a CPU module's on the CPU (views,
                     not pinned, without asking about CUDA), a CUDA module's on its device when
                     accord can use it, else on pinned host memory with one note saying why
  cuda_module        CUDA modules (float32, bfloat16, float16) equal the same recipe on the GPU,
                     their flat buffers and accord's sums on the GPU (with a CUDA build of accord),
                     ACCO trains one; skipped without a GPU (scripts/gpu-check.sh runs it)
  bad_input          wrong dtype, device, length, memory layout, settings: one clear Python
                     exception, and the job goes on
  app_error          an exception in the app's loss, evaluate or on_step ends the job and is
                     raised from train(), no hang
  gradient_buckets   DDP's buckets fed by autograd's hooks while backward runs: bit for bit the
                     job without buckets (train() and the app's own loop, with BatchNorm), the
                     reports arrive in bucket-sized runs, and a second backward in one micro-batch
                     is one error naming the parameter (2 threads, or 2 processes under
                     accord-launch -n 2)
  status_page        status_port serves accord-train's status page and Prometheus /metrics from
                     Python (fetched with urllib), log_interval prints accord-train's progress
                     line; a port in use is one ValueError naming status_port
  early_errors       Job(...) checks its settings as accord will (unknown ones, bad values, an
                     algorithm a torch optimizer cannot run, a missing resume file), and
                     load_state_dict the checkpoint: one exception, before any step
  job_workers        Job(workers=2) in one process, its two workers driven by two app threads,
                     equals train() with 2 workers bit for bit; both copies end with the result
  pip_install        pyproject.toml: pip install --no-build-isolation --target DIR installs a
                     package that imports from DIR and trains, accord.__version__ is CMake's
                     project version, and its accord-launch console script runs a .py script
                     with that Python
  rendezvous_interrupt  rank 0 of 2 without its rank 1 (its own loop's accord.Job, and
                     accord.torch.train) names rank 1 on stderr every 10 s, and Ctrl-C ends the
                     wait at once with KeyboardInterrupt (not at the 300 s rendezvous timeout)
  settings           JobConfig, TopologyOptions, MembershipChange, ParameterGroup and ProcessGroup
                     have a property for every field of C++'s structs (their lists in
                     accord/config_fields.hpp), and StepMetrics, JobResult and what they hold
                     for every field of theirs (accord/metrics_fields.hpp); accord.config sets
                     nested ones, and process_group() reads the environment
Run: PYTHONPATH=build/python /usr/bin/python3 tests/test_python.py CASE
Without torch or numpy it exits 1 saying so ($ACCORD_MISSING_EXIT under ctest: skipped)."""
import importlib.util
import itertools
import os
import re
import signal
import sys
import tempfile
import threading

import accord

accord.require("numpy", "torch")
import numpy  # noqa: E402
import torch  # noqa: E402

import accord.torch  # noqa: E402

torch.set_num_threads(1)
INPUTS, CLASSES, EXAMPLES = 8, 4, 512


def data():
    """A fixed classification task: labels from a random linear map of the inputs."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(EXAMPLES, INPUTS, generator=g)
    y = (x @ torch.randn(INPUTS, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(INPUTS, 16), torch.nn.Tanh(), torch.nn.Linear(16, CLASSES))


def examples(x, y, first, count):
    index = torch.arange(first, first + count) % EXAMPLES
    return x[index], y[index]


def mean_loss(net, x, y, first, count):
    xb, yb = examples(x, y, first, count)
    return torch.nn.functional.cross_entropy(net(xb), yb)


def ddp_equals_adamw():
    x, y = data()
    workers, accumulation, micro_batch, steps = 2, 2, 4, 6
    adamw = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    reference = model()
    optimizer = torch.optim.AdamW(reference.parameters(), **adamw)
    big_batch = workers * accumulation * micro_batch
    for step in range(steps):
        # Worker r's micro-batch k covers positions [(k * workers + r) * micro_batch, +micro_batch):
        # one step's are the big batch [step * big_batch, +big_batch).
        optimizer.zero_grad()
        mean_loss(reference, x, y, step * big_batch, big_batch).backward()
        optimizer.step()

    trained = model()
    result = accord.torch.train(
        trained, lambda net, r: mean_loss(net, x, y, r.first_position, r.examples),
        algorithm="ddp", workers=workers, steps=steps, micro_batch=micro_batch, accumulation=accumulation,
        max_accumulation=accumulation, optimizer="adamw", learning_rate=adamw["lr"], beta1=adamw["betas"][0],
        beta2=adamw["betas"][1], epsilon=adamw["eps"], weight_decay=adamw["weight_decay"], cosine=False,
        eval_interval=0)
    reports_steps = accord.process_group() is None or accord.process_group().rank == 0  # rank 0 reports
    assert result.replicas_identical and len(result.steps) == (steps if reports_steps else 0)
    if reports_steps:  # CPU by thread role reaches Python (this loop's model runs on Python's threads: "other")
        roles = ("compute", "communicator", "evaluator", "actors", "transport", "other")
        assert sum(getattr(result.cpu, role) for role in roles) > 0
        assert all(getattr(step.cpu, role) >= 0 for step in result.steps for role in roles)
    largest = 0.0
    for mine, theirs in zip(trained.parameters(), reference.parameters()):
        largest = max(largest, (mine - theirs).abs().max().item())
        assert torch.allclose(mine, theirs, rtol=1e-5, atol=2e-6), f"parameters differ by up to {largest}"
    # The model's parameters are views of accord's flat buffer, and training moved them.
    assert not torch.allclose(next(trained.parameters()), next(model().parameters()))
    print(f"ddp == AdamW on the big batch after {steps} steps (largest difference {largest:.2e})")


def acco_and_dlion():
    x, y = data()
    for algorithm in ("acco", "dlion-mavo", "acco-dlion"):
        net = model()
        evaluated = []
        result = accord.torch.train(
            net, lambda m, r: mean_loss(m, x, y, r.first_position, r.examples), group=None,
            evaluate=lambda m: mean_loss(m, x, y, 0, EXAMPLES).item(), on_step=lambda s: evaluated.append(s.step),
            algorithm=algorithm, workers=2, steps=40, micro_batch=16, max_accumulation=2,
            learning_rate=0.01 if "dlion" in algorithm else 0.03, eval_interval=20)
        first = sum(s.train_loss for s in result.steps[:3]) / 3
        last = sum(s.train_loss for s in result.steps[-3:]) / 3
        print(f"{algorithm}: train loss {first:.4f} -> {last:.4f}, eval {result.final_eval_loss:.4f}")
        assert len(evaluated) == 40 and result.replicas_identical
        assert last < 0.8 * first, f"{algorithm}: the loss did not fall ({first} -> {last})"
        assert result.final_eval_loss < mean_loss(model(), x, y, 0, EXAMPLES).item()
        # The trained model holds the job's final parameters.
        assert numpy.array_equal(accord.torch.FlatModule(net).parameters.numpy(), result.parameters)


def raises(kind, words, call):
    try:
        call()
    except kind as error:
        assert words in str(error), f"{kind.__name__} '{error}' does not say '{words}'"
        print(f"{kind.__name__}: {error}")
        return
    raise AssertionError(f"no {kind.__name__} ({words})")


def bad_input():
    raises(TypeError, "unknown setting 'stepz'", lambda: accord.config(stepz=3))
    raises(TypeError, "steps", lambda: accord.config(steps="many"))
    raises(ValueError, "algorithm", lambda: accord.Job(numpy.zeros(4, numpy.float32),
                                                       accord.config(algorithm="nope", workers=1), "x"))
    raises(TypeError, "float32", lambda: accord.Job(numpy.zeros(4), accord.config(workers=1), "x"))
    n = 6
    job = accord.Job(numpy.zeros(n, numpy.float32), accord.config(algorithm="ddp", workers=1, steps=2,
                                                                  eval_interval=0), "six zeros")
    worker = job.worker(0)
    raises(IndexError, "no local worker 1", lambda: job.worker(1))
    raises(ValueError, "without a request", lambda: worker.submit(numpy.zeros(n, numpy.float32), 1, 0.5))
    parameters = torch.empty(n)
    raises(ValueError, "parameters are 6", lambda: worker.next(into=torch.empty(n + 1)))
    read_only = numpy.zeros(n, numpy.float32)
    read_only.setflags(write=False)
    raises(ValueError, "cannot be written", lambda: worker.next(into=read_only))
    while (request := worker.next(into=parameters)) is not None:
        raises(TypeError, "torch.float64", lambda: worker.submit(torch.zeros(n, dtype=torch.float64), 1, 0.5))
        raises(TypeError, "format 'd'", lambda: worker.submit(numpy.zeros(n), 1, 0.5))
        raises(ValueError, "5 values", lambda: worker.submit(torch.zeros(n - 1), 1, 0.5))
        raises(ValueError, "not contiguous", lambda: worker.submit(torch.zeros(2 * n)[::2], 1, 0.5))
        raises(ValueError, "not contiguous", lambda: worker.submit(numpy.zeros(2 * n, numpy.float32)[::2], 1, 0.5))
        raises(TypeError, "got list", lambda: worker.submit([0.0] * n, 1, 0.5))
        raises(ValueError, "items", lambda: worker.submit(torch.zeros(n), -1, 0.5))
        raises(ValueError, "a tensor on meta, accord takes CPU and CUDA tensors",
               lambda: worker.submit(torch.zeros(n, device="meta"), 1, 0.5))
        worker.submit(torch.ones(n), 1, 0.5)  # after all that, a good gradient goes through
    result = job.wait()
    # Each step moved every parameter against the all-ones gradient.
    assert len(result.steps) == 2 and (result.parameters < 0).all()
    raises(RuntimeError, "wait", job.wait)
    net = torch.nn.Linear(2, 2).double()
    raises(TypeError, "parameter 'weight' is torch.float64; accord trains float32, bfloat16 and float16",
           lambda: accord.torch.train(net, None, group=None))
    net = torch.nn.Linear(2, 2)
    net.bias = torch.nn.Parameter(torch.zeros(2, dtype=torch.complex64))
    raises(TypeError, "parameter 'bias' is torch.complex64", lambda: accord.torch.Job(net, group=None).step(0.0))
    net = model()
    net.register_buffer("scale", torch.ones(3, dtype=torch.float64))
    raises(TypeError, "buffer 'scale' is torch.float64", lambda: accord.torch.train(net, None, group=None))
    spread = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh(), torch.nn.Linear(2, 2, device="meta"))
    raises(ValueError, "parameter '2.weight' is on meta but parameter '0.weight' on cpu; accord trains a module on "
           "one device", lambda: accord.torch.train(spread, None, group=None))
    raises(ValueError, "parameter 'weight' is on meta; accord trains modules on the CPU or a CUDA device",
           lambda: accord.torch.train(torch.nn.Linear(2, 2, device="meta"), None, group=None))
    raises(ValueError, "loss_scale=0", lambda: accord.torch.train(model(), None, group=None, loss_scale=0))
    raises(ValueError, "WORLD_SIZE 2", lambda: accord.torch.train(model(), None, group=group_of(2), workers=3))
    net = model()
    raises(ValueError, "param group 0 sets betas", lambda: accord.torch.train(
        net, None, group=None, param_groups=[{"params": [net[0].bias], "betas": (0.9, 0.9)}]))
    raises(ValueError, "is in two param groups", lambda: accord.torch.train(
        net, None, group=None, param_groups=[{"params": [net[0].bias]}, {"params": [net[0].bias]}]))
    raises(ValueError, "buffers='shared'", lambda: accord.torch.train(net, None, group=None, buffers="shared"))
    raises(ValueError, "workers=3 but the job has WORLD_SIZE 2", lambda: accord.torch.Job(
        net, group=group_of(2), workers=3))
    raises(ValueError, "need a sharded-optimizer or sign-vote algorithm", lambda: accord.torch.train(
        net, None, group=None, algorithm="ddp", topology="local-sgd", max_gradient_norm=1.0))
    raises(ValueError, "overlaps", lambda: accord.Job(numpy.zeros(4, numpy.float32), accord.config(
        algorithm="ddp", workers=1, parameter_groups=[dict(begin=0, end=3), dict(begin=2, end=4)]), "x"))
    raises(RuntimeError, "still running", accord.torch.Job(model(), group=None, steps=2).state_dict)


def group_of(world_size):
    group = accord.ProcessGroup()
    group.world_size = world_size
    return group


def app_error():
    x, y = data()

    def loss(net, request):
        if request.index == 3:
            raise ZeroDivisionError("the app's own failure")
        return mean_loss(net, x, y, request.first_position, request.examples)

    raises(ZeroDivisionError, "the app's own failure",
           lambda: accord.torch.train(model(), loss, group=None, algorithm="acco", workers=2, steps=20))

    def broken_evaluate(net):
        raise KeyError("no held-out data")

    raises(RuntimeError, "evaluate raised KeyError", lambda: accord.torch.train(
        model(), lambda net, r: mean_loss(net, x, y, r.first_position, r.examples), group=None,
        evaluate=broken_evaluate, algorithm="ddp", workers=2, steps=20, eval_interval=5))

    stop = RuntimeError("stop from on_step")

    def on_step(step):
        raise stop

    raises(RuntimeError, "on_step raised", lambda: accord.torch.train(
        model(), lambda net, r: mean_loss(net, x, y, r.first_position, r.examples), group=None,
        on_step=on_step, algorithm="ddp", workers=2, steps=20))


def properties(cls):
    return {name for name in dir(cls) if not name.startswith("_") and isinstance(getattr(cls, name), property)}


def settings():
    # Each class's properties are exactly its field list's (the C++ test checks the lists against
    # the structs); pointers and callbacks have no Python form and are named apart.
    for cls, cpp_only in ((accord.JobConfig, {"app_optimizer", "stop_requested", "on_checkpoint_written"}),
                          (accord.TopologyOptions, set()), (accord.MembershipChange, set()), (accord.ParameterGroup, set()),
                          (accord.ProcessGroup, {"leave_requested", "on_event"})):
        assert properties(cls) == set(cls._fields), f"{cls.__name__}: {properties(cls) ^ set(cls._fields)}"
        assert set(cls._cpp_only) == cpp_only, f"{cls.__name__}: {cls._cpp_only}"
        instance = cls()
        for name in cls._fields:  # every property reads and writes back
            setattr(instance, name, getattr(instance, name))
    for cls in (accord.StepMetrics, accord.JobResult, accord.WorkerSeconds, accord.ThreadCpu, accord.EdgeTraffic):
        assert properties(cls) == set(cls._fields), f"{cls.__name__}: {properties(cls) ^ set(cls._fields)}"
    for name in ("epoch", "consensus_distance", "staleness", "worker_gradients", "edge_bytes", "per_worker", "cpu"):
        assert name in accord.StepMetrics._fields, name
    for name in ("gradient_buffers", "state_bytes_per_worker", "peak_bytes_per_worker", "minimum_bytes_per_worker",
                 "kept_bytes_per_worker", "coordinated", "steps", "parameters"):
        assert name in accord.JobResult._fields, name
    assert accord.EdgeTraffic._fields == ("from_", "to", "bytes")  # `from` is a Python keyword
    for name in ("topology_settings", "eval_examples", "membership", "keep_interval", "resident_on_host",
                 "device_rounds"):
        assert name in accord.JobConfig._fields, name
    for name in ("elastic", "join", "heartbeat_timeout"):
        assert name in accord.ProcessGroup._fields, name
    # The declared settings' help and flags name fields that exist.
    assert set(accord.JobConfig._help) <= set(accord.JobConfig._fields) and accord.JobConfig._flags["micro_batch"] == "--micro-batch"
    assert "local-sgd: " in accord.TopologyOptions.local_steps.__doc__  # a topology's declared help
    text = str(accord.JobConfig())  # C++'s describe(), a line per field
    for name in accord.JobConfig._fields + accord.JobConfig._cpp_only:
        assert f"{name} = " in text or f"{name}." in text, name

    config = accord.config(topology="local-sgd", topology_settings=dict(local_steps=3, outer_momentum=0.5),
                           membership=[(4, 1), accord.MembershipChange(step=6, workers=2)], eval_examples=64,
                           keep_interval=2)
    assert config.topology_settings.local_steps == 3 and config.topology_settings.outer_momentum == 0.5
    assert [(m.step, m.workers, m.crash) for m in config.membership] == [(4, 1, False), (6, 2, False)]
    assert config.eval_examples == 64 and config.keep_interval == 2
    config.topology_settings.group_size = 2  # a nested struct is changed in place
    assert config.topology_settings.group_size == 2
    raises(TypeError, "unknown setting 'topology_settings.nope'", lambda: accord.config(topology_settings={"nope": 1}))
    raises(TypeError, "topology_settings.local_steps", lambda: accord.config(topology_settings={"local_steps": "x"}))

    # The nested settings reach the job: local-sgd with 3 local steps keeps replicas apart between
    # outer steps, and the job still ends with one set of parameters.
    x, y = data()
    result = accord.torch.train(model(), lambda net, r: mean_loss(net, x, y, r.first_position, r.examples), group=None,
                                algorithm="ddp", topology="local-sgd", topology_settings={"local_steps": 3},
                                workers=2, steps=6, micro_batch=8, eval_interval=0)
    assert len(result.steps) == 6 and result.replicas_identical
    # Every field of what the job reports reads, and holds what C++ put there.
    for name in accord.JobResult._fields:
        getattr(result, name)
    for name in accord.StepMetrics._fields:
        getattr(result.steps[-1], name)
    assert result.peak_bytes_per_worker >= result.minimum_bytes_per_worker > 0 and result.gradient_buffers in (1, 2)
    assert result.steps[-1].epoch == 1 and sum(s.bytes_sent for s in result.steps) == result.bytes_sent > 0
    assert [s.step for s in result.steps] == list(range(1, 7)) and result.steps[-1].per_worker[1].compute >= 0
    assert any(s.consensus_distance > 0 for s in result.steps), "local-sgd measured no consensus distance"

    # process_group(): what accord-train reads, with this machine's address towards the master.
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "ACCORD_ELASTIC",
                 "ACCORD_JOIN", "ACCORD_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        os.environ.pop(name, None)
    assert accord.process_group() is None
    os.environ.update(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="31000", ACCORD_ELASTIC="1",
                      ACCORD_JOB_ID="python-test")
    group = accord.process_group()
    assert (group.rank, group.world_size, group.master_port, group.host, group.job_id, group.elastic, group.join) == \
        (1, 2, 31000, "127.0.0.1", "python-test", True, False), str(group)
    assert group.heartbeat_timeout == 30.0
    joiner = accord.process_group(join="127.0.0.1:31001")
    assert joiner.join and joiner.elastic and joiner.master_port == 31001 and joiner.rank == -1
    os.environ["MASTER_PORT"] = "70000"
    raises(ValueError, "MASTER_PORT=70000", accord.process_group)
    print(f"{len(accord.JobConfig._fields)} JobConfig fields, {len(accord.ProcessGroup._fields)} ProcessGroup fields")


def example(name):
    """A script of examples/torch_loop as a module."""
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "torch_loop", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loop_equals_torch():
    group = accord.process_group()
    workers, micro_batch, steps = group.world_size if group else 1, 8, 6
    trained, result = example("train").main(["--algorithm", "ddp", "--steps", str(steps),
                                             "--batch", str(micro_batch)])
    reference = example("train_torch").main(["--steps", str(steps), "--batch", str(workers * micro_batch)])
    assert result.replicas_identical and len(result.steps) == (steps if not group or group.rank == 0 else 0)
    largest = 0.0
    for (name, mine), theirs in zip(trained.named_parameters(), reference.parameters()):
        largest = max(largest, (mine - theirs).abs().max().item())
        assert torch.allclose(mine, theirs, rtol=1e-5, atol=2e-6), f"{name} differs by up to {largest}"
    torch.manual_seed(3)
    assert torch.equal(trained[0].weight, torch.nn.Linear(8, 16).weight), "the frozen layer changed"
    print(f"{workers} worker(s): the accord loop == torch on the big batch after {steps} steps "
          f"(largest difference {largest:.2e})")

    # With ACCO (the example's default) the same loop trains: the loss over the data falls.
    features, labels = example("train").dataset().tensors
    untrained = example("train_torch").main(["--steps", "0"])
    trained, result = example("train").main(["--steps", "25"])
    with torch.no_grad():
        before, after = (torch.nn.functional.cross_entropy(m(features), labels).item() for m in (untrained, trained))
    assert after < 0.8 * before and result.replicas_identical, f"ACCO in the app's loop: loss {before} -> {after}"
    # All 25 steps ran before the loader's epoch ended (rank 0 reports them).
    assert len(result.steps) == (25 if not group or group.rank == 0 else 0), len(result.steps)
    print(f"ACCO in the app's loop, 25 steps: loss over the data {before:.4f} -> {after:.4f}")


def normed_model():
    """BatchNorm (running mean only: momentum 1 keeps the last batch's) before a linear layer."""
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.BatchNorm1d(INPUTS, momentum=1.0), torch.nn.Linear(INPUTS, CLASSES))


def buffers():
    # Worker r's inputs are all 10 (r + 1): its running mean is 10 (r + 1) after each forward.
    # 2 threads here, or 2 processes under accord-launch -n 2.
    x, y = data()
    group = accord.process_group()
    workers, rank, micro_batch = group.world_size if group else 2, group.rank if group else 0, 4

    def loss(net, request):
        rank = (request.first_position // micro_batch) % workers
        xb, yb = examples(x, y, request.first_position, request.examples)
        return torch.nn.functional.cross_entropy(net(torch.full_like(xb, 10.0 * (rank + 1))), yb)

    for algorithm, (mode, expected) in itertools.product(
            ("ddp", "dlion-mavo"), (("broadcast", 10.0), ("average", 5.0 * (workers + 1)), ("local", 10.0 * (rank + 1)))):
        net, seen = normed_model(), []
        frozen = net[1].bias
        frozen.requires_grad_(False)
        before = frozen.clone()
        result = accord.torch.train(net, loss, group=group, buffers=mode, evaluate=lambda m: seen.append(
            m[0].running_mean.clone()) or 0.0, algorithm=algorithm, workers=workers, steps=4, micro_batch=micro_batch,
            weight_decay=0.5, learning_rate=0.01, eval_interval=2)
        kept = mode != "local"
        assert result.parameters.size == INPUTS * (2 + 2 * kept) + CLASSES * INPUTS, result.parameters.size
        assert torch.allclose(net[0].running_mean, torch.full((INPUTS,), expected)), (mode, net[0].running_mean)
        # The evaluator sees the round's buffers; local ones stay the evaluator copy's own.
        assert all(torch.allclose(m, torch.full((INPUTS,), expected if kept else 0.0)) for m in seen), (mode, seen)
        assert torch.equal(frozen, before), "a frozen parameter changed under weight decay"
        assert result.replicas_identical
        print(f"{algorithm}, buffers={mode}: running mean {net[0].running_mean[0].item():g}, frozen bias unchanged")


def batch_normed_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(INPUTS, 16), torch.nn.BatchNorm1d(16), torch.nn.Tanh(),
                               torch.nn.Linear(16, CLASSES))


def epochs():
    # The app's own epoch loop over its batches (a DataLoader's, here a list), one Job worker.
    x, y = data()
    micro_batch, accumulation = 8, 4
    batches = [examples(x, y, i * micro_batch, micro_batch) for i in range(EXAMPLES // micro_batch)]

    def module_state(net):  # (BatchNorm's num_batches_tracked counts forwards: the module's own)
        return [t.detach().clone() for t in itertools.chain(net.parameters(), net.buffers()) if t.is_floating_point()]

    def epoch_loop(algorithm, count, epochs, steps=1000, fail_at=None):
        # `epochs` passes over the first `count` batches; an exception at batch `fail_at`.
        net, seen = batch_normed_model(), 0
        settings = dict(optimizer="adamw", learning_rate=0.01) if algorithm != "dlion-mavo" else {}
        job = accord.torch.Job(net, group=None, algorithm=algorithm, steps=steps, micro_batch=micro_batch,
                               accumulation=accumulation, cosine=False, eval_interval=0, **settings)
        try:
            with job:
                for _ in range(epochs):
                    for xb, yb in batches[:count]:
                        torch.nn.functional.cross_entropy(net(xb), yb).backward()
                        seen += 1
                        if seen == fail_at:
                            raise KeyError("the app's loop failed")
                        if not job.step(torch.zeros(())):
                            # The last step() left the final parameters and buffers in the module.
                            final = module_state(net)
                            assert all(torch.equal(a, b) for a, b in zip(final, module_state(net)))
                            # Every step() call is in the loop's time breakdown.
                            spent = job.loop_seconds
                            assert spent.pop("micro_batches") == seen, (spent, seen)
                            assert min(spent.values()) >= 0 and spent["parameters"] > 0 and spent["end"] > 0, spent
                            return job.finish(), net, final
        except KeyError:
            pass
        return job.finish(), net, module_state(net)

    for algorithm in ("ddp", "acco", "dlion-mavo"):
        # Two epochs of 10 batches: 20 / 4 = 5 steps, on every run.
        runs = [epoch_loop(algorithm, 10, 2) for _ in range(2)]
        assert [len(result.steps) for result, _, _ in runs] == [5, 5], [len(r.steps) for r, _, _ in runs]
        assert numpy.array_equal(runs[0][0].parameters, runs[1][0].parameters), algorithm
        # 22 batches (5 steps and half of one), the data running out or the loop raising: the module
        # keeps the 5th step's parameters and BatchNorm statistics, as a job of 5 steps leaves them.
        exact, _, expected = epoch_loop(algorithm, 20, 1, steps=5)
        assert len(exact.steps) == 5 and not exact.data_ended
        for ended, net, kept in (epoch_loop(algorithm, 22, 1), epoch_loop(algorithm, 30, 1, fail_at=23)):
            assert len(ended.steps) == 5 and ended.data_ended, (algorithm, len(ended.steps))
            assert numpy.array_equal(ended.parameters, exact.parameters), algorithm
            assert all(torch.equal(a, b) for a, b in zip(kept, expected)), f"{algorithm}: the module is off step 5"
            assert net[1].running_var.min() > 0.01, f"{algorithm}: BatchNorm's running variance {net[1].running_var}"
        loss = mean_loss(net.eval(), x, y, 0, EXAMPLES).item()
        print(f"{algorithm}: 2 epochs of 10 batches made 5 steps twice; ended after 22 batches or an exception at "
              f"the 23rd, the module holds step 5's parameters and statistics (held-out loss {loss:.4f})")


def position_loss(x, y):
    return lambda net, request: mean_loss(net, x, y, request.first_position, request.examples)


def run_job(job, net, x, y):
    """The app's own loop over accord's stream positions, until the job is over."""
    while True:
        request = job.request
        if request is None:
            return job.finish()
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        loss.backward()
        job.step(loss)


def checkpoints():
    x, y = data()
    settings = dict(group=None, algorithm="ddp", micro_batch=8, accumulation=2, learning_rate=0.01,
                    weight_decay=0.1, cosine=False, eval_interval=0)
    straight = model()
    run_job(accord.torch.Job(straight, steps=8, **settings), straight, x, y)

    first = model()
    half = accord.torch.Job(first, steps=4, **settings)
    run_job(half, first, x, y)
    state = half.state_dict()
    assert state["steps"] == 4 and state["data_position"] > 0 and state["algorithm"] == "ddp", state
    resumed = model()
    job = accord.torch.Job(resumed, steps=8, **settings)
    job.load_state_dict(state)
    assert torch.equal(next(resumed.parameters()), next(first.parameters())), "load_state_dict left the model"
    run_job(job, resumed, x, y)
    for mine, theirs in zip(resumed.parameters(), straight.parameters()):
        assert torch.equal(mine, theirs), "4 + 4 resumed steps differ from 8 straight ones"
    # BatchNorm with a cumulative average (momentum None: its num_batches_tracked weighs each batch),
    # its buffers broadcast or local: 4 + 4 resumed steps are the 8 straight ones, buffers too.
    def cumulative():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.BatchNorm1d(INPUTS, momentum=None), torch.nn.Linear(INPUTS, CLASSES))

    for buffers in ("broadcast", "local"):
        straight = cumulative()
        run_job(accord.torch.Job(straight, steps=8, buffers=buffers, **settings), straight, x, y)
        first = cumulative()
        half = accord.torch.Job(first, steps=4, buffers=buffers, **settings)
        run_job(half, first, x, y)
        resumed = cumulative()
        job = accord.torch.Job(resumed, steps=8, buffers=buffers, **settings)
        job.load_state_dict(half.state_dict())
        run_job(job, resumed, x, y)
        for (name, mine), theirs in zip(resumed.state_dict().items(), straight.state_dict().values()):
            assert torch.equal(mine, theirs), f"buffers={buffers}: {name} of 4 + 4 resumed steps differs"
        assert resumed[0].num_batches_tracked.item() == 16, resumed[0].num_batches_tracked
    print("BatchNorm (cumulative average) resumed: every parameter and buffer as the straight run's")

    raises(ValueError, "checkpoint", lambda: accord.torch.Job(model(), steps=8, **settings).load_state_dict(
        {"checkpoint": b"ACCORDCK and then nothing"}))
    raises(ValueError, "this module's parameters and buffers 6", lambda: accord.torch.Job(
        torch.nn.Linear(2, 2), steps=8, **settings).load_state_dict(state))

    with tempfile.TemporaryDirectory() as scratch:
        # The same state goes on with 2 workers; then Ctrl-C stops train() after its step.
        resume_path = os.path.join(scratch, "half")
        with open(resume_path, "wb") as f:
            f.write(state["checkpoint"])
        path = os.path.join(scratch, "checkpoint")

        def interrupt(step):
            if step.step == 6:
                os.kill(os.getpid(), signal.SIGINT)

        result = accord.torch.train(model(), position_loss(x, y), on_step=interrupt, workers=2, steps=20,
                                    resume_path=resume_path, checkpoint_path=path,
                                    **{k: v for k, v in settings.items() if k != "accumulation"})
        done = result.steps[-1].step
        assert result.steps[0].step == 5 and 6 <= done < 20, [s.step for s in result.steps]
        with open(path, "rb") as f:
            assert accord.read_checkpoint(f.read())["steps"] == done
        print(f"resumed at step 5 with 2 workers, interrupted after step {done} with its checkpoint")

    # Ctrl-C in the app's own loop: step() returns False after the current step.
    net, micro_batches = model(), 0
    job = accord.torch.Job(net, steps=20, **settings)
    while (request := job.request) is not None:
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        loss.backward()
        micro_batches += 1
        if micro_batches == 3:  # the second step's first micro-batch
            os.kill(os.getpid(), signal.SIGINT)
        job.step(loss)
    result = job.finish()
    assert len(result.steps) == 2 and job.state_dict()["steps"] == 2, len(result.steps)
    print("Ctrl-C in the app's loop stopped the Job after step 2, with its checkpoint")


class HalfHidden(torch.nn.Module):
    """A hidden layer in `dtype` (elementwise products: torch's CPU float16 has no matmul) before a
    float32 output layer: a module of mixed precisions."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(3)
        self.hidden = torch.nn.Linear(INPUTS, 16).to(dtype)
        self.out = torch.nn.Linear(16, CLASSES)

    def forward(self, x):
        h = (x.to(self.hidden.weight.dtype)[:, None, :] * self.hidden.weight).sum(-1) + self.hidden.bias
        return self.out(h.float().tanh())


def in_layout(net):
    """The trained parameters in accord's flat order (docs/python.md): float32, bfloat16, float16."""
    order = (torch.float32, torch.bfloat16, torch.float16)
    return sorted((p for p in net.parameters() if p.requires_grad), key=lambda p: order.index(p.dtype))


def split(flat, like):
    """A flat float32 array as tensors shaped as `like`'s."""
    values, offset, out = torch.from_numpy(numpy.asarray(flat)), 0, []
    for tensor in like:
        out.append(values[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()
    return out


# A learning rate whose AdamW updates (about lr per step) bfloat16 or float16 weights of this
# model (|w| up to 0.35) mostly lose: master weights kept in the module's dtype would not move.
TINY = dict(lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def mixed_precision_reference(dtype, device, steps, loss_scale, x, y):
    """The recipe by hand: float32 master weights and torch's AdamW state on the CPU; each step
    computes in `dtype` on `device` at the masters rounded to it (x, y there too), and its
    gradient, widened and unscaled, steps the masters."""
    net = HalfHidden(dtype).to(device)
    masters = [p.detach().float().cpu().requires_grad_() for p in in_layout(net)]
    optimizer = torch.optim.AdamW(masters, **TINY)
    for step in range(steps):
        with torch.no_grad():
            for p, master in zip(in_layout(net), masters):
                p.copy_(master)
        net.zero_grad()
        (loss_scale * mean_loss(net, x, y, step * MICRO_BATCH, MICRO_BATCH)).backward()
        for p, master in zip(in_layout(net), masters):
            master.grad = p.grad.float().cpu() / loss_scale
        optimizer.step()
    return masters, optimizer


def run_scaled_job(job, net, x, y):
    """run_job, backward through the loss times the job's loss_scale."""
    while (request := job.request) is not None:
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        (loss * job.loss_scale).backward()
        job.step(loss)
    return job.finish()


MICRO_BATCH = 8
# A job of one worker and one micro-batch per step with TINY's AdamW, for the recipe above.
RECIPE_JOB = dict(group=None, algorithm="ddp", micro_batch=MICRO_BATCH, accumulation=1, max_accumulation=1,
                  optimizer="adamw", learning_rate=TINY["lr"], beta1=TINY["betas"][0], beta2=TINY["betas"][1],
                  epsilon=TINY["eps"], weight_decay=TINY["weight_decay"], cosine=False, eval_interval=0)


def matches_mixed_precision_recipe(dtype, loss_scale, device, x, y):
    """accord's float32 masters and AdamW state after 8 steps of HalfHidden(dtype) on `device`
    equal mixed_precision_reference's, and the module holds the masters rounded."""
    steps = 8
    net = HalfHidden(dtype).to(device)
    initial = [p.detach().float().cpu() for p in in_layout(net)]
    job = accord.torch.Job(net, steps=steps, loss_scale=loss_scale, **RECIPE_JOB)
    run_scaled_job(job, net, x, y)
    state = job.state_dict()
    masters = split(state["parameters"], in_layout(net))
    reference, optimizer = mixed_precision_reference(dtype, device, steps, loss_scale, x, y)
    moved = max((r - i).abs().max().item() for r, i in zip(reference, initial))
    largest = max((m - r).abs().max().item() for m, r in zip(masters, reference))
    # Masters kept in `dtype` would differ from the reference by about as much as it moved.
    assert largest < moved / 100, f"{dtype}: masters differ from the float32 reference by {largest} ({moved} moved)"
    for p, master in zip(in_layout(net), masters):
        assert p.device.type == device and p.dtype in (dtype, torch.float32), (p.device, p.dtype)
        assert torch.equal(p.cpu(), master.to(p.dtype)), f"{dtype}: the module's parameters are not the masters rounded"
    # accord's AdamW state is float32 and torch's: a bfloat16 or float16 one would be off by its
    # rounding (up to 0.4%).
    moments = state["optimizer"]
    assert moments.dtype == numpy.float32 and moments.shape == (2, len(state["parameters"])), moments.shape
    for slot, key in enumerate(("exp_avg", "exp_avg_sq")):
        theirs = torch.cat([optimizer.state[r][key].flatten() for r in reference])
        mine = torch.from_numpy(moments[slot])
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-12), \
            f"{dtype}: AdamW {key} differs by up to {(mine - theirs).abs().max().item()}"
    print(f"{dtype} on {device}, loss_scale {loss_scale:g}: float32 masters and AdamW state == the mixed-precision "
          f"recipe after {steps} steps (largest difference {largest:.1e}, moved {moved:.1e})")


def precisions():
    x, y = data()
    # float16 with a loss scale, as torch AMP does: its smallest gradients would be subnormal.
    for dtype, loss_scale in ((torch.bfloat16, 1.0), (torch.float16, 1024.0)):
        matches_mixed_precision_recipe(dtype, loss_scale, "cpu", x, y)

    # A checkpoint of a bfloat16 module continues exactly: accord resumes from its float32
    # masters, not from the module's rounded parameters.
    straight = HalfHidden(torch.bfloat16)
    straight_job = accord.torch.Job(straight, steps=8, **RECIPE_JOB)
    run_scaled_job(straight_job, straight, x, y)
    first = HalfHidden(torch.bfloat16)
    half = accord.torch.Job(first, steps=4, **RECIPE_JOB)
    run_scaled_job(half, first, x, y)
    resumed = HalfHidden(torch.bfloat16)
    job = accord.torch.Job(resumed, steps=8, **RECIPE_JOB)
    job.load_state_dict(half.state_dict())
    assert resumed.hidden.weight.dtype == torch.bfloat16
    run_scaled_job(job, resumed, x, y)
    assert numpy.array_equal(job.state_dict()["parameters"], straight_job.state_dict()["parameters"])
    for mine, theirs in zip(resumed.parameters(), straight.parameters()):
        assert torch.equal(mine, theirs), "a bfloat16 module's 4 + 4 resumed steps differ from 8 straight ones"
    print("a bfloat16 module's checkpoint resumed: 4 + 4 steps == 8 straight")

    # bfloat16 BatchNorm statistics are synchronised as float32 ones (2 threads; worker r's
    # inputs are all 10 (r + 1), exact in bfloat16), and the module trains with a usual rate.
    def loss(net, request):
        rank = (request.first_position // 4) % 2
        xb, yb = examples(x, y, request.first_position, request.examples)
        return torch.nn.functional.cross_entropy(net(torch.full_like(xb, 10.0 * (rank + 1)).bfloat16()).float(), yb)

    for mode, expected in (("broadcast", 10.0), ("average", 15.0)):
        net = normed_model().to(torch.bfloat16)
        accord.torch.train(net, loss, group=None, buffers=mode, algorithm="ddp", workers=2, steps=3, micro_batch=4,
                           eval_interval=0)
        assert net[0].running_mean.dtype == torch.bfloat16
        assert torch.equal(net[0].running_mean, torch.full((INPUTS,), expected, dtype=torch.bfloat16)), mode
    net = HalfHidden(torch.bfloat16)
    untrained = mean_loss(HalfHidden(torch.bfloat16), x, y, 0, EXAMPLES).item()
    result = accord.torch.train(net, position_loss(x, y), group=None, algorithm="acco", workers=2, steps=40,
                                micro_batch=16, max_accumulation=2, learning_rate=0.03, eval_interval=20,
                                evaluate=lambda m: mean_loss(m, x, y, 0, EXAMPLES).item())
    first, last = (sum(s.train_loss for s in part) / 3 for part in (result.steps[:3], result.steps[-3:]))
    assert last < 0.8 * first and result.replicas_identical, f"bfloat16 with ACCO: {first} -> {last}"
    # The evaluator's bfloat16 copy computes at the round's masters; the module ends at the final ones.
    assert result.final_eval_loss < 0.8 * untrained, (untrained, result.final_eval_loss)
    for p, master in zip(in_layout(net), split(result.parameters, in_layout(net))):
        assert torch.equal(p, master.to(p.dtype)), "train() left the module off its final masters"
    print(f"bfloat16 buffers broadcast and averaged; ACCO trains a bfloat16 module: {first:.4f} -> {last:.4f}, "
          f"held-out {untrained:.4f} -> {result.final_eval_loss:.4f}")

    # float16 gradients that overflow stop the job with the parameter named; none is trained on.
    for loss_scale, remedy in ((1e6, "lower loss_scale (1e+06)"), (1.0, "float16 overflows above 65504")):
        net = HalfHidden(torch.float16)
        job = accord.torch.Job(net, steps=4, loss_scale=loss_scale, **RECIPE_JOB)
        request = job.request
        loss = mean_loss(net, x, y, request.first_position, request.examples)
        (loss * (loss_scale if loss_scale != 1 else 1e6)).backward()
        raises(FloatingPointError, "parameter 'hidden.weight' (torch.float16) has an inf or NaN gradient; accord does "
               f"not train on it: {remedy}", lambda: job.step(loss))


class CudaStandIn:
    """What accord's bindings see of a float32 CUDA tensor (dtype, device, data_ptr, ...), over
    host memory: never read as device memory, since accord refuses it first."""
    dtype, device = torch.float32, torch.device("cuda:0")

    def __init__(self, n):
        self.values = numpy.zeros(n, numpy.float32)

    def data_ptr(self):
        return self.values.ctypes.data

    def is_contiguous(self):
        return True

    def numel(self):
        return self.values.size


def devices():
    from accord._flat_range import flat_buffer_device

    def never_asked(index):
        raise AssertionError(f"a CPU module asked about cuda:{index}")

    assert flat_buffer_device(torch.device("cpu"), never_asked) == (torch.device("cpu"), None)
    assert flat_buffer_device(torch.device("cuda:1"), lambda index: "") == (torch.device("cuda:1"), None)
    asked = []
    device, note = flat_buffer_device(torch.device("cuda:1"), lambda index: asked.append(index) or "no driver here")
    assert device == torch.device("cpu") and asked == [1], (device, asked)
    assert note == ("accord.torch: the module is on cuda:1, which accord cannot use (no driver here); its parameters "
                    "and gradients go through pinned host buffers, one copy each way per step"), note
    # The bindings take CUDA tensors by data_ptr() and device index, and refuse one in the wrong
    # memory before reading it (a stand-in, as torch here has no CUDA). Without a GPU accord says
    # why it cannot use one.
    n, why = 6, accord.cuda_unusable(0)
    if why:
        assert why.startswith("no usable CUDA device: "), why
        raises(ValueError, f"parameters: a tensor on cuda:0, which accord cannot use: {why}",
               lambda: accord.Job(CudaStandIn(n), accord.config(workers=1), "x"))
    job = accord.Job(numpy.zeros(n, numpy.float32), accord.config(algorithm="ddp", workers=1, steps=1,
                                                                  eval_interval=0), "host job")
    worker = job.worker(0)
    raises(ValueError, "into: a tensor in cuda:0 memory, the job's parameters are in host memory",
           lambda: worker.next(into=CudaStandIn(n)))
    while worker.next(into=numpy.zeros(n, numpy.float32)) is not None:
        raises(ValueError, "worker 0: submit(): a gradient in cuda:0 memory, the model's parameters are in host "
               "memory", lambda: worker.submit(CudaStandIn(n), 1, 0.5))
        worker.submit(numpy.zeros(n, numpy.float32), 1, 0.5)
    job.wait()
    net = model()
    flat = accord.torch.FlatModule(net)
    assert flat.parameters.device.type == "cpu" and not flat.parameters.is_pinned()
    begin, end = flat.parameters.data_ptr(), flat.parameters.data_ptr() + 4 * flat.parameters.numel()
    assert all(begin <= p.data_ptr() < end for p in net.parameters()), "float32 CPU parameters are views"
    print("flat buffers: a CPU module's on the CPU, views; a CUDA module's on its device, or pinned host memory "
          "with a note")


def cuda_module():
    """Needs a GPU and a torch built with CUDA: scripts/gpu-check.sh runs it there."""
    if not torch.cuda.is_available():
        print(f"test_python.py cuda_module: torch {torch.__version__} sees no CUDA device; skipped", file=sys.stderr)
        sys.exit(int(os.environ.get("ACCORD_MISSING_EXIT", "1")))
    x, y = (t.cuda() for t in data())
    for dtype, loss_scale in ((torch.float32, 1.0), (torch.bfloat16, 1.0), (torch.float16, 1024.0)):
        matches_mixed_precision_recipe(dtype, loss_scale, "cuda", x, y)
    # accord with CUDA keeps the flat buffers on the module's device (the float32 layer a view of
    # them); without, they are pinned host memory the copies go through.
    net = HalfHidden(torch.bfloat16).cuda()
    flat = accord.torch.FlatModule(net)
    if accord.cuda_unusable(0):
        print(f"accord cannot use cuda:0 ({accord.cuda_unusable(0)}): flat buffers on pinned host memory")
        assert flat.parameters.is_pinned()
    else:
        assert flat.parameters.device == net.out.weight.device, flat.parameters.device
        assert flat.parameters.data_ptr() <= net.out.weight.data_ptr() < flat.parameters.data_ptr() + 4 * flat.trained
    # train(): 2 replicas on the GPU, with ACCO.
    result = accord.torch.train(HalfHidden(torch.bfloat16).cuda(), position_loss(x, y), group=None, algorithm="acco",
                                workers=2, steps=40, micro_batch=16, max_accumulation=2, learning_rate=0.03,
                                eval_interval=0)
    first, last = (sum(s.train_loss for s in part) / 3 for part in (result.steps[:3], result.steps[-3:]))
    assert last < 0.8 * first and result.replicas_identical, f"bfloat16 on the GPU with ACCO: {first} -> {last}"
    print(f"ACCO trains a bfloat16 module on the GPU: {first:.4f} -> {last:.4f}")
    raises(ValueError, "accord trains a module on one device", lambda: accord.torch.train(
        torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).cuda()), None, group=None))


def status_page():
    import contextlib
    import io
    import re
    import socket
    import urllib.request
    x, y = data()
    net, printed = model(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        job = accord.torch.Job(net, group=None, algorithm="ddp", workers=2, steps=6, micro_batch=8, eval_interval=0,
                               status_port=0, log_interval=2)
        port = job.status_port
        result = run_workers(job, x, y)[0]
    lines = printed.getvalue().splitlines()
    assert lines[0] == f"status page: http://127.0.0.1:{port}/ (Prometheus: /metrics)", lines
    # accord-train's line, at the first step, every log_interval steps and the last.
    progress = re.compile(r"step +(\d+)/6 \| loss \d+\.\d{4} \| eval +- +\| [\d.]+[kM]? ex/s \| \d+\.\d bits/param "
                          r"\| hidden +\d+% \| \d+\.\ds( \| ETA \d+s)?$")
    assert [int(progress.match(line).group(1)) for line in lines[1:]] == [1, 2, 4, 6], lines

    def fetch(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.read().decode()

    metrics = dict(line.rsplit(" ", 1) for line in fetch("/metrics").splitlines() if not line.startswith("#"))
    assert float(metrics["accord_steps_total"]) == 6 and float(metrics["accord_steps_target"]) == 6, metrics
    assert float(metrics["accord_sent_bytes_total"]) == sum(s.bytes_sent for s in result.steps), metrics
    last = result.steps[-1]
    assert (metrics["accord_learning_rate"], metrics["accord_train_loss"], metrics["accord_workers"]) == (
        f"{last.learning_rate:.10g}", f"{last.train_loss:.10g}", "2"), metrics
    assert "<html" in fetch("/") and '"step":6' in fetch("/status.json")
    print(f"status page on port {port}: /metrics says 6 steps, {metrics['accord_sent_bytes_total']} bytes sent; "
          f"{len(lines) - 1} progress lines")

    # train() prints the same line, in tokens where the items are.
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        accord.torch.train(model(), position_loss(x, y), group=None, algorithm="ddp", workers=2, steps=3,
                           micro_batch=8, eval_interval=0, log_interval=1, log_unit="tok")
    assert [line.split(" | ")[3].endswith(" tok/s") for line in printed.getvalue().splitlines()] == [True] * 3

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        raises(ValueError, f"status_port={busy}: cannot listen", lambda: accord.torch.Job(
            model(), group=None, algorithm="ddp", steps=2, status_port=busy).request)
    raises(ValueError, "status_port=70000", lambda: accord.torch.Job(model(), group=None, status_port=70000))
    raises(ValueError, "log_interval=-1", lambda: accord.torch.train(model(), None, group=None, log_interval=-1))


def early_errors():
    # Each at Job(...), before any step: as accord would refuse it at the start.
    x, y = data()
    net = model()
    raises(TypeError, "unknown setting 'stpes'", lambda: accord.torch.Job(net, group=None, stpes=3))
    raises(ValueError, "steps must be at least 1", lambda: accord.torch.Job(net, group=None, steps=0))
    raises(ValueError, "nope", lambda: accord.torch.Job(net, group=None, algorithm="nope"))
    raises(ValueError, "wire precision", lambda: accord.torch.Job(net, group=None, wire_precision="fp7"))
    raises(ValueError, "optimizer 'torch.optim.AdamW' does not apply", lambda: accord.torch.Job(
        net, group=None, algorithm="dlion-mavo", optimizer=torch.optim.AdamW(net.parameters())))
    with tempfile.TemporaryDirectory() as scratch:
        raises(RuntimeError, "missing: cannot open the checkpoint", lambda: accord.torch.Job(
            net, group=None, resume_path=os.path.join(scratch, "missing")))
    # load_state_dict checks the checkpoint against the job: another architecture's of the same size is
    # refused there.
    job = accord.torch.Job(model(), group=None, algorithm="ddp", steps=2, micro_batch=8, eval_interval=0)
    run_job(job, job.module, x, y)
    other = torch.nn.Sequential(torch.nn.Linear(INPUTS, 16), torch.nn.Linear(16, CLASSES))  # no Tanh: other names
    mismatched = accord.torch.Job(other, group=None, algorithm="ddp", steps=4, micro_batch=8, eval_interval=0)
    raises(ValueError, "is not torch Sequential", lambda: mismatched.load_state_dict(job.state_dict()))
    print("Job(...) and load_state_dict raised each error before the first step")


def run_workers(job, x, y):
    """The app's own loop on a thread per local worker of `job`, over accord's stream positions:
    each worker's finish()."""
    workers = [job.worker(index) for index in range(job.workers)]
    results = [None] * len(workers)

    def loop(index):
        worker = workers[index]
        while (request := worker.request) is not None:
            loss = mean_loss(worker.module, x, y, request.first_position, request.examples)
            (loss * worker.loss_scale).backward()
            worker.step(loss)
        results[index] = worker.finish()

    threads = [threading.Thread(target=loop, args=(index,)) for index in range(1, len(workers))]
    for thread in threads:
        thread.start()
    loop(0)
    for thread in threads:
        thread.join()
    return results


def job_workers():
    # The app's own loop on two threads, one per local worker, as train() runs its loss_fn.
    x, y = data()
    settings = dict(group=None, algorithm="ddp", workers=2, steps=5, micro_batch=8, accumulation=2,
                    learning_rate=0.01, eval_interval=0)
    reference = model()
    accord.torch.train(reference, position_loss(x, y), **settings)

    net = model()
    job = accord.torch.Job(net, **settings)
    workers = [job.worker(0), job.worker(1)]
    assert workers[0] is job and workers[1].module is not net and [w.rank for w in workers] == [0, 1]
    assert [w.workers for w in workers] == [2, 2]
    results = run_workers(job, x, y)
    assert results[0] is results[1] and len(results[0].steps) == 5, results
    for module in (net, workers[1].module):
        for mine, theirs in zip(module.parameters(), reference.parameters()):
            assert torch.equal(mine, theirs), "Job(workers=2) on two threads differs from train(workers=2)"
    raises(IndexError, "no local worker 2", lambda: job.worker(2))
    print("Job(workers=2) driven by two app threads == train(workers=2) bit for bit")


def pip_install():
    # pyproject.toml's build, offline, with the build directory ctest names (ACCORD_BUILD_DIR: only
    # the module's target is built there), into a fresh directory that then holds the package.
    accord.require("pip")
    import subprocess
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with tempfile.TemporaryDirectory() as target:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                        "--quiet", "--target", target, root], check=True)
        check = ("import accord, accord.torch, torch; assert accord.__file__.startswith(sys.argv[1]), accord.__file__; "
                 "m = torch.nn.Linear(2, 1); r = accord.torch.train(m, lambda n, q: n(torch.ones(q.examples, 2)).sum(), "
                 "group=None, algorithm='ddp', steps=2, workers=1, eval_interval=0); print(accord.__file__, len(r.steps))")
        environment = dict(os.environ, PYTHONPATH=target)
        out = subprocess.run([sys.executable, "-c", "import sys; " + check, target], check=True, env=environment,
                             capture_output=True, text=True).stdout
        assert out.strip().endswith(" 2"), out
        # The version is CMake's project version; the console script runs a .py script with this Python.
        with open(os.path.join(root, "CMakeLists.txt")) as cmake:
            project_version = re.search(r"project\(accord VERSION ([0-9.]+)", cmake.read()).group(1)
        version = subprocess.run([sys.executable, "-c", "import accord; print(accord.__version__)"], check=True,
                                 env=environment, capture_output=True, text=True).stdout.strip()
        assert version == project_version == accord.__version__, (version, project_version, accord.__version__)
        script = os.path.join(target, "where.py")
        with open(script, "w") as out_file:
            out_file.write("import os, sys; print(os.environ['RANK'], sys.executable)\n")
        launched = subprocess.run([os.path.join(target, "bin", "accord-launch"), "-n", "2", script], check=True,
                                  env={k: v for k, v in environment.items() if k != "ACCORD_LAUNCH_PYTHON"},
                                  capture_output=True,
                                  text=True).stdout
        assert sorted(launched.splitlines()) == [f"[rank 0] 0 {sys.executable}", f"[rank 1] 1 {sys.executable}"], \
            launched
        print(f"pip installed accord {version} and trained from {out.strip()}; its accord-launch ran {script}")


def rendezvous_interrupt():
    import socket
    import subprocess
    import threading
    own_loop = ("import accord, numpy; job = accord.Job(numpy.zeros(4, dtype=numpy.float32), "
                "accord.config(algorithm='ddp', workers=2, steps=1), 'four', group=accord.process_group()); "
                "job.worker(0).next()")
    torch_train = ("import accord.torch, torch; accord.torch.train(torch.nn.Linear(2, 1), "
                   "lambda net, q: net(torch.ones(q.examples, 2)).sum(), algorithm='ddp', steps=1)")
    ranks = []
    for script in (own_loop, torch_train):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        environment = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([sys.executable, "-c", script], env=environment, stderr=subprocess.PIPE,
                                      text=True))
    for rank in ranks:
        watchdog = threading.Timer(120, rank.kill)  # a rank that never says whom it waits for
        watchdog.start()
        seen = []
        for line in rank.stderr:
            seen.append(line)
            if "accord: membership: waiting for rank 1 of 2 (10 s)" in line:
                break
        watchdog.cancel()
        assert rank.poll() is None, "".join(seen)
    for rank in ranks:
        rank.send_signal(signal.SIGINT)
    for rank in ranks:
        try:
            rest = rank.communicate(timeout=20)[1]
        except subprocess.TimeoutExpired:
            rank.kill()
            raise AssertionError("rank 0 still waits 20 s after Ctrl-C") from None
        assert rank.returncode == -signal.SIGINT, (rank.returncode, rest)
        assert "KeyboardInterrupt" in rest, rest
    print("both ranks 0 named rank 1 while waiting and ended at Ctrl-C")


def deep_model():
    """Four layers and a BatchNorm, so that backward finishes them one after another."""
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(INPUTS, 32), torch.nn.BatchNorm1d(32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, CLASSES))


class Cast(torch.nn.Module):
    """The input in the module's dtype (the test data are float32)."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.to(self.dtype)


def deep_model_in(dtype):
    """deep_model computing in `dtype` (its output back in float32 for the loss)."""
    net = deep_model()
    if dtype == torch.float32:
        return net
    return torch.nn.Sequential(Cast(dtype), net.to(dtype), Cast(torch.float32))


def gradient_buckets():
    x, y = data()
    group = accord.process_group()
    workers = group.world_size if group else 2
    settings = dict(algorithm="ddp", workers=workers, steps=5, micro_batch=4, accumulation=2, max_accumulation=2,
                    learning_rate=0.01, eval_interval=0)
    # Backward's hooks finish each gradient in accord's flat buffer: in place for float32, widened
    # (bfloat16) or unscaled (a loss scale) by the hook.
    for dtype, loss_scale in ((torch.float32, 1.0), (torch.bfloat16, 1.0), (torch.float32, 8.0)):
        buckets_equal_whole(x, y, group, dict(settings, loss_scale=loss_scale), dtype)

    def twice(net, request):
        step_loss = mean_loss(net, x, y, request.first_position, request.examples)
        step_loss.backward(retain_graph=True)  # accord's backward comes second
        return step_loss

    raises(RuntimeError, "got a second gradient in one micro-batch",
           lambda: accord.torch.train(deep_model(), twice, group=group, bucket_cap_mb=0.0005, **settings))
    print("a second backward in one micro-batch: one error naming the parameter")

    # A bfloat16 gradient that overflows in its hook goes in no bucket, and step() names it (in one
    # process: between processes a rank may hear first that the other rank's worker failed).
    if group is not None:
        return

    def huge(net, request):  # the first layer's weight gets an infinite gradient, after the others'
        return mean_loss(net, x, y, request.first_position, request.examples) + net[1][0].weight.sum() * float("inf")

    raises(FloatingPointError, "parameter '1.0.weight' (torch.bfloat16) has an inf or NaN gradient",
           lambda: accord.torch.train(deep_model_in(torch.bfloat16), huge, group=group, bucket_cap_mb=0.0005,
                                      **settings))
    print("a bfloat16 gradient overflowing during backward: one error naming the parameter")


def buckets_equal_whole(x, y, group, settings, dtype):
    """DDP with gradient buckets fed by backward's hooks trains a `dtype` deep_model bit for bit
    as without buckets, through train() and through a Job's loop."""
    reports = []
    real_report = accord.Worker.gradients_final_from

    def counted(worker, gradient, begin):
        reports.append(begin)
        real_report(worker, gradient, begin)

    def loss(net, request):
        return mean_loss(net, x, y, request.first_position, request.examples)

    def own_loop(net, bucket_cap_mb):
        job = accord.torch.Job(net, group=group, bucket_cap_mb=bucket_cap_mb, **settings)
        if group is None:
            return run_workers(job, x, y)[0]
        return run_scaled_job(job, net, x, y)

    # 0.0005 MB: buckets of 131 values, a few per step of this 2.5k-parameter model.
    accord.Worker.gradients_final_from = counted
    try:
        for name, run in (("train()", lambda net, cap: accord.torch.train(net, loss, group=group, bucket_cap_mb=cap,
                                                                          **settings)),
                          ("own loop", own_loop)):
            reports.clear()
            bucketed_net, whole_net = deep_model_in(dtype), deep_model_in(dtype)
            bucketed = run(bucketed_net, 0.0005)
            runs = sorted(set(reports), reverse=True)
            assert reports and 0 in reports, f"{name}: backward's hooks reported nothing"
            assert len(runs) > 3, f"{name}: reports at {runs}: not in bucket-sized runs"
            reports.clear()
            whole = run(whole_net, 0)
            assert not reports, f"{name}: reports without buckets: {reports[:5]}"
            assert bucketed.replicas_identical and whole.replicas_identical
            assert numpy.array_equal(bucketed.parameters, whole.parameters), f"{name}: parameters differ"
            assert [m.train_loss for m in bucketed.steps] == [m.train_loss for m in whole.steps]
            for a, b in zip(bucketed_net.state_dict().values(), whole_net.state_dict().values()):
                assert torch.equal(a, b), f"{name}: the modules differ"
            print(f"{name}, {dtype}, loss scale {settings['loss_scale']:g}: buckets fed during backward "
                  f"({len(runs)} distinct reports per micro-batch, e.g. {runs[:4]}) == no buckets, bit for bit")
    finally:
        accord.Worker.gradients_final_from = real_report


if __name__ == "__main__":
    cases = {f.__name__: f for f in (ddp_equals_adamw, loop_equals_torch, acco_and_dlion, buffers, epochs, checkpoints,
                                     precisions, devices, cuda_module, bad_input, app_error, settings,
                                     status_page, early_errors, job_workers, pip_install, rendezvous_interrupt,
                                     gradient_buckets)}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        sys.exit(f"usage: test_python.py {'|'.join(cases)}")
    cases[sys.argv[1]]()
