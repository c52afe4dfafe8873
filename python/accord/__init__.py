"""accord: communication-hiding data-parallel training (ACCO, Distributed Lion, DDP, ...)
driven by the app's own training loop.

    job = accord.Job(initial_parameters, accord.config(algorithm="acco", workers=2, steps=100, accumulation=2),
                     signature="my net")
    worker = job.worker(0)                      # one thread per local worker
    while (request := worker.next(into=params)) is not None:
        worker.submit(gradient_at(params, request), items, loss)
    result = job.wait()

accord.torch trains a torch.nn.Module this way in a few lines.
"""
from ._accord import __version__  # CMake's project version, as pip's
from ._accord import (EdgeTraffic, Job, JobConfig, JobResult, MembershipChange, ParameterGroup, ProcessGroup, Request,
                      StepMetrics, ThreadCpu, TopologyOptions, Worker, WorkerSeconds, algorithm_names, cuda_unusable,
                      read_checkpoint, topology_names)

__all__ = ["EdgeTraffic", "Job", "JobConfig", "JobResult", "MembershipChange", "ParameterGroup", "ProcessGroup", "Request",
           "StepMetrics", "ThreadCpu", "TopologyOptions", "Worker", "WorkerSeconds", "algorithm_names", "cuda_unusable",
           "read_checkpoint", "topology_names", "config", "process_group", "require"]


def require(*modules):
    """Imports `modules` (e.g. "torch", "numpy") for a script, or ends it saying which this
    interpreter lacks: exit status 1, or $ACCORD_MISSING_EXIT where a test runner sets it to
    its skip code (ctest's SKIP_RETURN_CODE: a skip, not a failure, on a machine without torch)."""
    import importlib
    import os
    import sys
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as missing:
            print(f"{sys.argv[0]}: this Python ({sys.executable}) cannot import {name}: {missing}. Run it with the "
                  "interpreter that has it (Debian: apt-get install python3-torch python3-numpy, then "
                  "/usr/bin/python3)", file=sys.stderr)
            sys.exit(int(os.environ.get("ACCORD_MISSING_EXIT", "1")))


def config(**settings):
    """A JobConfig with the given fields set (JobConfig._fields: the fields of C++'s job_config;
    the rest keep accord's defaults). topology_settings may be a dict of TopologyOptions fields,
    membership a list of MembershipChange or (step, workers[, crash]) tuples, parameter_groups a
    list of ParameterGroup or dicts of its fields. An unknown name raises TypeError naming it."""
    result = JobConfig()
    for name, value in settings.items():
        if name == "topology_settings" and isinstance(value, dict):
            options = TopologyOptions()
            for option, setting in value.items():
                _set(options, "topology_settings." + option, option, setting)
            value = options
        elif name == "membership" and isinstance(value, (list, tuple)):
            value = [change if isinstance(change, MembershipChange) else MembershipChange(*change)
                     for change in value]
        elif name == "parameter_groups" and isinstance(value, (list, tuple)):
            value = [group if isinstance(group, ParameterGroup) else ParameterGroup(**group) for group in value]
        _set(result, name, name, value)
    return result


def _set(target, shown, name, value):
    """setattr for a settings field, with accord.config's TypeError for an unknown name or a
    value of the wrong type (`shown`: the name as the caller wrote it)."""
    if name not in type(target)._fields:
        raise TypeError(f"accord.config: unknown setting '{shown}'")
    default = getattr(target, name)
    try:
        setattr(target, name, value)
    except TypeError:
        expected = "float or None" if default is None else type(default).__name__
        if isinstance(default, int) and not isinstance(default, bool) and name != "workers":
            expected = "int >= 0"
        raise TypeError(f"accord.config: {shown} = {value!r} is not a valid {expected}") from None


def process_group(join=""):
    """This process's ProcessGroup when launched by accord-launch, torchrun or srun (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ..., ACCORD_ELASTIC, ACCORD_JOIN), else None (a job in
    this process). `join`: HOST:PORT of a running elastic job to join (else ACCORD_JOIN's).
    The same reading as accord-train's (C++: accord::process_group_from_environment)."""
    return ProcessGroup.from_environment(join)
