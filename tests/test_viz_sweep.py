"""The sweep picture reads the committed H100 sweep: its grid is the sweep's numbers."""

import math

from cutecourse import bench
from cutecourse.viz import sweep


def test_grid_holds_the_sweep_numbers_and_the_figure_has_both_panels():
    r = bench.load("elementwise_tv_sweep_fp16_32768")
    thrs, rows, table = sweep.grid(r)
    assert rows == [1, 2, 4, 8] and "(4,32)" in thrs and "(1,256)" in thrs
    i, j = thrs.index("(4,32)"), rows.index(4)
    assert math.isclose(table[i, j], r.row("thr(4,32) val(4,8)").gbps)
    names = [n for n, _ in sweep.default_lessons(r)]
    assert names[0] == "torch.add" and "thr(4,32) val(4,8) m-order" in names
    fig = sweep.draw_sweep(r)
    assert len(fig.axes) == 3  # heat map, its colour bar, the lessons
