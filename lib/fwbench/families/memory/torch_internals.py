"""Every private or experimental torch API the memory family relies on, in one place.

These APIs change between torch releases without notice. Keeping them here means a new torch
version breaks one small module, with an error that names the missing piece and the torch version
the family was written against, instead of failing deep inside the tracer or the profiler.

- ``make_fx`` (torch.fx.experimental.proxy_tensor): traces forward, backward and optimizer step
  into one aten-level graph.
- The profiler's event tree (``kineto_results.experimental_event_tree``): the CPU allocator's
  allocation events with their running total, which is how peak memory is read on CPU.
- ``torch._functorch.config.activation_memory_budget``: the knob of torch.compile's min-cut
  partitioner that the baselines sweep.
- ``torch._inductor.config.fallback_random``: Inductor draws random numbers from torch's generator,
  as eager does, so a compiled step's dropout masks can be checked against eager's (``gate.py``).
- ``torch._inductor.config.reorder_for_locality``: Inductor's pass that moves ops next to their
  consumers; on, it undid a compiled plan's saving (the compiled curve can turn it off).
- ``OpOverload`` and its ``_schema``: which op outputs alias which inputs, and which ops write
  to their inputs; this is how the analysis tells views and in-place ops from fresh storage.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
from dataclasses import dataclass

import torch

# The torch release this module was last checked against; others may work.
_CHECKED_TORCH_VERSION = "2.14"


class _UnsupportedTorchError(RuntimeError):
    """The installed torch lacks a private API this family needs."""


def torch_version() -> str:
    return torch.__version__


def _unsupported(what: str, err: Exception) -> _UnsupportedTorchError:
    return _UnsupportedTorchError(
        f"torch {torch_version()} does not provide {what} as the memory family expects "
        f"(checked against torch {_CHECKED_TORCH_VERSION}): {type(err).__name__}: {err}"
    )


def make_fx_fake(fn):
    """``make_fx`` in fake mode: tracing never runs real kernels or mutates real tensors."""
    try:
        from torch.fx.experimental.proxy_tensor import make_fx
    except ImportError as err:
        raise _unsupported("torch.fx.experimental.proxy_tensor.make_fx", err) from err
    return make_fx(fn, tracing_mode="fake")


@contextlib.contextmanager
def _config_patch(module: str, name: str, value):
    """One setting of a torch config module (``torch._functorch.config``, ...) for the block."""
    try:
        patch = importlib.import_module(module).patch(**{name: value})
    except (ImportError, AttributeError) as err:
        raise _unsupported(f"{module}.{name}", err) from err
    with patch:
        yield


def activation_memory_budget(fraction: float):
    """torch.compile's partitioner keeps about ``fraction`` of the activation memory it would save."""
    return _config_patch("torch._functorch.config", "activation_memory_budget", float(fraction))


def inductor_fallback_random():
    """Inductor draws its random numbers as eager torch does, for the compilations in the block."""
    return _config_patch("torch._inductor.config", "fallback_random", True)


def inductor_locality(on: bool):
    """Inductor's ``reorder_for_locality`` pass on (its default) or off, for the compilations
    that happen inside the block (torch.compile compiles on the first call)."""
    return _config_patch("torch._inductor.config", "reorder_for_locality", bool(on))


@dataclass(frozen=True)
class _AllocationTrace:
    """CPU allocator events seen by the profiler, in time order.

    ``totals[i]`` is the running total of bytes allocated since profiling began, right after event
    ``i``. Memory that existed before profiling began is absent: the profiler cannot see its size,
    so its release is not reported either.
    """

    times_ns: list[int]
    totals: list[int]

    def peak(self) -> int:
        return max([0, *self.totals])

    def total_before(self, time_ns: int) -> int:
        i = bisect.bisect_left(self.times_ns, time_ns)
        return self.totals[i - 1] if i > 0 else 0

    def peak_between(self, start_ns: int, end_ns: int) -> int:
        lo = bisect.bisect_left(self.times_ns, start_ns)
        hi = bisect.bisect_right(self.times_ns, end_ns)
        return max([self.total_before(start_ns), *self.totals[lo:hi]])


def _event_tree(prof):
    try:
        return prof.profiler.kineto_results.experimental_event_tree()
    except AttributeError as err:
        raise _unsupported("the profiler's experimental_event_tree", err) from err


def _walk(nodes):
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


def cpu_allocation_trace(prof) -> _AllocationTrace:
    """The CPU allocation events of a finished ``torch.profiler.profile(profile_memory=True)``."""
    events = []
    for node in _walk(_event_tree(prof)):
        fields = node.extra_fields
        if type(fields).__name__ != "_ExtraFields_Allocation":
            continue
        try:
            if fields.device.type != "cpu":
                continue
            events.append((node.start_time_ns, int(fields.total_allocated)))
        except AttributeError as err:
            raise _unsupported("allocation events with device and total_allocated", err) from err
    events.sort()
    return _AllocationTrace([t for t, _ in events], [total for _, total in events])


def labelled_ranges(prof, prefix: str) -> dict[str, list[tuple[int, int]]]:
    """Start/end times of ``record_function`` ranges whose label starts with ``prefix``."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for node in _walk(_event_tree(prof)):
        name = node.name
        if name.startswith(prefix):
            ranges.setdefault(name[len(prefix) :], []).append(
                (node.start_time_ns, node.end_time_ns)
            )
    for spans in ranges.values():
        spans.sort()
    return ranges


def is_aten_style_op(target) -> bool:
    """Whether an fx node target is an operator overload (aten or custom), with a schema."""
    return isinstance(target, torch._ops.OpOverload)


def op_schema(target):
    """The operator's schema: arguments and returns with their alias annotations."""
    try:
        return target._schema
    except AttributeError as err:
        raise _unsupported("OpOverload._schema", err) from err


def overload_name(target) -> str:
    try:
        return target._overloadname
    except AttributeError as err:
        raise _unsupported("OpOverload._overloadname", err) from err
