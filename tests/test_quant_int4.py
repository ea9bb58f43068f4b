"""int4 quantization for the mixed-input GEMM, on the CPU: the register reorder, the conversion.

The reorder's layout is the wgmma A fragment's (asked of the DSL itself); packing is a
permutation; the conversion model (magic number, lop3, sub, mul) is bit-exact against torch's
dequantization for every nibble value in every position, every byte, and random words; the
reorder + conversion of whole blocks rebuild ``dequantize`` bit for bit; quantization errs by at
most half a step. The same for fp16 scales (fp16 activations): the conversion with fp16's magic
number equals ``dequantize`` in fp16 over the same nibbles, bytes, zeros and scales, plus fp16's
own edges (subnormal scales, products past 65504).
"""

import pytest
import torch

from cutecourse.errors import DTypeError
from cutecourse.quant import convert, dequantize, quantize_int4, reorder

def test_fragment_layout_is_the_dsl_s_register_a_layout():
    from cutecourse.layouts import run_on_host

    def ask():
        import cutlass
        import cutlass.utils.hopper_helpers as sm90_utils
        from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

        mma = sm90_utils.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, OperandMajorMode.K,
                                                OperandMajorMode.K, cutlass.Float32, (1, 1, 1), tiler_mn=(64, 16),
                                                a_source=warpgroup.OperandSource.RMEM)
        return str(mma.tv_layout_A)

    assert run_on_host(ask) == reorder.FRAGMENT


def test_fragment_offsets_follow_cute():
    from cutecourse import layouts

    table = layouts.evaluate(reorder.FRAGMENT)
    for i, coord in enumerate(table.coords):
        (t0, t1, t2), (v0, v1, v2) = coord
        assert reorder.fragment_offset(t0 + 4 * t1 + 32 * t2, v0 + 2 * v1 + 4 * v2) == table.offsets[i]
    # lane 5 of warp 0 holds rows 1 and 9, columns 2, 3, 10, 11
    rows_cols = {reorder.fragment_coord(5, v) for v in range(8)}
    assert rows_cols == {(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)}


def test_block_layout_is_the_packing():
    """BLOCK_LAYOUT, evaluated by CuTe, says for (thread, slice, value) where in the 64 x 64 block
    (m + 64 k) the value comes from; the packed block holds it in word 4 thread + slice, nibble
    NIBBLE[value]: the same table as ``gather_index`` (which indexes m * 64 + k)."""
    from cutecourse import layouts

    table = layouts.evaluate(reorder.BLOCK_LAYOUT)
    idx = reorder.gather_index().reshape(512, 8)  # (word, nibble) -> m * 64 + k
    for (thr, s, val), off in zip(table.coords, table.offsets):
        t = thr[0] + 4 * thr[1] + 32 * thr[2]
        v = val[0] + 2 * val[1] + 4 * val[2]
        m, k = off % 64, off // 64
        assert idx[4 * t + s, reorder.NIBBLE[v]] == m * 64 + k


def test_gather_index_is_a_permutation_of_the_block():
    idx = reorder.gather_index().reshape(-1)
    assert torch.equal(idx.sort().values, torch.arange(64 * 64))


@pytest.mark.parametrize("shape", [(64, 64), (192, 320)])
def test_pack_unpack_round_trip(shape):
    q = torch.randint(0, 16, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    packed = reorder.pack(q)
    assert packed.dtype == torch.int32 and packed.shape == (shape[0], shape[1] // 8)
    assert torch.equal(reorder.unpack(packed), q)


def test_each_thread_word_holds_its_fragment():
    """Word (r, c) of a block holds thread 2r + c // 4's values of slice c % 4, value v in nibble
    NIBBLE[v]: checked against the fragment layout for every thread, slice and value of a block
    that is not the first one (rows 64.., columns 128..)."""
    q = torch.randint(0, 16, (128, 256), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    words = reorder.pack(q).to(torch.int64) & 0xFFFFFFFF
    for t in range(128):
        for s in range(4):
            r, c = reorder.word_position(t, s)
            word = int(words[64 + r, 16 + c])  # block (1, 2): rows 64.., word columns 16..
            for v in range(8):
                m, k = reorder.fragment_coord(t, v)
                assert (word >> (4 * reorder.NIBBLE[v])) & 0xF == q[64 + m, 128 + 16 * s + k]


# -- the conversion ------------------------------------------------------------------------------
DTYPES = [torch.bfloat16, torch.float16]
#: per dtype: a subnormal, a negative, one whose products pass the largest finite value (fp16:
#: 5000 x 15 > 65504, inf as torch rounds it) and the bf16 scales rounded to fp16
SCALES = {torch.bfloat16: torch.tensor([1.0, -0.0078125, 3.0e-3, 1.7e4, -2.5, 1e-38, 0.1]).to(torch.bfloat16),
          torch.float16: torch.tensor([1.0, -0.0078125, 3.0e-3, 5000.0, -2.5, 3e-7, 0.1]).to(torch.float16)}


def _reference(words, s, z, dtype=torch.bfloat16):
    """torch's dequantization of each nibble: ((q - zero) * scale) in fp32, rounded to ``dtype``."""
    words = words.to(torch.int64) & 0xFFFFFFFF
    out = []
    for v in range(8):
        q = ((words >> (4 * reorder.NIBBLE[v])) & 0xF).float()
        row = (v // 2) % 2
        out.append(((q - z[row]) * s[row].float()).to(dtype))
    return torch.stack(out, -1)


def _words_every_nibble_and_byte():
    g = torch.Generator().manual_seed(3)
    base = torch.randint(0, 2**32, (16 * 8,), dtype=torch.int64, generator=g)
    pos = torch.arange(8).repeat_interleave(16)
    val = torch.arange(16).repeat(8)
    nib = (base & ~(0xF << (4 * pos))) | (val << (4 * pos))  # every value at every nibble position
    byte_pos = torch.arange(4).repeat_interleave(256)
    byte_val = torch.arange(256).repeat(4)
    base = torch.randint(0, 2**32, (1024,), dtype=torch.int64, generator=g)
    byt = (base & ~(0xFF << (8 * byte_pos))) | (byte_val << (8 * byte_pos))  # every byte, every place
    rand = torch.randint(0, 2**32, (20000,), dtype=torch.int64, generator=g)
    return torch.cat([nib, byt, rand, torch.tensor([0, 0xFFFFFFFF])])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zeros", [(8, 8), (0, 15), (3, 11)])
def test_conversion_is_bit_exact(zeros, dtype):
    words = _words_every_nibble_and_byte()
    scales = SCALES[dtype]
    for s0 in scales:
        for s1 in scales[[1, 3, 5]]:
            got = convert.fragment_values(words, (s0, s1), zeros, dtype=dtype)
            want = _reference(words, (s0, s1), zeros, dtype)
            assert got.dtype == dtype
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (float(s0), float(s1))
    # no scales (``convert_word``'s ss=None, the variant "deferred_scales"): q - zero, exact
    one = torch.ones((), dtype=dtype)
    unscaled = convert.fragment_values(words, None, zeros, dtype=dtype)
    assert torch.equal(unscaled.view(torch.int16), _reference(words, (one, one), zeros, dtype).view(torch.int16))


def test_the_fp16_edges_are_in_the_cases():
    """The fp16 scales reach what bf16's do not: subnormal products and infinite ones."""
    words = _words_every_nibble_and_byte()
    tiny = _reference(words, SCALES[torch.float16][[5, 5]], (8, 8), torch.float16)
    assert ((tiny != 0) & (tiny.abs() < torch.finfo(torch.float16).tiny)).any()
    assert _reference(words, SCALES[torch.float16][[3, 3]], (0, 0), torch.float16).isinf().any()


@pytest.mark.parametrize("dtype, magic", [(torch.bfloat16, 0x4300), (torch.float16, 0x6400)])
def test_magic_registers_are_the_magic_number_plus_the_nibbles(dtype, magic):
    """0x4300 | q is bf16 128 + q; 0x6400 | q is fp16 1024 + q (10 mantissa bits: a unit in the
    last place is 1 at 1024)."""
    words = _words_every_nibble_and_byte()
    for j, reg in enumerate(convert.magic_registers(words, dtype)):
        lo, hi = (reg & 0xFFFF), (reg >> 16)
        assert torch.equal(lo - magic, (words >> (4 * j)) & 0xF)
        assert torch.equal(hi - magic, (words >> (4 * (j + 4))) & 0xF)
        base = torch.tensor([magic], dtype=torch.int16).view(dtype).item()
        values = (lo[:16] - 2**16 * (lo[:16] >= 2**15)).to(torch.int16).view(dtype).double()
        assert torch.equal(values - base, ((words[:16] >> (4 * j)) & 0xF).double())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group,zero_point", [(64, False), (128, True), (None, False)])
def test_reorder_plus_conversion_rebuild_dequantize(group, zero_point, dtype):
    """Every thread converts its words as the kernel does (scales and zeros of its rows g, g + 8);
    scattered back through the fragment layout, the values are ``dequantize`` bit for bit."""
    w = torch.randn(128, 256, generator=torch.Generator().manual_seed(4)) * 0.05
    packed, scales, zeros = quantize_int4(w, group, zero_point=zero_point, dtype=dtype)
    want = dequantize(packed, scales, zeros)
    gs = 256 // scales.shape[0]
    got = torch.empty_like(want)
    words = packed.to(torch.int64) & 0xFFFFFFFF
    for nb in range(2):
        for kb in range(4):
            for t in range(128):
                g_row = 16 * (t // 32) + (t % 32) // 4
                for s in range(4):
                    r, c = reorder.word_position(t, s)
                    col0 = 64 * kb + 16 * s
                    rows = (64 * nb + g_row, 64 * nb + g_row + 8)
                    sc = tuple(scales[col0 // gs, n] for n in rows)
                    zr = tuple(int(zeros[col0 // gs, n]) for n in rows) if zeros is not None else (8, 8)
                    vals = convert.fragment_values(words[64 * nb + r, 8 * kb + c], sc, zr, dtype=dtype)
                    for v in range(8):
                        m, k = reorder.fragment_coord(t, v)
                        got[64 * nb + m, col0 + k] = vals[v]
    assert want.dtype == dtype and torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("dtype, eps", [(torch.bfloat16, 2**-8), (torch.float16, 2**-11)])
@pytest.mark.parametrize("zero_point", [False, True])
def test_quantization_error_is_half_a_step(zero_point, dtype, eps):
    w = torch.randn(128, 512, generator=torch.Generator().manual_seed(5))
    packed, scales, zeros = quantize_int4(w, 128, zero_point=zero_point, dtype=dtype)
    wq = dequantize(packed, scales, zeros)
    err = (wq.float() - w).abs()
    step = scales.float().T.repeat_interleave(128, dim=1)
    # half a step, plus the product's rounding to the 16-bit type (and fp32 noise in w / scale)
    assert (err <= 0.5 * step * (1 + 2**-6) + w.abs() * eps).all()
    assert scales.shape == (4, 128) and scales.dtype == dtype and wq.dtype == dtype
    assert (zeros is None) != zero_point


def test_fp16_scales_are_the_bf16_ones_refined():
    """fp16 scales still cover the group (rounded up) and are at least as close to |w|max / 7 as
    the bf16 ones: every bf16 number in fp16's normal range is an fp16 number."""
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(7))
    _, s16, _ = quantize_int4(w, 64, dtype=torch.float16)
    _, sbf, _ = quantize_int4(w, 64)
    exact = w.reshape(64, 4, 64).abs().amax(-1).T / 7
    assert (s16.float() >= exact).all() and (s16.float() - exact <= sbf.float() - exact).all()


def test_scale_dtype_refusals():
    with pytest.raises(DTypeError, match="bfloat16 or float16") as info:
        quantize_int4(torch.randn(64, 64), 64, dtype=torch.float32)
    assert "dtype=torch.float16" in info.value.fix
    with pytest.raises(DTypeError, match="too wide for float16") as info:  # a scale past 65504
        quantize_int4(torch.full((64, 64), 1e6), 64, dtype=torch.float16)
    assert "bfloat16" in info.value.fix
    assert quantize_int4(torch.full((64, 64), 1e6), 64)[1].isfinite().all()  # bf16's range holds it
