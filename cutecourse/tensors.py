"""Check torch operands before they reach a kernel.

A kernel compiled for 16-byte vector loads reads garbage (or faults) when handed a tensor whose
address is only 2-byte aligned; one compiled for fp16 misreads bf16 bits. These checks run on
the Python side, before ``cute.compile`` or a launch, and name the problem and the fix.
"""

from __future__ import annotations

from typing import Iterable

from .errors import AlignmentError, DeviceError, DTypeError, LayoutError, ShapeError


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_dtypes(tensors: dict, allowed: Iterable) -> None:
    """All tensors share one dtype, and it is one of ``allowed``."""
    allowed = tuple(allowed)
    names = ", ".join(dtype_name(d) for d in allowed)
    first_name, first = next(iter(tensors.items()))
    if first.dtype not in allowed:
        raise DTypeError(f"{first_name} is {dtype_name(first.dtype)}; this kernel handles {names}",
                         f"convert it, e.g. {first_name}.to(torch.float16)")
    for name, t in tensors.items():
        if t.dtype != first.dtype:
            raise DTypeError(f"{name} is {dtype_name(t.dtype)} but {first_name} is {dtype_name(first.dtype)}",
                             "give every operand the same dtype")


def check_same_device(tensors: dict, need_cuda: bool = True) -> None:
    """All tensors live on one device, a CUDA one when ``need_cuda``."""
    first_name, first = next(iter(tensors.items()))
    for name, t in tensors.items():
        if t.device != first.device:
            raise DeviceError(f"{name} is on {t.device} but {first_name} is on {first.device}",
                              "move every operand to the same GPU, e.g. .cuda()")
    if need_cuda and first.device.type != "cuda":
        raise DeviceError(f"the operands are on {first.device}; GPU kernels need CUDA tensors",
                          "create them with device='cuda' (or call .cuda())")


def check_same_shape(tensors: dict) -> None:
    first_name, first = next(iter(tensors.items()))
    for name, t in tensors.items():
        if tuple(t.shape) != tuple(first.shape):
            raise ShapeError(f"{name} has shape {tuple(t.shape)} but {first_name} has {tuple(first.shape)}",
                             "elementwise kernels need operands of one shape (no broadcasting)")


def check_rank(tensors: dict, rank: int) -> None:
    for name, t in tensors.items():
        if t.dim() != rank:
            raise ShapeError(f"{name} has {t.dim()} dimensions; this kernel takes {rank}-D tensors",
                             f"reshape it, e.g. {name}.view(-1, {name}.shape[-1])" if rank == 2 else "")


def check_row_major(tensors: dict) -> None:
    """Contiguous, row-major (the last mode has stride 1)."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise LayoutError(f"{name} is not contiguous (strides {tuple(t.stride())}); the kernel "
                              "assumes row-major memory with stride 1 along the last mode",
                              f"pass {name}.contiguous()")


def check_alignment(tensors: dict, nbytes: int) -> None:
    """Data pointer and leading stride are multiples of ``nbytes`` (e.g. 16 for 128-bit access)."""
    for name, t in tensors.items():
        if t.data_ptr() % nbytes:
            raise AlignmentError(
                f"{name} starts at an address that is not a multiple of {nbytes} bytes "
                f"(it is a view at element offset {t.storage_offset()})",
                "pass a tensor that owns its memory (e.g. .clone()); fresh CUDA allocations are 256-byte "
                "aligned, CPU ones at least 64")
        if t.dim() >= 2 and (t.stride(-2) * t.element_size()) % nbytes:
            raise AlignmentError(
                f"{name}'s rows are {t.stride(-2) * t.element_size()} bytes apart, not a multiple of {nbytes}",
                f"pad the row length to a multiple of {nbytes // t.element_size()} elements")


def check_divisible(name: str, extent: int, by: int, what: str, fix: str) -> None:
    if by <= 0 or extent % by:
        raise ShapeError(f"{name} = {extent} is not a multiple of {by} ({what})", fix)


def check_elementwise(ops: dict, allowed_dtypes: Iterable, need_cuda: bool = True) -> None:
    """What every elementwise kernel assumes: one dtype it handles, one device (CUDA unless told
    otherwise), 2-D operands of one shape, contiguous row-major memory."""
    check_dtypes(ops, allowed_dtypes)
    check_same_device(ops, need_cuda)
    check_rank(ops, 2)
    check_same_shape(ops)
    check_row_major(ops)
