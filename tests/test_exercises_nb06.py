"""Checkers of notebook 06: right answers pass, each kind of wrong answer fails usefully."""

import math

from cutecourse.exercises import nb06
from cutecourse.kernels import hopper_gemm_persistent as hp


def _use(m, n, tile, sms):
    ctas = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    return ctas / (math.ceil(ctas / sms) * sms)


def test_last_wave():
    assert nb06.check_last_wave(_use)
    r = nb06.check_last_wave(lambda m, n, tile, sms: (m // tile[0]) * (n // tile[1]) / sms)
    assert not r and "you gave" in r.message
    assert not nb06.check_last_wave(lambda m, n, tile, sms: ...)  # not answered


def test_consumer_registers():
    def right(p, pw, cw):
        return min(256, (65536 // 128 - pw * p) // cw // 8 * 8)

    assert nb06.check_consumer_registers(right)
    assert right(hp.PRODUCER_REGISTERS, 1, 2) == hp.CONSUMER_REGISTERS  # the kernel's own split
    r = nb06.check_consumer_registers(lambda p, pw, cw: (65536 // 128 - pw * p) // cw)
    assert not r and ("multiple of 8" in r.message or "256" in r.message)
    r = nb06.check_consumer_registers(lambda p, pw, cw: 232)
    assert not r


def test_ring_position():
    assert nb06.check_ring_position(lambda w, j, k, kt: (2 * j + w) * kt + k)
    r = nb06.check_ring_position(lambda w, j, k, kt: (j + w) * kt + k)  # forgot the other's tiles
    assert not r and "producer loaded it as number" in r.message
