"""A timer on the calling thread's CPU clock that signals that thread: timer_create(2) through ctypes.

The instrument API samples the main thread with it. Unlike setitimer's ITIMER_PROF, it counts one thread's
CPU time, leaves the program's own interval timers alone, and is gone in an exec'd program or a forked
child, where no handler would be left to catch its signal (whose default action kills).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import threading

CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID = 3, 4


class _SigEvent(ctypes.Structure):
    """struct sigevent as SIGEV_THREAD_ID reads it (64 bytes on 64-bit Linux; the padding covers 32-bit)."""

    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("tid", ctypes.c_int), ("pad", ctypes.c_int * 12)]


_ITimerSpec = ctypes.c_long * 4   # struct itimerspec: interval (s, ns), then the first expiry (s, ns)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The C library with timer_create (librt's before glibc 2.34), its argument types set; None without."""
    for name in (None, "librt.so.1"):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.timer_create.argtypes = [ctypes.c_int, ctypes.POINTER(_SigEvent), ctypes.POINTER(ctypes.c_void_p)]
            lib.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_ITimerSpec),
                                          ctypes.POINTER(_ITimerSpec)]
            return lib
        except (OSError, AttributeError):
            continue
    return None


def _fail() -> None:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))


class ThreadCpuTimer:
    """A timer on the calling thread's CPU time that sends `signo` to that thread; OSError where the C
    library or the kernel has none."""

    def __init__(self, signo: int):
        lib = _library()
        if lib is None:
            raise OSError(errno.ENOSYS, "no timer_create in the C library")
        event = _SigEvent(signo=signo, notify=SIGEV_THREAD_ID, tid=threading.get_native_id())
        self._id = ctypes.c_void_p()
        if lib.timer_create(CLOCK_THREAD_CPUTIME_ID, ctypes.byref(event), ctypes.byref(self._id)) != 0:
            _fail()
        self._settime = lib.timer_settime
        self._new, self._old = _ITimerSpec(), _ITimerSpec()   # made once: a task's start and end each set it
        self._args = (self._id, 0, ctypes.byref(self._new), ctypes.byref(self._old))

    def set(self, first: float, interval: float) -> float:
        """Signal after `first` seconds of the thread's CPU time, then every `interval` (0, 0: stop);
        returns the time that was left until the next signal."""
        new, old = self._new, self._old
        new[0], new[1] = divmod(round(interval * 1e9), 1_000_000_000)
        new[2], new[3] = divmod(round(first * 1e9), 1_000_000_000)
        if self._settime(*self._args) != 0:
            _fail()
        return old[2] + old[3] * 1e-9
