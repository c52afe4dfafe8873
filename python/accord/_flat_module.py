"""accord.torch's flat layout of a module: its trainable parameters (by param group, then by
precision) and floating-point buffers as views of one flat float32 buffer for the parameters and
one for their gradients, which accord reads and writes in place (FlatModule), and the signature
that names the architecture."""
import hashlib
import itertools
import math
import warnings

import torch

import accord
from accord._flat_range import PRECISIONS, FlatRange, flat_buffer_device
from accord._gradient_progress import GradientProgress

# The buffers= settings and the role of the buffers' ParameterGroup (none: buffers stay local).
BUFFER_ROLES = {"broadcast": "broadcast", "average": "averaged", "local": None}
BUFFER_MODES = tuple(BUFFER_ROLES)


def _layout(module, param_groups, buffers):
    """The tensors accord's flat buffer holds, in order: the trainable parameters of each param
    group (torch's form: dicts with "params"), the other trainable ones, then the floating-point
    buffers unless buffers="local"; and each param group's other settings with its range. Within
    each of these, float32 tensors come first, then bfloat16, then float16 (fewer runs to
    convert). One clear error for a tensor accord cannot hold, before anything trains."""
    if buffers not in BUFFER_MODES:
        raise ValueError(f"accord.torch: buffers={buffers!r} is not one of {', '.join(BUFFER_MODES)}")
    names = {id(p): name for name, p in module.named_parameters()}
    trainable = [p for p in module.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("accord.torch: the module has no trainable parameters")
    kept = [] if buffers == "local" else [(name, b) for name, b in module.named_buffers() if b.is_floating_point()]
    named = [(f"parameter '{names[id(p)]}'", p) for p in trainable] + [(f"buffer '{name}'", b) for name, b in kept]
    for what, tensor in named:
        if tensor.device != named[0][1].device:
            raise ValueError(f"accord.torch: {what} is on {tensor.device} but {named[0][0]} on {named[0][1].device}; "
                             "accord trains a module on one device (move it with .to())")
    for what, tensor in named:
        _check_tensor(what, tensor)
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
        ordered += _by_precision(members)
        settings = {key: value for key, value in group.items() if key != "params"}
        group_settings.append((settings, begin, begin + sum(p.numel() for p in members)))
    ordered += _by_precision([p for p in trainable if id(p) not in placed])
    kept = _by_precision([b for _, b in kept])
    return ordered, kept, group_settings


def _check_tensor(what, tensor):
    """TypeError or ValueError naming a parameter or buffer accord cannot hold."""
    if tensor.dtype not in PRECISIONS:
        remedy = "or buffers='local'" if what.startswith("buffer") else "or freeze it"
        raise TypeError(f"accord.torch: {what} is {tensor.dtype}; accord trains float32, bfloat16 and float16 "
                        f"(with float32 master weights): convert it (.float()) {remedy}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"accord.torch: {what} is on {tensor.device}; accord trains modules on the CPU or a "
                         "CUDA device")


def _by_precision(tensors):
    return sorted(tensors, key=lambda t: PRECISIONS.index(t.dtype))  # stable: a float32 module keeps its order


_said = set()  # notes already shown in this process


def _say_once(note):
    if note not in _said:
        _said.add(note)
        warnings.warn(note, RuntimeWarning, stacklevel=3)


class FlatModule:
    """A module whose trainable parameters (requires_grad: frozen ones stay as they are, neither
    trained nor decayed) and floating-point buffers (BatchNorm's running statistics; none with
    buffers="local") accord holds in `parameters`, one flat contiguous float32 tensor, in
    _layout's order, their gradients in `gradients`: on the module's CUDA device when accord can
    use it, else on the CPU (pinned for a CUDA module; flat_buffer_device). float32 tensors on
    that device are views of them; bfloat16, float16 and other devices' ones views of a compute
    copy in their dtype on their device, which to_module() refreshes (accord's FlatRange).
    `loss_scale`: the loss the gradients come from was multiplied by it; collect_gradients
    divides it out in float32."""

    def __init__(self, module, param_groups=None, buffers="broadcast", loss_scale=1.0):
        ordered, self.buffers, self.group_settings = _layout(module, param_groups, buffers)
        if not (0 < loss_scale < float("inf")):
            raise ValueError(f"accord.torch: loss_scale={loss_scale!r} must be a positive number")
        self.module, self.loss_scale = module, loss_scale
        self.trained = sum(p.numel() for p in ordered)
        total = self.trained + sum(b.numel() for b in self.buffers)
        device, note = flat_buffer_device(ordered[0].device, accord.cuda_unusable)
        if note:
            _say_once(note)
        pinned = device != ordered[0].device  # one copy each way per step, without staging
        self.parameters = torch.empty(total, dtype=torch.float32, device=device, pin_memory=pinned)
        self.gradients = torch.zeros(total, dtype=torch.float32, device=device, pin_memory=pinned)
        self.ranges, offset = [], 0
        runs = [(p, True) for p in ordered] + [(b, False) for b in self.buffers]
        for (_, trained), run in itertools.groupby(runs, key=lambda pair: (pair[0].dtype, pair[1])):
            flat_range = FlatRange(self.parameters, self.gradients, offset, [t for t, _ in run], trained)
            self.ranges.append(flat_range)
            offset = flat_range.end
        self._views = [view for r in self.ranges for view in r.views]
        # Each trained parameter's range and first position in the flat buffers, in _views' order.
        self._slots = [(r, r.begin + offset) for r in self.ranges for offset in r.view_offsets]
        names = {id(p): name for name, p in module.named_parameters()}
        self._names = [names[id(p)] for p, _ in self._views]
        # Gradients that went through a narrower dtype (or a scale) may have overflowed.
        self._checks_finite = loss_scale != 1 or any(r.dtype != torch.float32 for r in self.ranges)
        self._version = None
        # DDP's overlap of its rounds with backward, where the flat buffers are on the host.
        self.progress = GradientProgress(self) if GradientProgress.eligible(self) else None

    def trained_offsets(self):
        """(parameter, its first position in `parameters`) for the trained ones, in order."""
        return [(p, begin) for (p, _), (_, begin) in zip(self._views, self._slots)]

    def next_request(self, worker):
        """worker.next() into `parameters` (copied when they changed), and into the module's
        compute copies then."""
        request = worker.next(into=self.parameters)
        if request is not None and request.parameters_version != self._version:
            self._version = request.parameters_version
            self.to_module()
        if self.progress:
            self.progress.arm(worker, request)
        return request

    def to_module(self):
        """`parameters` into the tensors the module computes with that are not views of it."""
        for flat_range in self.ranges:
            flat_range.to_module()

    def collect_gradients(self):
        """Autograd accumulates into the gradient views in place; a gradient it replaced (or one
        the user set to None) is copied back into its view. Then the gradients go into the flat
        buffer, in float32 and unscaled, and the buffers' current values where their gradients
        would be: accord averages or broadcasts them. Parameters backward's hooks already
        finished (GradientProgress) are left as they are. FloatingPointError naming the first
        parameter whose gradient is inf or NaN, where a narrower dtype or a loss scale may have
        overflowed: accord never trains on one."""
        finished = self.progress.finished if self.progress is not None else None
        for index, (p, view) in enumerate(self._views):
            if finished is not None and finished[index]:
                continue
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
            else:
                continue
            p.grad = view
        sent = self.progress is not None and self.progress.buffers_sent
        for flat_range in self.ranges:
            if flat_range.gradients is None and not sent:  # buffers backward's hooks sent stay
                flat_range.to_accord()
        if finished is None or not any(finished):
            for flat_range in self.ranges:
                if flat_range.gradients is not None:
                    flat_range.to_accord()
            if self.loss_scale != 1:
                self.gradients[:self.trained].mul_(1 / self.loss_scale)
        else:
            for index, done in enumerate(finished):
                if not done:
                    self.finish_gradient(index)
        if self.progress is not None and self.progress.overflow is not None:
            raise self._overflow(self.progress.overflow)
        trained = self.gradients[:self.trained]
        # The sum is inf or NaN when an element is (one pass without a temporary; torch.isfinite
        # costs 30 times more), or when finite ones overflow it: only then look closer.
        if self._checks_finite and not math.isfinite(trained.sum()) and not torch.isfinite(trained).all():
            raise self._overflow(trained)

    def finish_gradient(self, index):
        """Trained parameter `index`'s gradient (in its view) into the flat buffer, widened to
        float32 and unscaled; whether it is finite there (always True where no narrower dtype or
        loss scale could have overflowed)."""
        flat_range, begin = self._slots[index]
        end = begin + self._views[index][0].numel()
        gradient = self.gradients[begin:end]
        if flat_range.staged:
            flat_range.to_accord(begin, end)
        if self.loss_scale != 1:
            gradient.mul_(1 / self.loss_scale)
        return not self._checks_finite or math.isfinite(gradient.sum()) or bool(torch.isfinite(gradient).all())

    def submit(self, worker, items, loss):
        """worker.submit(gradients, ...), torch's work on a CUDA buffer finished first: accord reads
        it on a stream of its own."""
        if self.gradients.device.type == "cuda":
            torch.cuda.synchronize(self.gradients.device)
        worker.submit(self.gradients, items, loss)

    def zero_gradients(self):
        for flat_range in self.ranges:
            flat_range.zero_gradients()

    def _overflow(self, gradients):
        """FloatingPointError naming the parameter of the first inf or NaN in `gradients` (the
        trained gradients, or from a parameter's own first position)."""
        first, end = int((~torch.isfinite(gradients)).nonzero()[0]), 0
        first += self.trained - gradients.numel()  # a tail of the trained gradients
        for (parameter, _), name in zip(self._views, self._names):
            end += parameter.numel()
            if first < end:
                break
        if self.loss_scale != 1:
            remedy = f"lower loss_scale ({self.loss_scale:g})"
        elif parameter.dtype == torch.float16:
            remedy = "float16 overflows above 65504: scale the loss down (loss_scale below 1) or compute in bfloat16"
        else:
            remedy = "the model diverged (a lower learning rate?)"
        return FloatingPointError(f"accord.torch: parameter '{name}' ({parameter.dtype}) has an inf or NaN gradient; "
                                  f"accord does not train on it: {remedy}")

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
