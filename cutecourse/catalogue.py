"""The course's notebooks, one list: for each its file, title, what it teaches, which GPU runs its
kernels and what a reader without that GPU sees. ``cutecourse.course`` re-exports it and adds how
long each takes; the README table, the site, the agendas and the seat check read it there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Notebook:
    """One notebook of the course, as the README table and the site describe it."""

    number: str  # "01" ... "08": the syllabus order
    file: str  # file name under notebooks/ (exercises/ and solutions/ use the same stem)
    title: str
    learn: str  # what you learn, one line of markdown
    gpu: str  # the GPU its kernels run on
    without: str  # what a reader without that GPU sees
    targets: tuple[str, ...]  # cutecourse.modes targets of its kernels: "any", "sm_90a", "sm_100a"

    @property
    def path(self) -> Path:
        return ROOT / "notebooks" / self.file

    @property
    def exercise_files(self) -> list[Path]:
        """``exercises/NN*.ipynb``: the notebook's exercises (01 has a second set, 01b)."""
        return sorted((ROOT / "exercises").glob(f"{self.number}*.ipynb"))

    def solution_file(self, exercise: Path) -> Path:
        return ROOT / "solutions" / exercise.name


NOTEBOOKS: tuple[Notebook, ...] = (
    Notebook(
        "01", "01_layouts_and_elementwise_add.ipynb", "Layouts and elementwise add",
        "layouts as functions, printing at trace vs run time, `zipped_divide`, a naive and a 128-bit "
        "vectorized kernel, reading PTX/SASS, measuring GB/s",
        "any NVIDIA GPU, sm_80+",
        "kernels compiled for sm_90a; load widths read from PTX and SASS; committed H100 figures shown",
        ("any",)),
    Notebook(
        "02", "02_tv_layouts.ipynb", "Thread-value layouts",
        "block tile → thread tile, `make_layout_tv`, coalescing, a layout explorer, a tuning sweep",
        "any NVIDIA GPU, sm_80+",
        "TV pictures and explorer work; sweep results from the committed H100 run",
        ("any",)),
    Notebook(
        "03", "03_hopper_gemm_prefetch.ipynb", "Hopper GEMM with prefetch",
        "TMA, mbarriers, the smem pipeline, WGMMA, naive vs prefetching mainloop, stage count",
        "Hopper (H100/H200)",
        "sm_90a compile: wgmma/TMA/mbarrier counts; pipeline widget and timeline model on the CPU",
        ("sm_90a",)),
    Notebook(
        "04", "04_compiler_pipelining.ipynb", "Letting the compiler pipeline",
        "`cutlass.range(..., prefetch_stages=)`, what the compiler needs, proof from its diagnostics "
        "and generated code",
        "Hopper",
        "the compiler's diagnostic and the generated loop are shown",
        ("sm_90a",)),
    Notebook(
        "05", "05_tma_multicast.ipynb", "TMA multicast and clusters",
        "clusters, multicast masks and when their closed form holds, L2 traffic",
        "Hopper",
        "multicast planner, cluster widget, `multicast::cluster` loads in the PTX",
        ("sm_90a",)),
    Notebook(
        "06", "06_kernel_schedules.ipynb", "Kernel schedules",
        "CUTLASS 2.x vs 3.x, the persistent producer and consumer loops and the tile scheduler "
        "(static, dynamic), warp specialization and `setmaxnreg`, cooperative vs ping-pong and its "
        "ordered barrier, epilogue schedules (smem + TMA store vs direct stores), stream-K's split "
        "and fix-up, programmatic dependent launch, which schedule when and why the 700 W cap "
        "disagrees with the talk",
        "Hopper",
        "the kernels' code beside their PTX, timeline model and widget, ordered-barrier and stream-K "
        "models and pictures, one committed H100 table (the rest in `docs/schedules_measured.md`)",
        ("sm_90a",)),
    Notebook(
        "07", "07_grouped_block_scaled_gemm.ipynb", "Grouped, block-scaled GEMM",
        "grouped GEMM for MoE experts, the group walk on the GPU beside its CPU model, per-CTA "
        "tensor maps (host templates, initialised by their owner warp, rewritten with a release and "
        "an acquire), NVFP4 with its per-tensor scale, MXFP8 and both MX rounding rules, FP8 block "
        "scales promoted in software on Hopper (`_issue`, `_promote`), a Blackwell primer (tensor "
        "memory, one-thread `tcgen05.mma`, `tcgen05.cp` and `tcgen05.ld`, UMMA vs WGMMA, 2-CTA MMA), "
        "the scale-factor layout as a CuTe layout, the Blackwell MMA warp beside its PTX",
        "Hopper (grouped GEMM, bf16 and FP8 block-scaled); Blackwell (block-scaled)",
        "scheduler and block-scaling models, the TMEM picture, widgets; every kernel compiled and "
        "inspected (the Hopper grouped GEMMs run and timed on an H100; the Blackwell kernel never run)",
        ("sm_90a", "sm_100a")),
    Notebook(
        "08", "08_mixed_input_gemm.ipynb", "Mixed-input GEMM",
        "int4 weights x bf16 (or fp16) activations for decode: the roofline across M, group-wise quantization "
        "and its error, CUTLASS 2.x (weights interleaved offline, magic-number conversion) and 3.x "
        "(register-sourced `wgmma`, the operand swap, M on wgmma's N, split-K), the offline reorder "
        "as a CuTe layout and who holds which weights, the `lop3` / `sub` / `mul` conversion beside "
        "its PTX, a CPU model of every thread's conversion bit for bit, where int4 stops paying "
        "(and the large-M route: W' dequantized once, then the dense GEMM)",
        "Hopper (H100/H200)",
        "the roofline model with the measured points, quantization errors, pictures; the "
        "kernel compiled for sm_90a and its conversion and `wgmma` read in the PTX; CPU model bit "
        "for bit against torch's dequantization",
        ("sm_90a",)),
)


def notebook(number: str) -> Notebook:
    """The notebook numbered ``number`` ("01" ... "08"); a clear error for any other."""
    for nb in NOTEBOOKS:
        if nb.number == number:
            return nb
    raise KeyError(f"no notebook {number!r}; the course has {', '.join(n.number for n in NOTEBOOKS)}")
