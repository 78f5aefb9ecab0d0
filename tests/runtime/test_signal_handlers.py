"""install_signal_handlers in this process, on SIGUSR1/SIGUSR2 so pytest's own stay intact."""

from __future__ import annotations

import os
import signal

import pytest

from unilab.runtime.signals import StopSignal, exit_code_for_signal, install_signal_handlers


def test_first_signal_calls_back_second_exits() -> None:
    got: list[int] = []
    restore = install_signal_handlers(got.append, (signal.SIGUSR1,))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert got == [signal.SIGUSR1]
        with pytest.raises(SystemExit) as exc:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert exc.value.code == 128 + signal.SIGUSR1
    finally:
        restore()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_stop_signal_flag() -> None:
    previous = signal.getsignal(signal.SIGUSR2)
    stop = StopSignal.install((signal.SIGUSR2,))
    try:
        assert not stop and stop.exit_code == 0
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop and stop.signum == signal.SIGUSR2
        assert stop.exit_code == exit_code_for_signal(signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert (exit_code_for_signal(signal.SIGINT), exit_code_for_signal(signal.SIGTERM)) == (130, 143)
