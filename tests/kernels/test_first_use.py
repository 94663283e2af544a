"""``emulinalg.backends.cuda.first_use``: the first call of a kind runs alone, later ones at once
(issue #24, "first use": dask's worker threads on a fresh machine each compiled the same
kernels side by side). Plain Python: threads and a body that records who runs with whom."""

from __future__ import annotations

import threading
import time

import pytest

from emulinalg.backends import cuda


class _Bodies:
    """Bodies of one kind: how many run at once, at most, and whether any ran beside the
    first (cold) one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.runs = 0
        self.first_running = False
        self.beside_first = 0

    def body(self, seconds, first):
        with self.lock:
            self.now += 1
            self.runs += 1
            self.most = max(self.most, self.now)
            if first:
                self.first_running = True
            elif self.first_running:
                self.beside_first += 1
        time.sleep(seconds)
        with self.lock:
            self.now -= 1
            if first:
                self.first_running = False


def _threads(n, target):
    start = threading.Barrier(n)

    def run():
        start.wait()
        target()

    pool = [threading.Thread(target=run) for _ in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in pool), "a thread never left first_use"


def test_first_call_alone_then_all_at_once():
    key = ("test", "first-alone", object())
    seen = _Bodies()
    first = []

    def call():
        with cuda.first_use(key):
            with seen.lock:
                mine = not first
                if mine:
                    first.append(threading.get_ident())
            seen.body(0.2, mine)

    _threads(8, call)
    assert seen.runs == 8 and len(first) == 1
    assert seen.beside_first == 0  # nobody ran beside the first call
    # the seven that waited ran together once it was done (sleeping bodies overlap)
    assert seen.most >= 2
    assert key in cuda._warm


def test_waiting_threads_start_only_after_the_first_call():
    key = ("test", "order", object())
    done = threading.Event()
    early = []

    def call():
        with cuda.first_use(key):
            if not done.is_set() and threading.current_thread().name == "first":
                time.sleep(0.3)
                done.set()
            elif not done.is_set():
                early.append(threading.current_thread().name)

    t0 = threading.Thread(target=call, name="first")
    t0.start()
    time.sleep(0.05)  # t0 holds the key's lock
    rest = [threading.Thread(target=call, name=f"w{i}") for i in range(4)]
    for t in rest:
        t.start()
    for t in [t0, *rest]:
        t.join(timeout=30)
    assert done.is_set() and early == []


def test_a_failed_first_call_leaves_the_kind_cold():
    key = ("test", "raises", object())
    with pytest.raises(ValueError), cuda.first_use(key):
        raise ValueError("compile failed")
    assert key not in cuda._warm
    with cuda.first_use(key):  # the next caller runs alone in its turn, and warms it
        pass
    assert key in cuda._warm


def test_reentrant_in_one_thread():
    key = ("test", "nested", object())
    got = []

    def nested():
        with cuda.first_use(key), cuda.first_use(key):
            got.append(1)

    t = threading.Thread(target=nested)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and got == [1]


def test_kinds_do_not_wait_for_each_other():
    a, b = ("test", "kind a", object()), ("test", "kind b", object())
    inside = threading.Event()
    release = threading.Event()
    got = []

    def slow():
        with cuda.first_use(a):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=slow)
    t.start()
    assert inside.wait(10)
    with cuda.first_use(b):  # another kind, cold too: not held up by a's first call
        got.append("b")
    release.set()
    t.join(timeout=10)
    assert got == ["b"] and a in cuda._warm and b in cuda._warm


def test_an_idle_call_leaves_the_kind_cold():
    key = ("test", "idle", object())
    with cuda.first_use(key) as gate:
        gate.idle()  # e.g. a product that went native: none of the kind's kernels compiled
    assert key not in cuda._warm
    with cuda.first_use(key):
        pass
    assert key in cuda._warm


def test_a_nested_call_does_not_warm_the_kind_before_the_outer_one_ends():
    key = ("test", "nested order", object())
    inner_done, order = threading.Event(), []

    def outer():
        with cuda.first_use(key):
            with cuda.first_use(key):
                order.append("inner")
            inner_done.set()
            time.sleep(0.2)
            order.append("outer end")

    def later():
        inner_done.wait(10)
        with cuda.first_use(key):  # arrives while the outer first call still runs
            order.append("later")

    threads = [threading.Thread(target=outer), threading.Thread(target=later)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert order == ["inner", "outer end", "later"] and key in cuda._warm
