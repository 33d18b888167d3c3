"""The node's clock: node_exporter's time (clock, zone, clock sources) and timex (adjtimex) collectors."""

from __future__ import annotations

import ctypes
import time

from causewatch.agent.node.files import name, path, read_or

_NANO = 0x2000        # STA_NANO: offset and jitter in nanoseconds, else microseconds
_TIME_ERROR = 5       # adjtimex's return when the clock is not synchronised
_PPM16 = 65536 * 1e6  # adjtimex's frequencies: parts per million, 16-bit fraction


class _Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long), ("tick", ctypes.c_long),
                ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long), ("shift", ctypes.c_int),
                ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
                ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int),
                ("_reserved", ctypes.c_int * 11)]


class Time:
    name = "time"

    def __init__(self, sys: str = "/sys", clock=time.time):
        self.dir, self.clock = path(sys, "devices/system/clocksource"), clock

    def collect(self) -> dict[str, float]:
        now = self.clock()
        local = time.localtime(now)
        out = {"node_time_seconds": now,
               name("node_time_zone_offset_seconds", ("time_zone", local.tm_zone)): float(local.tm_gmtoff)}
        for device in range(8):
            base = path(self.dir, f"clocksource{device}")
            current = read_or(path(base, "current_clocksource"))
            if current is None:
                break
            for source in (read_or(path(base, "available_clocksource"), "") or "").split():
                labels = (("clocksource", source), ("device", str(device)))
                out[name("node_time_clocksource_available_info", *labels)] = 1.0
            out[name("node_time_clocksource_current_info", ("clocksource", current), ("device", str(device)))] = 1.0
        return out


class Timex:
    """adjtimex(2) read-only (modes 0): the kernel's clock discipline, as node_exporter's timex."""
    name = "timex"

    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)

    def collect(self) -> dict[str, float]:
        tx = _Timex()
        state = self._libc.adjtimex(ctypes.byref(tx))
        if state < 0:
            raise OSError(ctypes.get_errno(), "adjtimex failed")
        unit = 1e9 if tx.status & _NANO else 1e6
        return {"node_timex_offset_seconds": tx.offset / unit, "node_timex_frequency_adjustment_ratio":
                1 + tx.freq / _PPM16, "node_timex_maxerror_seconds": tx.maxerror / 1e6,
                "node_timex_estimated_error_seconds": tx.esterror / 1e6, "node_timex_status": float(tx.status),
                "node_timex_loop_time_constant": float(tx.constant), "node_timex_tick_seconds": tx.tick / 1e6,
                "node_timex_pps_frequency_hertz": tx.ppsfreq / _PPM16, "node_timex_pps_jitter_seconds":
                tx.jitter / unit, "node_timex_pps_shift_seconds": float(tx.shift),
                "node_timex_pps_stability_hertz": tx.stabil / _PPM16, "node_timex_pps_jitter_total": float(tx.jitcnt),
                "node_timex_pps_calibration_total": float(tx.calcnt), "node_timex_pps_error_total": float(tx.errcnt),
                "node_timex_pps_stability_exceeded_total": float(tx.stbcnt),
                "node_timex_tai_offset_seconds": float(tx.tai), "node_timex_sync_status": float(state != _TIME_ERROR)}
