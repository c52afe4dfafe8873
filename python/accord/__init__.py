"""accord: communication-hiding data-parallel training (ACCO, Distributed Lion, DDP, ...)
driven by the app's own training loop.

    job = accord.Job(initial_parameters, accord.config(algorithm="acco", workers=2, steps=100),
                     signature="my net")
    worker = job.worker(0)                      # one thread per local worker
    while (request := worker.next(into=params)) is not None:
        worker.submit(gradient_at(params, request), items, loss)
    result = job.wait()

accord.torch trains a torch.nn.Module this way in a few lines.
"""
from ._accord import (Job, JobConfig, JobResult, ProcessGroup, Request, StepMetrics, Worker,
                      WorkerSeconds, algorithm_names, topology_names)

__all__ = ["Job", "JobConfig", "JobResult", "ProcessGroup", "Request", "StepMetrics", "Worker",
           "WorkerSeconds", "algorithm_names", "topology_names", "config", "process_group"]


def config(**settings):
    """A JobConfig with the given fields set (JobConfig's attribute names; the rest keep
    accord's defaults). An unknown name raises TypeError naming it."""
    result = JobConfig()
    for name, value in settings.items():
        if name.startswith("_") or not hasattr(result, name):
            raise TypeError(f"accord.config: unknown setting '{name}'")
        default = getattr(result, name)
        try:
            setattr(result, name, value)
        except TypeError:
            expected = "float or None" if default is None else type(default).__name__
            if isinstance(default, int) and not isinstance(default, bool) and name != "workers":
                expected = "int >= 0"
            raise TypeError(f"accord.config: {name} = {value!r} is not a valid {expected}") from None
    return result


def process_group(join=""):
    """This process's ProcessGroup when launched by accord-launch, torchrun or srun (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ..., ACCORD_ELASTIC, ACCORD_JOIN), else None (a job in
    this process). `join`: HOST:PORT of a running elastic job to join (else ACCORD_JOIN's).
    The same reading as accord-train's (C++: accord::process_group_from_environment)."""
    return ProcessGroup.from_environment(join)
