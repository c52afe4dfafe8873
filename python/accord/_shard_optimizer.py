"""A torch.optim optimizer as accord's update rule (JobConfig.app_optimizer,
<accord/app_optimizer.hpp>): its class, with its param groups' settings, steps each worker's
ZeRO-1 shard of the flat float32 master parameters.

accord calls step() once per shard and round from that worker's communicator thread, with numpy
arrays that borrow the shard's parameters, mean gradient (clipped) and optimizer state. step()
makes an optimizer of the app's class over views of them, one tensor per (param group ∩ shard)
with that group's current settings, and steps it. Its state lives in accord's float32 slots, so
checkpoints, buddy backups and re-sharding carry it: a tensor of one value per element is a
slot, a number (NAdam's mu_product) a slot holding it at every element of its group, and the
step count is accord's (docs/python.md, "A torch.optim optimizer").
"""
import collections
import inspect

import torch

__all__ = ["ShardOptimizer"]


class ShardOptimizer:
    """`optimizer`: the app's, over the module's parameters, never stepped; `ranges[i]`: the
    flat range [begin, end) its param group i holds. Each group's lr (read at every step, so a
    torch.optim.lr_scheduler stepping `optimizer` takes effect) is scaled by accord's schedule.
    ValueError naming the class and why for an optimizer accord cannot step slice by slice,
    before anything trains."""

    def __init__(self, optimizer, ranges):
        self.optimizer, self.ranges = optimizer, ranges
        self.cls, self.defaults = type(optimizer), dict(optimizer.defaults)
        self.name = _name_of(self.cls)
        closure = inspect.signature(self.cls.step).parameters.get("closure")
        if closure is not None and closure.default is inspect.Parameter.empty:
            self._refuse("its step needs a closure that re-evaluates the loss, and accord steps each worker's "
                         "shard of the parameters with no model at hand")
        if _stepped(optimizer.state):
            self._refuse("it has state already (it stepped): accord starts the state at zero; pass a fresh one, "
                         "or resume a job with load_state_dict")
        # Per group: its slots as (state key, slot index, None for elements or the number's
        # example), and an example of its step count (None: it keeps none).
        self.group_slots, self.step_examples, names = [], [], []
        for index, group in enumerate(optimizer.param_groups):
            state = self._probe(index, _settings_of(group))
            slots = []
            for key, value in state.items():
                if key == "step" or value is None:
                    continue
                if key not in names:
                    names.append(key)
                elementwise = torch.is_tensor(value) and value.shape == (3,)
                slots.append((key, names.index(key), None if elementwise else value))
            self.group_slots.append(slots)
            self.step_examples.append(state.get("step"))
        self.slot_names, self.slots = tuple(names), len(names)

    def step(self, begin, parameters, gradients, state, step, learning_rate_factor):
        """One step of the flat parameters [begin, begin + len(parameters)) (accord's call).
        Returns the first param group's learning rate it used, which StepMetrics reports."""
        used_rate = self.optimizer.param_groups[0]["lr"] * learning_rate_factor
        parameters, gradients, state = torch.from_numpy(parameters), torch.from_numpy(gradients), torch.from_numpy(state)
        end = begin + len(parameters)
        groups, runs = [], []
        for index, (first, last) in enumerate(self.ranges):
            low, high = max(first, begin) - begin, min(last, end) - begin
            if low >= high:
                continue
            view = parameters[low:high]
            view.grad = gradients[low:high]
            settings = _settings_of(self.optimizer.param_groups[index])
            settings["lr"] = settings["lr"] * learning_rate_factor
            groups.append(dict(settings, params=[view]))
            runs.append((view, index, state[:, low:high]))
        if not groups:
            return used_rate
        shard = self.cls(groups, **self.defaults)
        if step > 1:  # at the first step the class makes its own state, as in torch
            for view, index, values in runs:
                shard.state[view] = self._state_of(index, values, step - 1)
        shard.step()
        for view, index, values in runs:
            kept = shard.state[view]
            for key, slot, number in self.group_slots[index]:
                if number is None:
                    if kept[key].data_ptr() != values[slot].data_ptr():
                        values[slot].copy_(kept[key])
                else:
                    values[slot].fill_(float(kept[key]))
        return used_rate

    def load_state(self, slots, steps, offsets):
        """The app's optimizer's state as torch keeps it, from accord's gathered `slots` (a row
        per slot over the flat parameters) after `steps` steps: its state_dict() then holds
        them. `offsets`: (parameter, its first flat position). The state is replaced at once,
        so a state_dict() the app's thread takes meanwhile sees the old one or the new."""
        slots = torch.from_numpy(slots)
        at = {id(p): offset for p, offset in offsets}
        state = collections.defaultdict(dict)
        for index, group in enumerate(self.optimizer.param_groups):
            for p in group["params"]:
                if steps == 0 or id(p) not in at:  # not stepped yet, or frozen: accord holds none of it
                    continue
                state[p] = self._state_of(index, slots[:, at[id(p)]:at[id(p)] + p.numel()].clone(), steps)
                for key, _, number in self.group_slots[index]:
                    if number is None:  # one value per element, shaped as the parameter
                        state[p][key] = state[p][key].view_as(p)
        self.optimizer.state = state

    def _state_of(self, index, values, steps_done):
        """Torch's state of a run after `steps_done` steps, its tensors views of accord's slots."""
        state = {key: values[slot] if number is None else _like(number, values[slot, 0].item())
                 for key, slot, number in self.group_slots[index]}
        if self.step_examples[index] is not None:
            state["step"] = _like(self.step_examples[index], steps_done)
        return state

    def _probe(self, index, settings):
        """Two steps of param group `index`'s settings on one tensor of 6 values and on two of 3
        holding the same: they must agree (the update of an element is its own), and the state must
        be elements and numbers. Returns the state of one of the tensors of 3."""
        whole = torch.linspace(-1, 1, 6) + 0.05
        halves = [whole[:3].clone(), whole[3:].clone()]
        try:
            whole_optimizer = self.cls([dict(settings, params=[whole])], **self.defaults)
            halves_optimizer = self.cls([dict(settings, params=halves)], **self.defaults)
            for gradient in (torch.linspace(0.5, -0.3, 6), torch.linspace(-0.2, 0.4, 6)):
                whole.grad, halves[0].grad, halves[1].grad = gradient, gradient[:3], gradient[3:]
                whole_optimizer.step()
                halves_optimizer.step()
        except Exception as error:  # the class's own refusal (a sparse gradient wanted, fused on the CPU, ...)
            self._refuse(f"param group {index}'s settings fail on accord's flat float32 CPU shards: "
                         f"{type(error).__name__}: {error}")
        if not torch.equal(whole, torch.cat(halves)):
            self._refuse("its update of an element depends on the other elements of its tensor (a norm or a "
                         "shape), but accord steps flat slices of the parameters")
        state = halves_optimizer.state[halves[0]]
        for key, value in state.items():
            if value is None or (torch.is_tensor(value) and value.shape in ((3,), ())) or isinstance(value, (int, float)):
                continue
            self._refuse(f"its state '{key}' is neither one value per parameter element nor one number")
        return state

    def _refuse(self, why):
        raise ValueError(f"accord.torch: {self.name} cannot be accord's update rule: {why}")


def _stepped(state):
    """Whether an optimizer's state is past its start (Adagrad makes its state when constructed)."""
    for entry in state.values():
        step = entry.get("step")
        if (float(step) > 0) if step is not None else any(torch.is_tensor(value) for value in entry.values()):
            return True
    return False


def _settings_of(group):
    return {key: value for key, value in group.items() if key != "params"}


def _like(example, number):
    """`number` as the type (a tensor's dtype and shape, or int or float) of `example`."""
    if torch.is_tensor(example):
        return torch.tensor(number, dtype=example.dtype).reshape(example.shape)
    return type(example)(number)


def _name_of(cls):
    if getattr(torch.optim, cls.__name__, None) is cls:
        return f"torch.optim.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"
