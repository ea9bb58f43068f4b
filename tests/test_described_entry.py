"""The host layer's last step for described kernels: ``DescribedEntry.launch`` keeps every
attribute a launcher hands it, the kernel included (a launcher names it ``kernel=``, as the
benchmarks read ``fn.kernel``). The GPU parts (the device check, the compile) are replaced here
so that the wiring is tested on any machine."""

from __future__ import annotations

import torch

from cutecourse import modes
from cutecourse.kernels import mixed_input, operands


def test_launch_keeps_the_kernel_as_an_attribute(monkeypatch):
    monkeypatch.setattr(modes, "require_gpu", lambda arch=None: None)
    monkeypatch.setattr(operands, "arguments", lambda kernel, tensors: tuple(tensors.values()))
    monkeypatch.setattr(operands, "compile_once", lambda kernel, args, key=None: (lambda *a: None))
    kernel = mixed_input.ENTRY.kernel(tile_m=16)
    fn = mixed_input.ENTRY.launch(kernel, {"x": torch.zeros(1, 256)}, y="y", plan="plan", kernel=kernel)
    assert fn.kernel is kernel and fn.y == "y" and fn.plan == "plan"
