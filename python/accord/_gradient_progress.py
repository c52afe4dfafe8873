"""Backward's progress told to accord, as torch DDP's reducer marks parameters ready: a hook on
each trained parameter's gradient accumulator (autograd's AccumulateGrad node, which runs once
per backward after the parameter's gradient is complete) notes it final, and whenever the run
of final gradients at the end of accord's flat buffer has grown by a bucket's worth, the worker
hears of it (Worker.gradients_final_from). accord adds that run into its sum at once and, for
DDP's buckets (JobConfig.bucket_cap_mb), reduces it while the rest of backward goes on.

For a FlatModule whose flat buffers are on the host: a float32 host parameter's gradient is then
final in place when its hook runs; any other (bfloat16, float16, or a GPU module's) the hook
widens into the flat buffer, and unscales where a loss scale was used (FlatModule.finish_gradient),
so collect_gradients leaves it alone. A gradient that is not finite there stops the reports
(no bucket carries it) and step() raises FloatingPointError naming it. Buffers (BatchNorm's
statistics) were updated by forward, so they go into the flat gradients when backward starts.
A parameter whose gradient arrives twice in one micro-batch (two backward passes before
step()) is an error, as in torch DDP: its first gradient was already sent."""


class GradientProgress:
    def __init__(self, flat):
        self._flat = flat
        self._begins = [begin for _, begin in flat._slots]  # each trained parameter's first flat position
        # Held: autograd keeps a leaf's accumulator (and its hooks) only while someone does.
        self._accumulators = []
        for index, (p, _) in enumerate(flat._views):
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._hook(index))
            self._accumulators.append(accumulator)
        self._worker = None
        self.buffers_sent = False
        self.finished, self.overflow = [False] * len(self._begins), None

    @staticmethod
    def eligible(flat):
        """Whether the hooks can finish backward's gradients in accord's flat buffer: where it is
        on the host (a CUDA flat buffer would need backward's stream waited for first)."""
        return flat.gradients.device.type == "cpu"

    def arm(self, worker, request):
        """`request`'s backward comes next: report its progress to `worker` when accord wants it."""
        wanted = request is not None and request.gradient_progress > 0
        self._worker = worker if wanted else None
        self._bucket = request.gradient_progress if wanted else 0
        self.finished = [False] * len(self._begins)  # by the hooks, in this micro-batch
        self.overflow = None  # the flat gradients from a non-finite one's first position on
        self._frontier = len(self._begins)  # views [frontier, n) are final
        self._reported = self._flat.gradients.numel()
        self.buffers_sent = False

    def _hook(self, index):
        def ready(grad_inputs, grad_outputs):
            if self._worker is not None:
                self._ready(index)
        return ready

    def _ready(self, index):
        flat = self._flat
        parameter, view = flat._views[index]
        if self.finished[index]:
            self._worker = None
            raise RuntimeError(f"accord.torch: parameter '{flat._names[index]}' got a second gradient in one "
                               "micro-batch (backward ran twice before step()); its first was already being "
                               "reduced, as in torch DDP: call step() after each backward, or set "
                               "bucket_cap_mb=0 to reduce gradients only at step()")
        self.finished[index] = True
        if parameter.grad is None or parameter.grad.data_ptr() != view.data_ptr():
            view.copy_(parameter.grad)  # autograd made a tensor of its own (grad was None)
            parameter.grad = view
        if not flat.finish_gradient(index):
            self._worker = None  # no bucket carries it; step() raises
            self.overflow = flat.gradients[self._begins[index]:flat.trained]
            return
        if not self.buffers_sent:
            for flat_range in flat.ranges:
                if flat_range.gradients is None:
                    flat_range.to_accord()
            self.buffers_sent = True
        while self._frontier > 0 and self.finished[self._frontier - 1]:
            self._frontier -= 1
        begin = self._begins[self._frontier] if self._frontier < len(self._begins) else flat.trained
        if begin < self._reported and (self._reported - begin >= self._bucket or begin == 0):
            self._worker.gradients_final_from(flat.gradients, begin)
            self._reported = begin
