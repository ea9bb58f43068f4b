"""Notebook 08's kernel exercises: the solutions (read from the solution notebook) pass; the
wrong answers a learner writes are refused with a message in the learner's terms (most on the
CPU model before any compile, a cvt from the PTX); on a Hopper GPU the solutions also run there."""

import pytest

from cutecourse.exercises import nb08, nb08_cpu, nb08_lab

from solution_cells import CellsById

CELLS = CellsById("08_mixed_input_gemm.ipynb", ("ex1-code", "ex2-code", "ex3-code"))
learner = CELLS.learner


@pytest.fixture(autouse=True)
def first_attempt():
    """Each test is a learner's first try: exercise 1 answers a repeated mistake differently."""
    nb08_cpu.TOLD.clear()


def short_and_clean(message: str):
    assert len(message) < 700 and "MLIR" not in message and "Traceback" not in message, message


# -- Exercise 1: the signed conversion ------------------------------------------------------------
LOP3 = ('    biased = inline_ptx("lop3.b32 {$w0}, {$r0}, 0x000f000f, 0x43084308, 0x6a;",\n'
        '                        write_only_types=[cutlass.Int32], read_only_args=[shifted])\n')


def test_the_conversion_solution_passes():
    r = nb08.check_signed_register(learner("signed_register"))
    assert r, r.message
    assert "10280 registers checked bit for bit" in r.message and "no cvt" in r.message
    assert "not run on a GPU here" in r.message
    # only what the learner wrote is counted: 4 lop3, 3 shr (none for register 0), 4 sub and 4 mul;
    # the kernel around it (its indexing) subtracted, so no logic instruction of its own
    assert "is 4 lop3, 3 shr, 0 and/or/xor, 4 sub.bf16x2, 4 mul.bf16x2 (the kernel around it subtracted)" in r.message, r.message


def test_a_wrong_lop3_table_gets_the_way_to_build_it_not_the_table():
    """The OR table in place of the XOR one: the message says how a table is made, and leaves the
    learner to make it."""
    r = nb08.check_signed_register(learner("signed_register", ("0x6a;", "0xea;")))
    assert not r and "0xF0, b = 0xCC, c = 0xAA" in r.message, r.message
    assert "0x6a" not in r.message.lower(), r.message


def test_the_conversion_in_integer_operators_passes():
    """The same arithmetic without inline PTX: the compiler makes its own logic instructions."""
    r = nb08.check_signed_register(learner("signed_register",
                                           (LOP3, "    biased = (shifted & 0x000F000F) ^ 0x43084308\n")))
    assert r, r.message


SUB_ZERO_THEN_MUL = ('    d = int4_convert.sub_zero(biased, 0x43084308)\n'
                    '    return inline_ptx("mul.rn.bf16x2 {$w0}, {$r0}, {$r1};", write_only_types=[cutlass.Int32],\n'
                    '                      read_only_args=[d, ss])\n')


@pytest.mark.parametrize("edit", [("int4_convert.sub_mul_bf16x2(", "int4_convert.sub_mul("),
                                  ("    return int4_convert.sub_mul_bf16x2(biased, 0x43084308, ss)", SUB_ZERO_THEN_MUL)])
def test_the_helpers_the_lesson_shows_work_too(edit):
    """Section 6 lists ``int4_convert.sub_zero`` and ``sub_mul``; an answer that calls either (the
    subtraction alone, its own multiply after it) passes as with ``sub_mul``'s bf16 name."""
    r = nb08.check_signed_register(learner("signed_register", edit))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    # the lesson's unsigned conversion, copied: q - 8 instead of s (the question, not its answer)
    ([("0x43084308, 0x6a", "0x43004300, 0xea")], "What does bit 3 weigh"),
    # XOR right, but 128 subtracted instead of 136
    ([("sub_mul_bf16x2(biased, 0x43084308", "sub_mul_bf16x2(biased, 0x43004300")], "subtract 136"),
    # OR instead of XOR: bit 3 set, not flipped
    ([("0x6a;", "0xea;")], "XOR it in"),
    # a shift of a byte per register: nibbles 2j
    ([("(4 * j)", "(8 * j)")], "nibble j in its low half and nibble j + 4"),
    # only the low nibble kept
    ([("0x000f000f, 0x43084308", "0x0000000f, 0x43084308")], "mask both halves"),
    # the scale forgotten
    ([("sub_mul_bf16x2(biased, 0x43084308, ss)", "sub_mul_bf16x2(biased, 0x43084308, 0x3f803f80)")],
     "multiply by ss"),
    # nothing returned
    ([("    return int4_convert.sub_mul_bf16x2", "    int4_convert.sub_mul_bf16x2")], "returns nothing"),
    # an instruction the model does not know, in inline PTX
    ([("lop3.b32 {$w0}, {$r0}, 0x000f000f, 0x43084308, 0x6a;", "bfe.u32 {$w0}, {$r0}, 0, 4;")], "bfe.u32"),
])
def test_conversion_mistakes_are_named(edits, words):
    r = nb08.check_signed_register(learner("signed_register", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_the_unsigned_path_gets_the_question_first_and_the_answer_on_the_same_mistake():
    """The exercise asks what flipping bit 3 does: the first time the lesson's unsigned path is
    named, the message asks that question; the same mistake again gets the XOR."""
    fn = learner("signed_register", ("0x43084308, 0x6a", "0x43004300, 0xea"))
    first = nb08.check_signed_register(fn)
    assert not first and "lesson's unsigned format" in first.message, first.message
    assert "XOR" not in first.message and "flip bit 3" not in first.message and "s + 8" not in first.message
    again = nb08.check_signed_register(fn)
    assert not again and "flip bit 3 (XOR 8 gives s + 8" in again.message, again.message


def test_the_nibbles_read_unsigned_get_the_question_first():
    """No bias at all: the magic number ORed in and 128 subtracted, the nibble read unsigned."""
    fn = learner("signed_register", ("0x43084308, 0x6a", "0x43004300, 0xea"),
                 ("sub_mul_bf16x2(biased, 0x43084308", "sub_mul_bf16x2(biased, 0x43004300"))
    first = nb08.check_signed_register(fn)
    assert not first and "stored as s + 16" in first.message and "flip bit 3" not in first.message, first.message
    again = nb08.check_signed_register(fn)
    assert not again and "flip bit 3 and subtract 136" in again.message, again.message


@pytest.mark.parametrize("ptx, words", [
    ("cvt.rn.bf16.s32 {$w0}, {$r0};", "one cvt per value is what the magic number avoids"),
    ("cvt.rn.bf16x2.f32 {$w0}, {$r0}, {$r0};", "the arithmetic went through fp32"),
])
def test_a_cvt_in_the_learners_inline_ptx_gets_the_courses_reason(ptx, words):
    """The CPU model meets the cvt first: its message is the course's, not "unknown instruction"."""
    r = nb08.check_signed_register(learner(
        "signed_register", ("lop3.b32 {$w0}, {$r0}, 0x000f000f, 0x43084308, 0x6a;", ptx)))
    assert not r and words in r.message and "does not know" not in r.message, r.message
    short_and_clean(r.message)


def test_a_cvt_in_the_conversion_is_refused_from_the_ptx():
    """Right values (the CPU model passes: the round trip is exact below 2^24), but the nibbles
    through an integer -> float conversion and back, as a learner who reaches for floats writes."""
    r = nb08.check_signed_register(learner(
        "signed_register",
        (LOP3, "    biased = cutlass.Int32(cutlass.Float32(shifted & 0x000F000F) + 0.5) ^ 0x43084308\n")))
    assert not r and "cvt from an integer" in r.message, r.message


def test_the_stub_is_not_answered_yet():
    src = CELLS["signed_register"]
    body = src[src.index("    shifted = word"):]
    fn = learner("signed_register", (body, '    raise NotImplementedError("register j")\n'))
    r = nb08.check_signed_register(fn)
    assert not r and "not answered yet" in r.message, r.message


# -- Exercise 2: the packed layout ----------------------------------------------------------------
SOLUTION_STRIDE = "stride=((32, 128, 1024), 8, (4, 1, 2))"


def test_the_layout_solution_passes():
    r = nb08.check_packed_layout(learner("packed_layout"))
    assert r, r.message
    assert "all 4096" in r.message and "compiled for sm_90a" in r.message.lower()


@pytest.mark.parametrize("edits, words", [
    # slice-major words: all threads' slice 0 first
    ([(SOLUTION_STRIDE, "stride=((8, 32, 256), 1024, (4, 1, 2))")], "thread 1 (lane 1"),
    # the values in fragment order, no interleave
    ([(SOLUTION_STRIDE, "stride=((32, 128, 1024), 8, (1, 2, 4))")], "value 1 (the next column) to nibble 1"),
    # row and column pair swapped in the thread mode
    ([(SOLUTION_STRIDE, "stride=((128, 32, 1024), 8, (4, 1, 2))")], "thread 1 (lane 1"),
    # a thread's words a slice apart
    ([(SOLUTION_STRIDE, "stride=((32, 128, 1024), 4096 // 4, (4, 1, 2))")], "slice 1"),
    # the slice mode left out
    ([("((4, 8, 4), 4, (2, 2, 2)), " + SOLUTION_STRIDE, "((4, 8, 4), (2, 2, 2)), stride=((32, 128, 1024), (4, 1, 2))")],
     "modes of sizes (128, 8)"),
    # the printout, not the layout
    ([("return cute.make_layout(", "return str(cute.make_layout("), ("(4, 1, 2)))", "(4, 1, 2))))")],
     "returns a str"),
])
def test_layout_mistakes_are_named(edits, words):
    r = nb08.check_packed_layout(learner("packed_layout", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_a_single_value_mode_is_told_to_split():
    """Value mode 8 with one stride cannot hold the interleave: the message says so, not just
    where value 1 went."""
    r = nb08.check_packed_layout(learner("packed_layout", ("(2, 2, 2)), " + SOLUTION_STRIDE,
                                                           "8), stride=((32, 128, 1024), 8, 1)")))
    assert not r and "one mode of 8" in r.message and "(2,2,2)" in r.message, r.message
    short_and_clean(r.message)


@pytest.mark.parametrize("hint, answer", [
    # exercise 1: no constant, no instruction, no helper of the answer
    (nb08.EX1[1], ("0x", "lop3", "xor", "XOR", "sub_mul", "136", ">>", "4j", "mask")),
    # exercise 2: no stride of the answer
    (nb08.EX2[1], ("4t", "32", "128", "1024", "(4, 1, 2)", "(4,1,2)", "8 nibbles")),
    # exercise 3: not the count's formula
    (nb08_lab.EX3[1], ("ceil", "132", "/", "x splits")),
])
def test_the_hints_point_at_the_idea_not_the_code(hint, answer):
    """A hint is shown as soon as the untouched skeleton is checked: it must leave the answer to
    the learner."""
    assert not [a for a in answer if a in hint], hint


def test_the_expected_nibbles_are_pack_s():
    """The checker's reference is quant.reorder's table: value (t, s, v) is at the nibble of the
    packed block whose gather index is its place in W (BLOCK_LAYOUT)."""
    from cutecourse import layouts
    from cutecourse.quant import reorder

    table = layouts.evaluate(reorder.BLOCK_LAYOUT)
    index = reorder.gather_index().reshape(-1)
    for (thr, s, val), off in zip(table.coords, table.offsets):
        t, v = thr[0] + 4 * thr[1] + 32 * thr[2], val[0] + 2 * val[1] + 4 * val[2]
        assert int(index[nb08.expected_nibble(t, s, v)]) == (off % 64) * 64 + off // 64


# -- Exercise 3: the split-K lab ------------------------------------------------------------------
def _lab_answer():
    ns = {}
    exec(CELLS["ex3-code"], ns)  # noqa: S102  (the solution's three assignments)
    return ns["splits"], ns["prediction"], ns["stores"]


def test_the_lab_solution_passes_and_reads_the_ptx():
    r = nb08_lab.check_split_lab(*_lab_answer())
    assert r, r.message
    assert "4 is its choice" in r.message and "with split-K:" in r.message and "atomics" in r.message
    assert "Your 4 fp32 stores a thread are the compile's" in r.message
    assert "1: 65, 2: 66, 3: 69, 4: 60" in r.message and "Nothing was timed here" in r.message
    assert "splits = 1, 2, 4 on cold weights" in r.message


def test_the_lab_counts_are_the_planners():
    """The lab's numbers are mixed_input's: its cost, its choice for M = 4 on 28672 x 8192."""
    from cutecourse.kernels import mixed_input as mi

    assert [nb08_lab.split_time(s) for s in range(1, 9)] == [mi.split_cost(224, s, 32) for s in range(1, 9)]
    assert mi.plan(4, 28672, 8192, 128).splits == min(range(1, 9), key=lambda s: (nb08_lab.split_time(s), s))


RIGHT = {s: nb08_lab.split_time(s) for s in range(1, 9)}


@pytest.mark.parametrize("splits", [1, 2, 3, 5, 6, 7, 8])
def test_right_counts_for_another_split_are_refused(splits):
    """The lab asks for the planner's choice: right counts with any other split do not pass, and
    the message does not say which split to take unless the learner's own counts show it."""
    prediction = {s: RIGHT[s] for s in {1, 2, splits}}
    r = nb08_lab.check_split_lab(splits, prediction)
    assert not r and "is not its choice" in r.message and "4 splits" not in r.message, r.message
    r = nb08_lab.check_split_lab(splits, dict(RIGHT))  # every split counted: the learner's own table
    assert not r and "by your own counts 4 splits cost 60" in r.message, r.message


def _missed(s: int) -> str:
    """The message of a miss must not hold the right count, as a number on its own."""
    return rf"(?<![\d.]){RIGHT[s]}(?![\d.])"


@pytest.mark.parametrize("splits, prediction, words", [
    # waves on 132 x 3 CTA slots, as if the CTAs of one SM did not share it, with and without the splits
    (4, {1: 32, 2: 32, 4: 24}, "counts waves on 396 CTA slots"),
    (4, {1: 33, 2: 34, 4: 28}, "counts waves on 396 CTA slots"),
    # CTAs of one warpgroup (64 rows): 448 a split
    (4, {1: 65, 2: 114, 4: 116}, "CTAs of 64 weight rows"),
    # k-tiles of a scale group (128 columns): 64 of them
    (4, {1: 65, 2: 130, 4: 116}, "k-tiles of 128 columns"),
    # at splits = 1 both doublings give the same count: both named
    (4, {1: 129, 2: 66, 4: 60}, "224 CTAs; or that counts k-tiles of 128 columns"),
    # the busiest SM's k-tiles, no cost per split
    (4, {1: 64, 2: 64, 4: 56}, "without the fixed cost of each split"),
    # one k-tile for all the splits, not one a split
    (4, {1: 65, 2: 65, 4: 57}, "add one a split, not one in all"),
    # 224 / 132 = 1.70 CTAs an SM, not rounded up (54.3 k-tiles, written 54 or 55)
    (4, {1: 54, 2: 66, 4: 60}, "1.70 an SM"),
    (4, {1: 65, 2: 66, 4: 58}, "6.79 an SM"),
    # the CTAs an SM rounded down: 896 // 132 = 6
    (4, {1: 65, 2: 66, 4: 52}, "rounds the CTAs an SM down"),
    (4, {1: 65, 2: 50, 4: 60}, "rounds the CTAs an SM down"),
    # 32 / 3 = 10.67 k-tiles a CTA, not rounded up: 6 x 10.67 + 3
    (3, {1: 65, 2: 66, 3: 67}, "do not split evenly in 3"),
    # the right count in the wrong entry
    (4, {1: 65, 2: 60, 4: 60}, "the count for splits = 4"),
    # a miss with no known cause: the steps, not the count
    (4, {1: 65, 2: 66, 4: 61}, "count it in steps"),
    (4, {1: 65, 2: 66, 4: "60"}, "not a str"),
    (3, {1: 65, 2: 66}, "no entry for splits = 3"),
    (3, [65, 66, 69], "write a dict"),
    (3, {1: 65, 2: 66, 3: 69, "4": 60}, "prediction has splits = '4'"),
    (4, {1: 65, 2: 66, 4: 60, 16: 20}, "prediction has splits = 16"),
    (0, {}, "from 1 to 8"),
    (9, {}, "from 1 to 8"),
    (True, {}, "from 1 to 8"),
])
def test_lab_mistakes_are_named(splits, prediction, words):
    import re

    r = nb08_lab.check_split_lab(splits, prediction)
    assert not r and words in r.message, r.message
    short_and_clean(r.message)
    wrong = next((s for s in sorted(prediction, key=str) if prediction[s] != RIGHT.get(s)), None) \
        if isinstance(prediction, dict) else None
    if isinstance(wrong, int) and wrong in RIGHT and "right entry" not in r.message:
        told = r.message.split(f"you predicted {prediction[wrong]!r}: ", 1)[-1]  # past the learner's own
        assert not re.search(_missed(wrong), told), f"the miss gives the count away: {r.message}"


def test_the_stores_are_read_from_the_two_compiles():
    """The lab's stores are the difference of the two PTX files, a warpgroup's 64 x 8 sums over 128 threads."""
    assert nb08_lab.added_stores() == 64 * 8 // 128


@pytest.mark.parametrize("stores, words", [
    (..., "not answered yet"),  # costs and choice right, stores left as the skeleton has it
    (None, "now predict stores"),
    (8, "Count a thread's share"),  # a CTA's 128 x 8 over a warpgroup: the two warpgroups' tiles counted
    (1024, "Count a thread's share"),  # the CTA's whole tile
    (4.0, "write a whole number"),
])
def test_wrong_stores_are_refused_after_right_counts(stores, words):
    splits, prediction, _ = _lab_answer()
    r = nb08_lab.check_split_lab(splits, prediction, stores)
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_the_lab_stub_is_not_answered_yet():
    r = nb08_lab.check_split_lab(..., ...)
    assert not r and "not answered yet" in r.message, r.message


# -- on a Hopper GPU --------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_solutions_run_bit_for_bit_on_the_gpu():
    r = nb08.check_signed_register(learner("signed_register"))
    assert r and "bit for bit on" in r.message, r.message
    r = nb08.check_packed_layout(learner("packed_layout"))
    assert r and "all 4096 values, on" in r.message, r.message
    r = nb08_lab.check_split_lab(*_lab_answer())
    assert r and "all splits match" in r.message and "splits=4" in r.message, r.message


@pytest.mark.gpu
def test_a_wrong_layout_is_caught_on_the_gpu_too():
    """The GPU run compares the unpacked block itself (the CPU model is skipped here)."""
    from cutecourse.exercises import kernel_check as kc
    from cutecourse.exercises.learner_code import LearnerCode

    fn = learner("packed_layout", (SOLUTION_STRIDE, "stride=((32, 128, 1024), 8, (1, 2, 4))"))
    run = kc.run_on_gpu(LearnerCode(fn), f"{nb08._MODULE}.UnpackKernel(packed_layout)",
                        runner="cutecourse.exercises.nb08_kernels:unpack_runner")
    assert not run.ok and "came back wrong" in run.message, run.message
