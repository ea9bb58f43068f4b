"""``ptx_loops.annotate``: a loop's PTX lines with the notes a notebook gives them (notebooks 03, 04)."""

from cutecourse.ptx_loops import annotate, loops

PTX = """
.visible .entry k(
)
{
$L__BB0_1:
    @%p1 bra $L__BB0_2;            // skip the wait
    mbarrier.try_wait.parity.shared.b64 P1, [%r1], %r2, 100;
    @P1 bra.uni DONE;
$L__BB0_2:
    wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%r3};
    wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%r3};
    cp.async.bulk.tensor.2d A;
    cp.async.bulk.tensor.2d B;
    @%p9 bra $L__BB0_1;
}
"""


def test_annotate_names_each_line_its_note_and_the_back_edge():
    (loop,) = [lp for lp in loops(PTX) if lp.label == "$L__BB0_1"]
    notes = [("try_wait", "wait"), ("mma_async", "an MMA"), ("cp.async.bulk", ["load A", "load B"])]
    out = annotate(PTX, loop, notes, width=20).splitlines()
    assert [ln.split("<- ")[1] for ln in out] == [
        "wait", "an MMA", "an MMA", "load A", "load B", "back-edge: to $L__BB0_1, the next k-tile, if %p9 is true"]
    assert out[0].startswith("  mbarrier.try_wait.p") and len(out[0].split("<-")[0]) == 2 + 20 + 2


def test_annotate_names_forward_branches_when_asked_not_the_spin_loops():
    (loop,) = [lp for lp in loops(PTX) if lp.label == "$L__BB0_1"]
    out = annotate(PTX, loop, {"mma_async": "an MMA"}, branches=True).splitlines()
    assert out[0].split("<- ")[1] == "forward branch: skip to its label if %p1 is true"
    assert not any("bra.uni" in ln for ln in out)
