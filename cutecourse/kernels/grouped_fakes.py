"""Fake arguments of the grouped GEMMs, for compiling without a GPU (``GroupedEntry.fake_arguments``).

The metadata has a symbolic group count G, the templates symbolic sizes and strides: one compile
serves every batch of groups, as a launch's does.
"""

from __future__ import annotations

from .tensor_maps import MAP_BYTES, MAP_WORDS


def fake_metadata(columns: int, ctas: int, maps: int) -> tuple:
    """Fake shapes (G, 4), ptrs and strides (G, columns), workspace (ctas, maps, 16), trace."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    g = cute.sym_int(symbol="G")
    return (make_fake_tensor(cutlass.Int32, (g, 4), (4, 1), assumed_align=16),
            make_fake_tensor(cutlass.Int64, (g, columns), (columns, 1), assumed_align=8),
            make_fake_tensor(cutlass.Int64, (g, columns), (columns, 1), assumed_align=8),
            make_fake_tensor(cutlass.Int64, (ctas, maps, MAP_WORDS), (maps * MAP_WORDS, MAP_WORDS, 1),
                             assumed_align=MAP_BYTES),
            make_fake_tensor(cutlass.Int32, (ctas, 2), (2, 1), assumed_align=8))


def fake_blockscaled_operands(kernel, in_dtype=None, out_dtype: str = "float16") -> tuple:
    """Fake A (M, K), B (N, K) of the Blackwell kernel's data type (its format's: ``in_dtype`` adds nothing), C (M, N), and 1-D scale-factor
    bytes: rows 16-byte aligned, so K a multiple of 32 (fp4) or 16 (fp8) elements."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    per_16b = 128 // kernel.data_dtype.width  # elements in 16 bytes: TMA's row alignment
    m, n = cute.sym_int(symbol="M"), cute.sym_int(symbol="N")
    k = cute.sym_int(divisibility=per_16b, symbol="K")
    lda, ldb = (cute.sym_int64(divisibility=per_16b, symbol=s) for s in ("lda", "ldb"))
    ldc = cute.sym_int64(divisibility=8, symbol="ldc")
    c_dtype = cutlass.Float16 if out_dtype == "float16" else cutlass.BFloat16
    a = make_fake_tensor(kernel.data_dtype, (m, k), (lda, 1), assumed_align=16)
    b = make_fake_tensor(kernel.data_dtype, (n, k), (ldb, 1), assumed_align=16)
    c = make_fake_tensor(c_dtype, (m, n), (ldc, 1), assumed_align=16)
    sfa, sfb = (make_fake_tensor(cutlass.Uint8, (cute.sym_int(symbol=s),), (1,), assumed_align=16)
                for s in ("SFA", "SFB"))
    return a, b, c, sfa, sfb
