"""core.collector: a round may pause the cyclic collector, but never leaves it off."""
import gc
import threading

import pytest

from core.collector import collector_paused


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was else gc.disable()


def test_the_collector_is_off_inside_and_on_again_after(collector_on):
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_is_on_again_after_the_body_raises(collector_on):
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the round failed")
    assert gc.isenabled()


def test_nested_pauses_resume_when_the_outermost_ends(collector_on):
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_pauses_from_two_threads_resume_when_the_last_ends(collector_on):
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()
