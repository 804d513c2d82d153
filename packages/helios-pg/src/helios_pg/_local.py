"""An in-process c10d backend for a world of one process.

Why it exists: ``helios_pg.init`` runs a direct world-size-one program on a local
``HashStore`` so that it needs no ``MASTER_ADDR`` and no port. The store alone is not
enough: gloo's transport device always opens a listening TCP socket on 127.0.0.1 when
its process group is created, even for one rank, and creating and destroying that
group takes about 12 ms. A world of one has no peer to talk to, so every collective is a local
identity or copy. This backend does exactly that, in Python, through the ``PyBackend``
trampoline that torch uses for its own pure-Python backends: no socket, no port, no
thread, and an init that is mostly torch's own bookkeeping.

Every collective that ``torch.distributed`` can route to a backend behaves as it does
at world size one on gloo or nccl, including their argument checks: a size or list
length that does not fit is a ``RuntimeError`` (as gloo and nccl raise it), a dtype
that differs is a ``ValueError`` (as ``torch.distributed`` raises it), ``PREMUL_SUM``
multiplies by its factor (as on nccl) and ``AVG`` leaves integers unchanged (as on
nccl). Point-to-point operations raise a ``RuntimeError``: there is no other rank.
Work handles are complete when returned: ``wait()`` (with or without a timeout)
returns True at once and ``get_future()`` is done, holding what gloo's futures hold.
One torch limitation: torch wraps a Python backend's work in a ``PyWorkHolder`` that
forwards only ``wait`` and ``get_future``, so on the handle that ``torch.distributed``
returns ``is_completed()`` is False and ``result()`` raises; the handle this backend
makes reports both correctly.

Register the backend with :func:`register_local_backend`, then create the group with
``torch.distributed.init_process_group(backend=LOCAL_BACKEND, store=HashStore(),
rank=0, world_size=1)``. Groups of more than one rank are refused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Final, TypeAlias, cast

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOp,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    Work,
    _DistributedBackendOptions,
)
from torch._C._distributed_c10d import Backend as C10dBackend
from torch.futures import Future

__all__ = ["LOCAL_BACKEND", "register_local_backend"]

LOCAL_BACKEND: Final = "helios-local"
"""Name under which :func:`register_local_backend` registers the in-process backend."""

_DEVICES: Final = ["cpu", "cuda"]
_BITWISE_OPS: Final = {ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR", ReduceOp.BXOR: "BXOR"}
_IDENTITY_OPS: Final = {ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX}
_register_lock = threading.Lock()

# What torch hands a backend as a reduction: normally a ReduceOp, whose factor
# carries PREMUL_SUM's multiplier; the options' stubs also allow a bare RedOpType.
_AnyReduceOp: TypeAlias = ReduceOp | ReduceOp.RedOpType


def _fail(message: str) -> RuntimeError:
    return RuntimeError(f"{LOCAL_BACKEND}: {message}")


def _check_root(root: int, what: str) -> None:
    if root != 0:
        message = f"{what}: invalid root rank {root}; the only rank of a world of one is 0"
        raise _fail(message)


def _check_count(items: Sequence[object], what: str) -> None:
    if len(items) != 1:
        message = (
            f"{what}: got a list of {len(items)}, expected 1 (one entry per rank, "
            "and the world has one rank)"
        )
        raise _fail(message)


def _check_dtype(output: torch.Tensor, input_: torch.Tensor, what: str) -> None:
    if output.dtype != input_.dtype:
        message = (
            f"{LOCAL_BACKEND}: {what}: output dtype {output.dtype} differs from input "
            f"dtype {input_.dtype}; collectives do not convert dtypes"
        )
        raise ValueError(message)


def _check_device(output: torch.Tensor, input_: torch.Tensor, what: str) -> None:
    if output.device != input_.device:
        message = f"{what}: output is on {output.device} but input is on {input_.device}"
        raise _fail(message)


def _check_same_shape(output: torch.Tensor, input_: torch.Tensor, what: str) -> None:
    _check_dtype(output, input_, what)
    _check_device(output, input_, what)
    if output.shape != input_.shape:
        message = (
            f"{what}: output shape {tuple(output.shape)} differs from input shape "
            f"{tuple(input_.shape)}"
        )
        raise _fail(message)


def _check_same_numel(output: torch.Tensor, input_: torch.Tensor, what: str) -> None:
    _check_dtype(output, input_, what)
    _check_device(output, input_, what)
    if output.numel() != input_.numel():
        message = (
            f"{what}: output has {output.numel()} elements but the input has "
            f"{input_.numel()}; at world size one they must be equal"
        )
        raise _fail(message)


def _copy_flat(output: torch.Tensor, input_: torch.Tensor) -> None:
    # The collective's layout is row-major over the output; at world size one that
    # is the input's row-major order, whatever the two shapes or strides are.
    if output.data_ptr() == input_.data_ptr() and (
        (output.shape == input_.shape and output.stride() == input_.stride())
        or (output.is_contiguous() and input_.is_contiguous())
    ):
        return  # the input is the output (an in-place call): nothing to move
    output.copy_(input_.reshape(output.shape))


def _finish_reduction(tensors: Sequence[torch.Tensor], reduce_op: _AnyReduceOp) -> None:
    """Apply what a reduction over one rank leaves: nothing, or PREMUL_SUM's factor."""
    op_type = reduce_op.op if isinstance(reduce_op, ReduceOp) else reduce_op
    if op_type in _IDENTITY_OPS:
        return
    if op_type == ReduceOp.AVG:
        for tensor in tensors:
            if tensor.dtype == torch.bool:
                raise _fail("cannot use ReduceOp.AVG with boolean inputs")
        return
    if op_type in _BITWISE_OPS:
        for tensor in tensors:
            if tensor.is_floating_point() or tensor.is_complex():
                name = _BITWISE_OPS[op_type]
                message = f"cannot use ReduceOp.{name} with non-integral dtype {tensor.dtype}"
                raise _fail(message)
        return
    if op_type == ReduceOp.PREMUL_SUM and isinstance(reduce_op, ReduceOp):
        factor = reduce_op.factor
        for tensor in tensors:
            if isinstance(factor, torch.Tensor):
                tensor.mul_(factor.to(tensor.device).reshape(()))
            else:
                tensor.mul_(factor)
        return
    message = f"unsupported reduce op {op_type}"
    raise _fail(message)


class _CompletedWork(Work):
    """A work handle for an operation that finished before it was returned."""

    def __init__(self, result: Sequence[torch.Tensor] = ()) -> None:
        super().__init__()
        self._result = list(result)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Return at once: the operation is complete."""
        del timeout
        return True

    def is_completed(self) -> bool:
        """Report completion; always True."""
        return True

    def is_success(self) -> bool:
        """Report success; always True (a failure raises before a handle exists)."""
        return True

    def exception(self) -> None:
        """Report the operation's error; there is none."""
        return

    def result(self) -> list[torch.Tensor]:
        """Return the output tensors, as gloo's work handles do."""
        return list(self._result)

    def synchronize(self) -> None:
        """Do nothing: the operation ran on the caller's stream."""

    def block_current_stream(self) -> None:
        """Do nothing: the operation ran on the caller's stream."""

    def get_future(self) -> Future[list[torch.Tensor]]:
        """Return a completed future whose value is the output tensors."""
        devices: list[int | str | torch.device] = []
        for tensor in self._result:
            if tensor.device.type != "cpu" and tensor.device not in devices:
                devices.append(tensor.device)
        future: Future[list[torch.Tensor]] = Future(devices=devices)
        future.set_result(list(self._result))
        return future


class _LocalBackend(C10dBackend):
    """The c10d backend of a one-rank group: every collective is local.

    Each method is what torch's ``PyBackend`` trampoline calls; its docstring names
    the public ``torch.distributed`` functions that reach it.
    """

    def __init__(self, options: C10dBackend.Options) -> None:
        super().__init__(0, 1)
        self._options = options

    # Identity and configuration.

    def getBackendName(self) -> str:  # noqa: N802 (the trampoline's name)
        """Name this backend (``ProcessGroup.name()``, error messages)."""
        return LOCAL_BACKEND

    @property
    def options(self) -> C10dBackend.Options:
        """Return the backend options (timeout, group name, global ranks)."""
        return self._options

    @property
    def supports_coalescing(self) -> bool:
        """Accept ``_coalescing_manager(device=...)``: start and end are no-ops."""
        return True

    # torch reads these capabilities on every backend (new_group with a bound device
    # reads supports_splitting); a Python backend that leaves one undefined sends the
    # trampoline into endless recursion, so each is answered here.

    @property
    def supports_splitting(self) -> bool:
        """Decline splitting: ``new_group`` builds a fresh one-rank backend instead."""
        return False

    @property
    def supports_shrinking(self) -> bool:
        """Decline shrinking: a group of one has no rank to exclude."""
        return False

    @property
    def supports_reconfigure(self) -> bool:
        """Decline reconfiguration."""
        return False

    @property
    def supports_window(self) -> bool:
        """Decline one-sided windows."""
        return False

    @property
    def _supports_time_estimate(self) -> bool:
        return False

    def set_timeout(self, timeout: timedelta) -> None:
        """Record a new timeout (``ProcessGroup.set_timeout``); nothing ever waits."""
        self._options._timeout = timeout

    def eager_connect_single_device(self, device: torch.device | None) -> None:
        """Do nothing: there is nothing to connect to."""
        del device

    def shutdown(self) -> None:
        """Do nothing (``destroy_process_group``): the backend holds no resources."""

    def abort(self) -> None:
        """Do nothing (``torch.distributed`` abort paths): nothing is in flight."""

    def start_coalescing(self) -> None:
        """Open a coalescing window (``_coalescing_manager(device=...)``)."""

    def end_coalescing(self) -> Work:
        """Close a coalescing window; every operation in it has already run."""
        return _CompletedWork()

    # Reductions.

    def allreduce(self, tensors: list[torch.Tensor], opts: AllreduceOptions) -> Work:
        """``all_reduce`` (dense and sparse), DDP's gradient buckets."""
        _finish_reduction(tensors, opts.reduceOp)
        return _CompletedWork(tensors)

    def allreduce_sparse(self, tensors: list[torch.Tensor], opts: AllreduceOptions) -> Work:
        """``all_reduce`` of sparse tensors with sparse indices."""
        return self.allreduce(tensors, opts)

    def allreduce_coalesced(
        self, tensors: list[torch.Tensor], opts: AllreduceCoalescedOptions
    ) -> Work:
        """``all_reduce_coalesced`` and ``all_reduce`` in a ``_coalescing_manager``."""
        _finish_reduction(tensors, opts.reduceOp)
        return _CompletedWork(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: ReduceOptions) -> Work:
        """``reduce``."""
        _check_root(opts.rootRank, "reduce")
        _finish_reduction(tensors, opts.reduceOp)
        return _CompletedWork(tensors)

    def reduce_scatter(
        self,
        outputs: list[torch.Tensor],
        inputs: list[list[torch.Tensor]],
        opts: ReduceScatterOptions,
    ) -> Work:
        """``reduce_scatter``."""
        for output, input_list in zip(outputs, inputs, strict=True):
            _check_count(input_list, "reduce_scatter input")
            _check_same_shape(output, input_list[0], "reduce_scatter")
            _copy_flat(output, input_list[0])
        _finish_reduction(outputs, opts.reduceOp)
        return _CompletedWork(outputs)

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: ReduceScatterOptions
    ) -> Work:
        """``reduce_scatter_single``, ``reduce_scatter_tensor``, ``_reduce_scatter_base``."""
        _check_same_numel(output, input, "reduce_scatter_single")
        _copy_flat(output, input)
        _finish_reduction([output], opts.reduceOp)
        return _CompletedWork([output])

    def reduce_scatter_single_coalesced(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: ReduceScatterOptions,
    ) -> Work:
        """``reduce_scatter_single`` in a ``_coalescing_manager``."""
        for output, input_ in zip(outputs, inputs, strict=True):
            _check_same_numel(output, input_, "reduce_scatter_single")
            _copy_flat(output, input_)
        _finish_reduction(outputs, opts.reduceOp)
        return _CompletedWork(outputs)

    # Broadcast, gathers and scatters.

    def broadcast(self, tensors: list[torch.Tensor], opts: BroadcastOptions) -> Work:
        """``broadcast``, ``broadcast_object_list``, ``_broadcast_coalesced`` (DDP)."""
        _check_root(opts.rootRank, "broadcast")
        return _CompletedWork(tensors)

    def allgather(
        self,
        outputs: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: AllgatherOptions,
    ) -> Work:
        """``all_gather``, ``all_gather_object``.

        ``outputs[i]`` holds one tensor per rank for ``inputs[i]``.
        """
        del opts
        gathered: list[torch.Tensor] = []
        for output_list, input_ in zip(outputs, inputs, strict=True):
            _check_count(output_list, "all_gather output")
            _check_same_shape(output_list[0], input_, "all_gather")
            _copy_flat(output_list[0], input_)
            gathered.extend(output_list)
        return _CompletedWork(gathered)

    def allgather_coalesced(
        self,
        outputs: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: AllgatherOptions,
    ) -> Work:
        """``all_gather_coalesced``.

        Unlike ``allgather``, ``outputs[r]`` holds rank ``r``'s copy of every input.
        """
        del opts
        _check_count(outputs, "all_gather_coalesced output")
        if len(outputs[0]) != len(inputs):
            message = (
                f"all_gather_coalesced: {len(outputs[0])} output tensors for "
                f"{len(inputs)} inputs; they must match"
            )
            raise _fail(message)
        for output, input_ in zip(outputs[0], inputs, strict=True):
            _check_same_shape(output, input_, "all_gather_coalesced")
            _copy_flat(output, input_)
        return _CompletedWork(outputs[0])

    def all_gather_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: AllgatherOptions
    ) -> Work:
        """``all_gather_single``, ``all_gather_into_tensor``, ``_all_gather_base``."""
        del opts
        _check_same_numel(output, input, "all_gather_single")
        _copy_flat(output, input)
        return _CompletedWork([output])

    def all_gather_single_coalesced(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: AllgatherOptions,
    ) -> Work:
        """``all_gather_single`` in a ``_coalescing_manager``."""
        del opts
        for output, input_ in zip(outputs, inputs, strict=True):
            _check_same_numel(output, input_, "all_gather_single")
            _copy_flat(output, input_)
        return _CompletedWork(outputs)

    def gather(
        self,
        outputs: list[list[torch.Tensor]],
        inputs: list[torch.Tensor],
        opts: GatherOptions,
    ) -> Work:
        """``gather``, ``gather_object``."""
        _check_root(opts.rootRank, "gather")
        _check_count(inputs, "gather input")
        _check_count(outputs, "gather output")
        _check_count(outputs[0], "gather output")
        _check_same_shape(outputs[0][0], inputs[0], "gather")
        _copy_flat(outputs[0][0], inputs[0])
        return _CompletedWork(outputs[0])

    def scatter(
        self,
        outputs: list[torch.Tensor],
        inputs: list[list[torch.Tensor]],
        opts: ScatterOptions,
    ) -> Work:
        """``scatter``, ``scatter_object_list``."""
        _check_root(opts.rootRank, "scatter")
        _check_count(outputs, "scatter output")
        _check_count(inputs, "scatter input")
        _check_count(inputs[0], "scatter input")
        _check_same_shape(outputs[0], inputs[0][0], "scatter")
        _copy_flat(outputs[0], inputs[0][0])
        return _CompletedWork(outputs)

    def alltoall(
        self,
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: AllToAllOptions,
    ) -> Work:
        """``all_to_all``."""
        del opts
        _check_count(outputs, "all_to_all output")
        _check_count(inputs, "all_to_all input")
        _check_same_shape(outputs[0], inputs[0], "all_to_all")
        _copy_flat(outputs[0], inputs[0])
        return _CompletedWork(outputs)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: AllToAllOptions,
    ) -> Work:
        """``all_to_all_single``, with or without split sizes."""
        del opts
        _check_same_numel(output, input, "all_to_all_single")
        for name, tensor, splits in (
            ("input", input, input_split_sizes),
            ("output", output, output_split_sizes),
        ):
            rows = tensor.size(0) if tensor.dim() > 0 else 1
            if splits and (len(splits) != 1 or splits[0] != rows):
                message = (
                    f"all_to_all_single: {name} split sizes {list(splits)} do not cover "
                    f"the {name}'s {rows} rows in one split (world size one)"
                )
                raise _fail(message)
        _copy_flat(output, input)
        return _CompletedWork([output])

    # Synchronization.

    def barrier(self, opts: BarrierOptions) -> Work:
        """``barrier``; on a CUDA device it waits for the current stream, as nccl's does."""
        # torch's stubs type the device as always set; BarrierOptions() leaves it None.
        device = cast("torch.device | None", opts.device)
        # torch.cuda.is_initialized is untyped in torch. Checking it first keeps a
        # CPU-only program on a GPU machine from creating a CUDA context here.
        if (
            device is not None and device.type == "cuda" and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        ):
            torch.cuda.current_stream(device).synchronize()
        return _CompletedWork()

    def monitored_barrier(self, opts: BarrierOptions, wait_all_ranks: bool = False) -> None:
        """``monitored_barrier``: no other rank can be late."""
        del opts, wait_all_ranks

    # Point to point: a world of one has no peer.

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Work:
        """``send``, ``isend``, ``batch_isend_irecv``, ``send_object_list``: refused."""
        del tensors, tag
        message = (
            f"send to dst={dst} at world size one: there is no other rank to receive it; "
            "start more processes (torchrun --nproc-per-node N) or skip point-to-point "
            "communication when torch.distributed.get_world_size() == 1"
        )
        raise _fail(message)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Work:
        """``recv``, ``irecv``, ``batch_isend_irecv``, ``recv_object_list``: refused."""
        del tensors, tag
        message = (
            f"recv from src={src} at world size one: there is no other rank to send it; "
            "start more processes (torchrun --nproc-per-node N) or skip point-to-point "
            "communication when torch.distributed.get_world_size() == 1"
        )
        raise _fail(message)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Work:
        """``recv``/``irecv`` without a source: refused."""
        del tensors, tag
        message = (
            "recv from any source at world size one: there is no other rank to send it; "
            "start more processes (torchrun --nproc-per-node N) or skip point-to-point "
            "communication when torch.distributed.get_world_size() == 1"
        )
        raise _fail(message)


def _create_local_backend(
    opts: _DistributedBackendOptions, backend_options: object | None
) -> _LocalBackend:
    """Build the backend of one group; torch calls this from ``init_process_group``."""
    if opts.group_size != 1:
        message = (
            f"backend {LOCAL_BACKEND!r} runs groups of one rank only, got a group of "
            f"{opts.group_size}; use backend='gloo' or 'nccl' for more ranks"
        )
        raise ValueError(message)
    if backend_options is None:
        options = C10dBackend.Options(LOCAL_BACKEND, timeout=opts.timeout)
    elif isinstance(backend_options, C10dBackend.Options):
        options = backend_options
        options._timeout = opts.timeout
    else:
        message = (
            f"backend {LOCAL_BACKEND!r} takes pg_options of type "
            f"torch.distributed.Backend.Options or None, got {type(backend_options).__name__}"
        )
        raise TypeError(message)
    options.global_ranks_in_group = list(opts.global_ranks_in_group)
    options.group_name = opts.group_id
    return _LocalBackend(options)


def register_local_backend() -> str:
    """Register the in-process world-size-one backend with torch.distributed.

    Safe to call any number of times: a second call finds the backend registered and
    does nothing. The backend never becomes a default: ``init_process_group`` uses it
    only when asked for it by name.

    Returns:
        The backend's name, :data:`LOCAL_BACKEND`, for ``init_process_group(backend=...)``.
    """
    with _register_lock:
        plugin = dist.Backend._plugins.get(LOCAL_BACKEND.upper())
        if plugin is None or plugin.creator_fn is not _create_local_backend:
            dist.Backend.register_backend(
                LOCAL_BACKEND, _create_local_backend, extended_api=True, devices=_DEVICES
            )
    return LOCAL_BACKEND
