"""Partial rollout's weight mailbox (engines/rollout/mailbox.py): a version posted on one side is read on the
other through shared memory, and the lock that guards the shared weights is one lock for both."""
import multiprocessing as mp

from rlbench.engines.rollout.mailbox import WeightMailbox


def _post(box: WeightMailbox, version: int) -> None:
    with box.lock:
        box.post(version)


def _try_lock(box: WeightMailbox, got) -> None:
    got.value = box.lock.acquire(timeout=0.2)
    if got.value:
        box.lock.release()


def test_nothing_is_posted_at_first_and_a_post_is_read_back():
    box = WeightMailbox("keep")
    assert (box.version, box.resume_kv) == (-1, "keep")
    with box.lock:
        box.post(3)
    assert box.version == 3


def test_a_version_posted_in_another_process_is_seen_here():
    """The worker reads the integer with no lock at every token boundary: it must be shared memory."""
    box = WeightMailbox()
    child = mp.get_context("fork").Process(target=_post, args=(box, 7))
    child.start()
    child.join(10)
    assert child.exitcode == 0 and box.version == 7


def test_the_lock_held_here_keeps_the_other_side_out():
    box = WeightMailbox()
    ctx = mp.get_context("fork")
    got = ctx.RawValue("b", 1)
    with box.lock:  # the trainer writing the shared weights
        child = ctx.Process(target=_try_lock, args=(box, got))
        child.start()
        child.join(10)
    assert child.exitcode == 0 and got.value == 0
    child = ctx.Process(target=_try_lock, args=(box, got))
    child.start()
    child.join(10)
    assert got.value == 1
