"""Notebook 08's CPU models: a learner's conversion of one register run on numbers, bit for bit.

The learner's ``@cute.jit`` function (exercise 1: signed int4 -> bf16x2) is executed again with
the DSL names standing for their plain-Python meaning: ``cutlass.Int32`` wraps to 32 bits,
``cutlass.Uint32`` masks, ``cutlass.const_expr`` and ``range_constexpr`` are Python's, and
``inline_ptx`` runs the PTX it is given on integers (:func:`run_ptx`: the logic, shift and
bf16x2 instructions a conversion uses). ``int4_convert``'s helpers are replaced by the same
arithmetic, so a learner may call them. Every nibble value in every position of a word, and
random words, are converted for each register and each of several scales, and compared with
``(signed nibble) x scale`` rounded once to bf16: the first difference is named in the
learner's terms (which register, which half, which nibble it should hold, what it holds).
"""

from __future__ import annotations

import builtins
import functools
import re
import types

from .cpu_run import CpuModelError, CpuModelSkipped, _Cute
from .learner_code import LearnerCode, reason

MASK = 0xFFFFFFFF
#: What a conversion through ``cvt`` is told, whether the CPU model meets it in the learner's
#: inline PTX or the checker finds it in the compiled PTX: the reason the lesson's trick exists.
CVT_FROM_INT = "one cvt per value is what the magic number avoids. Build 128 + 8 + s with bit operations instead"
CVT_THROUGH_FP32 = ("the arithmetic went through fp32, one value at a time. Subtract and multiply two bf16 at "
                    "once (sub.rn.bf16x2, mul.rn.bf16x2: int4_convert.sub_mul_bf16x2)")
_INT_SOURCE = re.compile(r"^cvt(\.\w+)*\.(s|u)(4|8|16|32)$")
#: bf16 scales the model applies (as 16-bit patterns): 1, a small negative, an odd one, a large
#: one and a subnormal one.
SCALES = (0x3F80, 0xBC00, 0x3B45, 0x4685, 0x0001)


def s32(x) -> int:
    x = int(x) & MASK
    return x - (1 << 32) if x >= 1 << 31 else x


# -- bf16 arithmetic on bit patterns --------------------------------------------------------------
def _to_float(bits16: int) -> float:
    import struct

    return struct.unpack("<f", struct.pack("<I", (bits16 & 0xFFFF) << 16))[0]


def _to_bf16(x: float) -> int:
    """The bf16 bit pattern of ``x``: to fp32, then rounded to nearest even (the products and
    differences of bf16 numbers a conversion makes are exact in fp32)."""
    import math
    import struct

    if math.isnan(x):
        return 0x7FC0
    if abs(x) > 3.4028234663852886e38:
        return 0x7F80 if x > 0 else 0xFF80
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits += 0x7FFF + (bits >> 16 & 1)
    return bits >> 16 & 0xFFFF


def _bf16x2(op, a: int, b: int) -> int:
    halves = []
    for shift in (0, 16):
        x, y = _to_float(a >> shift), _to_float(b >> shift)
        halves.append(_to_bf16(op(x, y)))  # the exact result (bf16 operands) rounded once
    return s32(halves[0] | halves[1] << 16)


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    """Three-input logic: bit i of the result is bit (a_i << 2 | b_i << 1 | c_i) of ``lut``."""
    out = 0
    for sel in range(8):
        if lut >> sel & 1:
            out |= ((a if sel & 4 else ~a) & (b if sel & 2 else ~b) & (c if sel & 1 else ~c)) & MASK
    return s32(out)


def _prmt(a: int, b: int, sel: int) -> int:
    pool = (a & MASK) | (b & MASK) << 32
    return s32(sum(((pool >> 8 * (sel >> 4 * i & 7)) & 0xFF) << 8 * i for i in range(4)))


_OPS = {
    "lop3.b32": lambda a, b, c, lut: _lop3(a, b, c, lut),
    "and.b32": lambda a, b: s32(a & b), "or.b32": lambda a, b: s32(a | b), "xor.b32": lambda a, b: s32(a ^ b),
    "shr.u32": lambda a, n: s32((a & MASK) >> n), "shr.b32": lambda a, n: s32((a & MASK) >> n),
    "shr.s32": lambda a, n: s32(s32(a) >> n), "shl.b32": lambda a, n: s32(a << n),
    "mov.b32": lambda a: s32(a), "prmt.b32": lambda a, b, sel: _prmt(a, b, sel),
    "sub.rn.bf16x2": lambda a, b: _bf16x2(lambda x, y: x - y, a, b),
    "add.rn.bf16x2": lambda a, b: _bf16x2(lambda x, y: x + y, a, b),
    "mul.rn.bf16x2": lambda a, b: _bf16x2(lambda x, y: x * y, a, b),
    "fma.rn.bf16x2": None,  # three operands: handled below
}
_LINE = re.compile(r"^\s*([a-z0-9.]+)\s+(.*?);?\s*$")
#: A brace of the asm's own block, not of an operand such as ``{$r1}`` (its last one included).
_BLOCK_BRACE = re.compile(r"\{(?!\$)|(?<!\w)\}")


@functools.lru_cache(maxsize=256)
def _parse(asm: str):
    """[(op, dest, [operands])] of the asm's instruction lines; ``.reg`` and braces skipped."""
    program = []
    for raw in re.split(r"[;\n]", asm):
        line = _BLOCK_BRACE.sub("", raw).strip()
        if not line or line.startswith(".reg"):
            continue
        m = _LINE.match(line)
        if m and m.group(1).startswith("cvt"):  # the course's own objection, not "unknown instruction"
            why = CVT_FROM_INT if _INT_SOURCE.match(m.group(1)) else CVT_THROUGH_FP32
            raise CpuModelError(f"your inline_ptx converts with `{m.group(1)}`: {why}")
        if not m or m.group(1) not in _OPS:
            known = ", ".join(k for k in _OPS if _OPS[k] is not None)
            raise CpuModelError(f"the CPU model does not know the PTX instruction `{line.split()[0]}` "
                                f"in your inline_ptx; it runs: {known}")
        args = [a.strip() for a in m.group(2).split(",")]
        program.append((m.group(1), args[0], args[1:]))
    return program


def run_ptx(asm: str, write_only_types=None, read_only_args=(), **_):
    """``inline_ptx`` on integers: ``{$r<i>}`` are the read arguments, ``{$w0}`` the result,
    other names registers of the asm's own block, numbers immediates."""
    regs = {f"{{$r{i}}}": s32(int(v)) for i, v in enumerate(read_only_args)}

    def value(tok):
        if tok in regs:
            return regs[tok]
        try:
            return int(tok, 0)
        except ValueError:
            raise CpuModelError(f"your inline_ptx reads `{tok}` before writing it") from None

    for op, dest, operands in _parse(asm):
        regs[dest] = _OPS[op](*map(value, operands))
    if "{$w0}" not in regs:
        raise CpuModelError("your inline_ptx never writes its result {$w0}")
    return regs["{$w0}"]


# -- the DSL as plain Python ----------------------------------------------------------------------
class _Cutlass:
    """``cutlass`` over Python ints: 32-bit wrap-around, compile-time branches and loops."""

    Int32 = staticmethod(s32)
    Uint32 = staticmethod(lambda x: int(x) & MASK)
    Float32 = staticmethod(float)

    @staticmethod
    def const_expr(x):
        return x

    @staticmethod
    def range_constexpr(*args):
        return range(*args)

    range = range_constexpr

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)


def _convert_helpers():
    """``int4_convert`` for the CPU model: its constants and helpers over Python ints."""
    from ..kernels import int4_convert as real

    def magic(word, j):
        return run_ptx(f"lop3.b32 {{$w0}}, {{$r0}}, {real.NIBBLE_MASK:#x}, {real.MAGIC:#x}, {real.AND_OR:#x};",
                       read_only_args=[(int(word) & MASK) >> 4 * j])

    def bf16_only(name, dtype):
        if dtype != "bfloat16":
            from ..errors import CourseError

            raise CourseError(f"{name}(..., dtype={dtype!r}): this exercise converts to bf16",
                              "leave dtype out (bf16 is the default)")

    def sub_zero(x, zz, dtype="bfloat16"):
        bf16_only("sub_zero", dtype)
        return _OPS["sub.rn.bf16x2"](s32(x), s32(zz))

    def sub_mul_bf16x2(x, zz, ss):
        return _OPS["mul.rn.bf16x2"](sub_zero(x, zz), s32(ss))

    def sub_mul(x, zz, ss, dtype="bfloat16"):
        bf16_only("sub_mul", dtype)
        return sub_mul_bf16x2(x, zz, ss)

    def both_halves(bits16):
        b = int(bits16) & 0xFFFF
        return s32(b | b << 16)

    return types.SimpleNamespace(MAGIC=real.MAGIC, NIBBLE_MASK=real.NIBBLE_MASK, AND_OR=real.AND_OR,
                                 magic=magic, sub_zero=sub_zero, sub_mul=sub_mul, sub_mul_bf16x2=sub_mul_bf16x2,
                                 both_halves=both_halves)


def load(code: LearnerCode, name: str):
    """The learner's function ``name`` executed again from its cell, over the stand-ins."""
    import cutlass
    import cutlass.cute as cute

    ns = dict(code.globals)
    ns.update(cute=_Cute(cute), cutlass=_Cutlass(cutlass), inline_ptx=run_ptx,
              int4_convert=_convert_helpers(), __builtins__=builtins)
    for seg in code.segments:
        exec(compile("\n" * (seg.first - 1) + seg.text, seg.filename, "exec"), ns)  # noqa: S102
    return ns[name]


# -- exercise 1: a signed int4 word -> four bf16x2 registers -------------------------------------
def test_words():
    """Every nibble value at every position (over random other nibbles), random words, 0 and -1."""
    import random

    rng = random.Random(8)
    words = []
    for pos in range(8):
        for val in range(16):
            base = rng.getrandbits(32)
            words.append((base & ~(0xF << 4 * pos) | val << 4 * pos) & MASK)
    words += [rng.getrandbits(32) for _ in range(384)] + [0, MASK]
    return words


def signed_nibble(word: int, p: int) -> int:
    q = (word >> 4 * p) & 0xF
    return q - 16 if q >= 8 else q


def expected(word: int, j: int, scale: int) -> int:
    """Register j: (s_j x scale, s_{j+4} x scale), each rounded once to bf16."""
    s = _to_float(scale)
    return s32(_to_bf16(signed_nibble(word, j) * s) | _to_bf16(signed_nibble(word, j + 4) * s) << 16)


_READINGS = (("signed", lambda u: u - 16 if u >= 8 else u), ("unsigned, minus 8", lambda u: u - 8),
             ("unsigned", lambda u: u), ("signed, plus 8", lambda u: (u - 16 if u >= 8 else u) + 8),
             ("with bit 3 always set, minus 8", lambda u: (u | 8) - 8))


def _what_half_holds(fn, j: int, h: int, scale: int, words) -> str:
    """What half ``h`` of the learner's register j holds over ``words``, in the learner's terms:
    the nibble and the reading (signed, unsigned, ...) that explain every one, or that it does
    not change with the word."""
    s = _to_float(scale)
    ss = s32(scale | scale << 16)
    got = [fn(s32(w), j, ss) >> 16 * h & 0xFFFF for w in words]
    if len(set(got)) == 1:
        return f"{_to_float(got[0])!r} whatever the word"
    nib = j + 4 * h
    for p in [nib] + [q for q in range(8) if q != nib]:
        for form, read in _READINGS:
            vals = [read((w >> 4 * p) & 0xF) for w in words]
            if all(_to_bf16(v * s) == g for v, g in zip(vals, got)):
                return f"nibble {p} read {form}, times the scale"
            if s != 1.0 and all(_to_bf16(float(v)) == g for v, g in zip(vals, got)):
                return f"nibble {p} read {form}, not multiplied by the scale"
    return "a value that follows no nibble of the word"


def check_signed_register(code: LearnerCode, name: str) -> tuple[str | None, int]:
    """(the first mistake in the learner's words or None, conversions checked)."""
    fn = load(code, name)
    count = 0
    for scale in SCALES:
        ss = s32(scale | scale << 16)
        for word in test_words():
            for j in range(4):
                try:
                    got = fn(s32(word), j, ss)
                except CpuModelError:
                    raise
                except Exception as exc:
                    where = code.locate(exc)
                    if "MLIR" in str(exc) or "Context" in str(exc):
                        raise CpuModelSkipped(code.describe(*where) if where else "a DSL operation") from None
                    at = f" at {code.describe(*where)}" if where else ""
                    raise CpuModelError(f"your {code.name} fails on the CPU model{at}: {reason(exc)}") from None
                count += 1
                if got is None:
                    return (f"your {code.name} returns nothing: return register j (an Int32 holding two bf16)",
                            count)
                want = expected(word, j, scale)
                if s32(int(got)) != want:
                    return _name_mistake(fn, word, j, scale, s32(int(got)), want), count
    return None, count


#: Mistakes already named once in this kernel: the exercise asks the learner to work out what
#: flipping bit 3 does, so the first time a mistake only points at that question; the same
#: mistake again gets the answer.
TOLD: set[str] = set()


def _first_then_answer(kind: str, question: str, answer: str) -> str:
    if kind in TOLD:
        return answer
    TOLD.add(kind)
    return question


def _name_mistake(fn, word, j, scale, got, want) -> str:
    h = 0 if (got ^ want) & 0xFFFF else 1
    w16 = want >> 16 * h & 0xFFFF
    nib = j + 4 * h
    which = "low" if h == 0 else "high"
    holds = _what_half_holds(fn, j, h, scale, test_words()[:64])
    hint = ""
    if "unsigned, minus 8" in holds:
        hint = _first_then_answer(
            "unsigned", ": that is the lesson's unsigned format. What does bit 3 weigh in a 4-bit two's-complement "
            "number, and what does flipping it do to s? (the exercise's question; the same mistake again gets "
            "the answer)",
            ": that is the lesson's unsigned format. Signed nibbles hold s in two's complement; "
            "flip bit 3 (XOR 8 gives s + 8 in [0, 15]) before the magic number")
    elif "signed, plus 8" in holds:
        hint = ": after the magic number the half is 128 + 8 + s; subtract 136 (0x4308 in both halves), not 128"
    elif "read unsigned," in holds:
        hint = _first_then_answer(
            "read unsigned", ": a negative s is stored as s + 16. Which one-bit change maps s + 16 and a "
            "non-negative s alike into [0, 15]? (the same mistake again gets the answer)",
            ": a negative s is stored as s + 16; flip bit 3 and subtract 136 to get s back")
    elif "bit 3 always set" in holds:
        hint = (": OR-ing 0x43084308 in sets bit 3 of every nibble instead of flipping it; XOR it in. "
                "lop3's table is the operation applied to a = 0xF0, b = 0xCC, c = 0xAA: work out "
                "(a & b) ^ c bit by bit, as (a & b) | c gave 0xEA")
    elif "not multiplied" in holds:
        hint = ": multiply by ss (the scale in both halves) last"
    elif "whatever the word" in holds and h == 1:
        hint = ": the high half never sees nibble j + 4; mask both halves (0x000F000F), not only the low one"
    elif f"nibble {nib} " not in holds:
        hint = (": register j takes nibble j in its low half and nibble j + 4 in its high half, "
                "after one shift by 4j and a mask of both (0x000F000F)")
    return (f"word {word:#010x}, register {j}, {which} half: it must be nibble {nib} "
            f"(s = {signed_nibble(word, nib)}) times the scale {_to_float(scale)!r}, "
            f"{_to_float(w16)!r}; yours holds {holds}{hint}")
