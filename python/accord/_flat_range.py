"""A run of consecutive tensors of one dtype in accord's flat float32 buffers (accord.torch's
FlatModule): trained parameters, or buffers.

The flat buffers live on the module's device when accord can use it (a CUDA module with a
CUDA build of accord: flat_buffer_device), else on the CPU. float32 tensors on the flat
buffers' device are views of them, so accord reads their gradients and writes their values in
place. Any other tensor (bfloat16, float16, or on a GPU the flat buffers are not on) is a view
of a compute copy in the module's dtype on the module's device: accord keeps the float32 master
values, the copy takes them rounded to the module's dtype (to nearest even, as torch's .to())
after every round, and the copy's gradients go back widened to float32. A GPU copy in bfloat16
or float16 of host flat buffers goes through a pinned host tensor of its own dtype, so each step
moves the module's dtype over the bus, casts on the host, and allocates nothing."""
import torch

# The dtypes a module may compute with; accord's master values are float32.
PRECISIONS = (torch.float32, torch.bfloat16, torch.float16)


def flat_buffer_device(module_device, cuda_unusable):
    """Where FlatModule keeps accord's flat float32 buffers for a module on `module_device`, and
    None or a note to say once why that is not the module's device. cuda_unusable(index) says
    why accord cannot use a CUDA device, '' when it can (accord.cuda_unusable); it is asked only
    for a CUDA module."""
    if module_device.type != "cuda":
        return torch.device("cpu"), None
    why = cuda_unusable(module_device.index)
    if not why:
        return module_device, None
    return torch.device("cpu"), (f"accord.torch: the module is on {module_device}, which accord cannot use ({why}); "
                                 "its parameters and gradients go through pinned host buffers, one copy each way "
                                 "per step")


class FlatRange:
    """`tensors` (one dtype, one device) placed at flat position `begin`: each becomes a view of
    this range's values (and, when `trained`, its gradient a view of the range's gradients);
    their current values are copied into `flat_parameters`."""

    def __init__(self, flat_parameters, flat_gradients, begin, tensors, trained):
        dtype, device = tensors[0].dtype, tensors[0].device
        self.dtype, self.begin = dtype, begin
        self.end = begin + sum(t.numel() for t in tensors)
        self.accord_values = flat_parameters[self.begin:self.end]
        self.accord_gradients = flat_gradients[self.begin:self.end]
        self.staged = dtype != torch.float32 or device != flat_parameters.device
        count = self.end - self.begin
        if self.staged:
            self.values = torch.empty(count, dtype=dtype, device=device)
            self.gradients = torch.zeros(count, dtype=dtype, device=device) if trained else None
        else:
            self.values = self.accord_values
            self.gradients = self.accord_gradients if trained else None
        through_host = device != flat_parameters.device and dtype != torch.float32
        self._pinned = torch.empty(count, dtype=dtype, pin_memory=True) if through_host else None
        self.views = []  # (parameter, its gradient's view) for the trained ones
        self.view_offsets = []  # each view's first position in the range
        offset = 0
        with torch.no_grad():
            for tensor in tensors:
                n = tensor.numel()
                values = self.values[offset:offset + n].view_as(tensor)
                values.copy_(tensor)
                tensor.data = values
                if trained:
                    gradient = self.gradients[offset:offset + n].view_as(tensor)
                    if tensor.grad is not None:  # a backward pass before the job started (Job's first step)
                        gradient.copy_(tensor.grad)
                    tensor.grad = gradient
                    self.views.append((tensor, gradient))
                    self.view_offsets.append(offset)
                offset += n
            if self.staged:
                self._copy(self.values, self.accord_values)  # widening is exact

    def to_module(self):
        """accord's float32 values of the range, rounded into the module's copy."""
        if self.staged:
            self._copy(self.accord_values, self.values)

    def to_accord(self, begin=None, end=None):
        """Into accord's flat gradients: the parameters' gradients widened to float32, or the
        buffers' current values (which accord averages or broadcasts in place of gradients); only
        flat positions [begin, end) of the range when given."""
        first = 0 if begin is None else begin - self.begin
        last = self.end - self.begin if end is None else end - self.begin
        if self.gradients is None:
            self._copy(self.values[first:last], self.accord_gradients[first:last])
        elif self.staged:
            self._copy(self.gradients[first:last], self.accord_gradients[first:last])

    def zero_gradients(self):
        if self.gradients is not None:
            self.gradients.zero_()

    def _copy(self, source, target):
        if self._pinned is None:
            target.copy_(source)
        else:
            pinned = self._pinned[:source.numel()]
            pinned.copy_(source)
            target.copy_(pinned)
