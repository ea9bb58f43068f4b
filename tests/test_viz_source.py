"""viz.source: the code a notebook shows comes from the package, with its file and lines."""

import pytest

from cutecourse.kernels import hopper_gemm as hg
from cutecourse.kernels import hopper_gemm_cluster as hc
from cutecourse.viz.source import diff_lines, show_diff, show_source, snippet


def test_snippet_of_a_jit_method_has_its_file_and_lines():
    snip = snippet(hg.NaiveHopperGemm.mainloop)
    assert snip.path == "cutecourse/kernels/hopper_gemm.py"
    with open(snip.path) as f:
        lines = f.read().splitlines()
    assert lines[snip.first - 1].strip() == "@cute.jit"  # decorators included
    assert snip.lines[1].startswith("def mainloop(")  # dedented
    assert snip.where == f"{snip.path}:{snip.first}-{snip.first + len(snip.lines) - 1}"


def test_a_piece_between_markers():
    snip = snippet(hg.HopperGemm.kernel, start="# The ring:", stop="# WGMMA views")
    assert snip.lines[0].startswith("# The ring:")
    assert not any("WGMMA views" in ln for ln in snip.lines)
    assert any("sm90.make_ring(" in ln for ln in snip.lines)
    with open(snip.path) as f:
        assert f.read().splitlines()[snip.first - 1].strip() == snip.lines[0].strip()


def test_a_piece_can_keep_its_indentation_in_the_function():
    whole = snippet(hg.HopperGemm.kernel)
    piece = snippet(hg.HopperGemm.kernel, start="# The ring:", stop="# WGMMA views", dedent=False)
    # the method's own 4 spaces go, its body's 4 stay: each line reads as in the whole listing
    assert piece.lines[0] == "    # The ring: full[s] flips when stage s's TMA bytes have landed, empty[s] when every"
    assert piece.lines == whole.lines[piece.first - whole.first:piece.first - whole.first + len(piece.lines)]
    assert snippet(hg.HopperGemm.kernel, start="# The ring:").lines[0].startswith("# The ring:")


def test_a_marker_that_moved_is_an_error():
    with pytest.raises(ValueError, match="no line"):
        snippet(hg.HopperGemm.kernel, start="# a comment that is not there")
    with pytest.raises(ValueError, match="no line after"):
        snippet(hg.HopperGemm.kernel, start="# The ring:", stop="# not there either")


def test_diff_of_the_cluster_step(capsys):
    lines = diff_lines(hg.HopperGemm.mainloop_done, hc.ClusterHopperGemm.mainloop_done)
    assert "+    cute.arch.cluster_arrive()" in lines
    show_diff(hg.HopperGemm.mainloop_done, hc.ClusterHopperGemm.mainloop_done, title="step")
    show_source(hg.HopperGemm.tile_coord)
    out = capsys.readouterr().out  # outside IPython: plain text, with file:line
    assert "step  cutecourse/kernels/hopper_gemm_kernel.py:" in out and "-> cutecourse/kernels/hopper_gemm_cluster.py:" in out
    assert "cute.arch.block_idx()" in out


def test_a_listing_keeps_its_decorators_when_the_function_starts_at_its_def(tmp_path):
    """Once the DSL has compiled a function in a process, the function object it keeps starts at
    the `def` line; the listing (and its line numbers) must be the same as before the compile."""
    src = tmp_path / "kernels.py"
    src.write_text("def deco(f):\n    return f\n\n\n@deco\ndef add(x):\n    return x + 1\n")
    namespace: dict = {}
    exec(compile("\n" * 5 + "def add(x):\n    return x + 1\n", str(src), "exec"), namespace)  # noqa: S102
    piece = snippet(namespace["add"])
    assert piece.first == 5 and piece.lines == ("@deco", "def add(x):", "    return x + 1")
