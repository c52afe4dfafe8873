"""The Python module over a torch model (registered with ctest, one test per case):
  ddp_equals_adamw   accord's DDP over 2 workers x 2 micro-batches equals torch's AdamW on the
                     big batch of the same examples (2 threads here, or 2 processes when run
                     under accord-launch -n 2)
  acco_and_dlion     ACCO and Distributed Lion train: the loss falls
  bad_input          wrong dtype, length, memory layout, settings: one clear Python exception,
                     and the job goes on
  app_error          an exception in the app's loss, evaluate or on_step ends the job and is
                     raised from train(), no hang
  settings           JobConfig, TopologyOptions, MembershipChange and ProcessGroup have a property
                     for every field of C++'s structs (their lists in accord/config_fields.hpp),
                     accord.config sets nested ones, and process_group() reads the environment
Run: PYTHONPATH=build/python python3 tests/test_python.py CASE
Prints ACCORD_SKIPPED (ctest: skipped) when torch or numpy is not installed."""
import os
import sys

try:
    import numpy
    import torch
except ImportError as missing:
    print(f"ACCORD_SKIPPED: {missing}")
    sys.exit(0)

import accord
import accord.torch

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
        worker.submit(torch.ones(n), 1, 0.5)  # after all that, a good gradient goes through
    result = job.wait()
    # Each step moved every parameter against the all-ones gradient.
    assert len(result.steps) == 2 and (result.parameters < 0).all()
    raises(RuntimeError, "wait", job.wait)
    net = torch.nn.Linear(2, 2).double()
    raises(TypeError, "accord trains float32", lambda: accord.torch.train(net, None, group=None))
    raises(ValueError, "WORLD_SIZE 2", lambda: accord.torch.train(model(), None, group=group_of(2), workers=3))


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
    for cls, cpp_only in ((accord.JobConfig, {"stop_requested", "on_checkpoint_written"}),
                          (accord.TopologyOptions, set()), (accord.MembershipChange, set()),
                          (accord.ProcessGroup, {"leave_requested", "on_event"})):
        assert properties(cls) == set(cls._fields), f"{cls.__name__}: {properties(cls) ^ set(cls._fields)}"
        assert set(cls._cpp_only) == cpp_only, f"{cls.__name__}: {cls._cpp_only}"
        instance = cls()
        for name in cls._fields:  # every property reads and writes back
            setattr(instance, name, getattr(instance, name))
    for name in ("topology_settings", "eval_examples", "membership", "keep_interval", "resident_on_host",
                 "device_rounds"):
        assert name in accord.JobConfig._fields, name
    for name in ("elastic", "join", "heartbeat_timeout"):
        assert name in accord.ProcessGroup._fields, name
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


if __name__ == "__main__":
    cases = {f.__name__: f for f in (ddp_equals_adamw, acco_and_dlion, bad_input, app_error, settings)}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        sys.exit(f"usage: test_python.py {'|'.join(cases)}")
    cases[sys.argv[1]]()
