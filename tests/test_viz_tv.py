"""cutecourse.viz.tv and cutecourse.models.coalescing: TV layouts by CuTe, (thread, value) ->
address, and warp accesses (the numbers in models.coalescing, the pictures in viz.tv)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

import cutecourse  # noqa: F401
from cutecourse import layouts
from cutecourse.errors import LayoutError
from cutecourse.viz import tv as V

# The layouts of the CuTe DSL blog post on elementwise add ("An applied introduction to CuTeDSL"),
# kernels.elementwise_tv.SEED: 128 threads, 4x8 fp16 values each.
SEED = ("(4,32):(32,1)", "(4,8):(8,1)")


def test_the_numbers_are_the_models_and_still_reachable_from_viz_tv():
    """Notebook 02 and its checker call ``viz.tv.address_map`` / ``warp_accesses``: the same
    functions as the model's, not copies."""
    from cutecourse.models import coalescing

    for name in ("address_map", "vector_width", "warp_accesses", "tv_layout", "Access", "WARP"):
        assert getattr(V, name) is getattr(coalescing, name), name
    acc = coalescing.warp_accesses(coalescing.address_map(*SEED, tensor="(64,512):(512,1)"), 128)
    assert acc[0].vector_bits == 128 and acc[0].efficiency == 1.0


def test_address_map_is_the_blog_posts_composition():
    # The blog post prints tidfrgA = ((32,4),(8,4)):((8,8192),(1,2048)) for a row-major tensor with
    # 2048 columns; the same TV layout on a 16x2048 tensor gives the same map.
    a = V.address_map(*SEED, tensor="(16,2048):(2048,1)")
    assert a.layout == "((32,4),(8,4)):((8,8192),(1,2048))" and a.base == 0


@pytest.mark.parametrize("tensor,block", [("(64,512):(512,1)", 0), ("(64,512):(512,1)", 5),
                                          ("(32,512):(1,32)", 1), ("((4,8),(2,256)):((2,2048),(1,8))", 1)])
def test_address_map_equals_tile_coordinate_then_tensor_layout(tensor, block):
    tv = V.tv_layout(*SEED)
    a = V.address_map(tv, tensor=tensor, block=block)
    T = layouts.evaluate(tensor)
    M, N = tv.tiler
    rows = layouts.size(T.modes[0]) // M
    bm, bn = block % rows, block // rows  # tiles are numbered column-major, like everything
    for t in range(0, tv.threads, 7):
        for v in range(0, tv.values, 5):
            m, n = tv.coord_of(t, v)
            want = T.offset((bm * M + m, bn * N + n))
            assert a.base + a.offsets[t + tv.threads * v] == want


def test_coalesced_seed_config_loads_128_bits_and_wastes_nothing():
    tv = V.tv_layout(*SEED)
    a = V.address_map(tv, tensor="(64,512):(512,1)")
    assert V.vector_width(a, tv.threads, elem_bytes=2) == 8
    acc = V.warp_accesses(a, tv.threads, warp=1, elem_bytes=2)
    assert len(acc) == 4 and all(x.vector_bits == 128 for x in acc)
    assert all(x.bytes_requested == 512 and x.sectors == 16 and x.lines == 4 for x in acc)
    assert acc[0].efficiency == 1.0


def test_threads_down_the_columns_of_a_row_major_tensor_waste_half():
    tv = V.tv_layout("(32,4):(1,32)", "(4,8):(8,1)")  # consecutive threads on consecutive rows
    a = V.address_map(tv, tensor="(256,512):(512,1)")
    acc = V.warp_accesses(a, tv.threads, elem_bytes=2)
    assert acc[0].vector_bits == 128
    assert acc[0].lines == 32 and acc[0].sectors == 32 and acc[0].efficiency == 0.5


def test_one_value_per_row_is_a_scalar_load():
    tv = V.tv_layout("(4,32):(32,1)", "(4,1):(1,1)")
    a = V.address_map(tv, tensor="(64,512):(512,1)")
    acc = V.warp_accesses(a, tv.threads, elem_bytes=2)
    assert acc[0].vector_bits == 16 and acc[0].bytes_requested == 64 and acc[0].efficiency == 1.0
    # fp32 elements with 4 values per thread along n: 128-bit again
    tv4 = V.tv_layout("(4,32):(32,1)", "(1,4):(4,1)")
    a4 = V.address_map(tv4, tensor="(8,256):(256,1)")
    assert V.warp_accesses(a4, tv4.threads, elem_bytes=4)[0].vector_bits == 128


def test_errors():
    with pytest.raises(LayoutError, match="does not divide the tensor"):
        V.address_map(*SEED, tensor="(24,512):(512,1)")
    with pytest.raises(LayoutError, match="rank 1 but the tile"):
        V.address_map(*SEED, tensor="4096:1")
    with pytest.raises(LayoutError, match="block 8 does not exist"):
        V.address_map(*SEED, tensor="(64,512):(512,1)", block=8)
    a = V.address_map(*SEED, tensor="(64,512):(512,1)")
    with pytest.raises(LayoutError, match="warp 4 does not exist"):
        V.warp_accesses(a, 128, warp=4)


def test_draw_tv_labels_are_owner_and_value():
    tv = V.tv_layout("(2,4):(4,1)", "(2,2):(2,1)")  # small enough to draw whole
    fig = V.draw_tv(tv)
    ax = fig.axes[0]
    labels = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
              for t in ax.texts if t.get_transform() == ax.transData}
    M, N = tv.tiler
    assert len(labels) == M * N
    for (r, c), text in labels.items():
        assert text == f"T{tv.owner[r, c]}\nV{tv.value[r, c]}"


def test_big_tiles_draw_a_window_and_say_so():
    fig = V.draw_tv(*SEED)
    assert "showing rows 0..15, columns 0..31" in fig.axes[0].get_title()
    fig = V.draw_tv_overview(*SEED)
    assert "4 warps" in fig.axes[0].get_title()


def test_warp_access_and_address_map_figures():
    fig = V.draw_warp_access(*SEED, tensor="(64,512):(512,1)", warp=0)
    assert "4 instructions of 128 bits" in fig._suptitle.get_text()
    notes = [t.get_text() for t in fig.axes[1].texts if "used" in t.get_text()]
    assert len(notes) == 4 and all("100% used" in n for n in notes)
    fig = V.draw_address_map(*SEED, tensor="(64,512):(512,1)", block=1, threads=4)
    ax = fig.axes[0]
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
             for t in ax.texts if t.get_transform() == ax.transData}
    a = V.address_map(*SEED, tensor="(64,512):(512,1)", block=1)
    assert cells[(3, 9)] == str(a.base + a.offsets[3 + 128 * 9])


# ---- the interactive view, driven without a browser ------------------------------------------


@pytest.fixture
def tvx():
    return V.TVExplorer()


def test_tv_explorer_starts_with_the_seed(tvx):
    assert tvx.error is None and tvx.picture.value[:4] == b"\x89PNG"
    assert "tile <b>(16,256)</b>" in tvx.readout.value
    assert "128 bits" in tvx.readout.value and "100%" in tvx.readout.value
    assert tvx.warp.max == 3 and tvx.thread.max == 127


@pytest.mark.parametrize("view", V.VIEWS)
def test_tv_explorer_views_draw_different_pictures(tvx, view):
    before = tvx.picture.value
    tvx.view.value = view
    assert tvx.error is None
    assert (tvx.picture.value != before) == (view != "threads")


def test_tv_explorer_thread_readout(tvx):
    tvx.thread.value = 33
    tv = V.tv_layout(*SEED)
    m, n = tv.coord_of(33, 1)
    assert f"thread 33: V0:" in tvx.readout.value and f"V1: ({m},{n})" in tvx.readout.value


def test_tv_explorer_reports_uncoalesced_configs(tvx):
    tvx.set(thr="(32,4):(1,32)", tensor="(256,512):(512,1)")
    assert tvx.error is None and "50%" in tvx.readout.value
    tvx.set(elem_bits=32, thr="(4,32):(32,1)", val="(1,4):(4,1)", tensor="(8,256):(256,1)")
    assert "128 bits" in tvx.readout.value


@pytest.mark.parametrize("field,value,words", [
    ("thr", "(4,32):(1,1)", "not a one-to-one"),
    ("val", "(4,8", "nesting"),
    ("tensor", "(24,512):(512,1)", "does not divide"),
    ("tensor", "(0,512):(512,1)", "extent 0"),
])
def test_tv_explorer_errors_are_messages(tvx, field, value, words):
    good = tvx.picture.value
    tvx.set(**{field: value})
    assert tvx.error is not None and words in tvx.error
    assert "color:#b00020" in tvx.message.value and tvx.picture.value == good
    tvx.set(thr="(4,32):(32,1)", val="(4,8):(8,1)", tensor="(64,512):(512,1)")
    assert tvx.error is None and tvx.message.value == ""


def test_tv_explorer_display_bundle(tvx):
    b = tvx._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in b and b["image/png"]
    assert "tile (16,256)" in b["text/plain"]


def test_rank1_tv_layouts():
    tv = V.tv_layout("32:1", "4:1")
    assert tv.tiler == (128,) and tv.tv.layout == "(32,4):(4,1)"
    assert tv.owner.tolist() == [t for t in range(32) for _ in range(4)]
    a = V.address_map(tv, tensor="1024:1", block=2)
    assert a.base == 256 and V.vector_width(a, 32, elem_bytes=4) == 4
