"""The simulated device: real outputs replayed by input digest, device time from the cost model with the GIL
held, and one device shared by processes without overlap (proved from recorded intervals, not from speed)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.config import SimulationConfig
from paddlex_npu.run import simulated
from paddlex_npu.run.reference import InferSession
from paddlex_npu.run.simulated import SimulatedSession, default_cost, monotonic
from tests.onnx_models import two_input_model

REPO = Path(__file__).resolve().parents[3]


def feeds(seed=0, n=2, h=8, w=16):
    rng = np.random.default_rng(seed)
    return [rng.random((n, 3, h, w), dtype=np.float32), np.arange(n * 2, dtype=np.int32).reshape(n, 2)]


def session(tmp_path, base_ms=1.0, device_id=0, **kw):
    kw.setdefault("pcie_gbps", 0.0)  # no transfer time unless a test asks (test_transfers_are_charged_per_byte)
    for figure in ("malloc_us", "free_us", "memcpy_us", "aicpu_us"):  # nor per-buffer work (test_sim_costs.py)
        kw.setdefault(figure, 0.0)
    onnx = two_input_model(tmp_path / "m" / "inference.onnx")
    sim = SimulationConfig(base_ms=base_ms, ms_per_melem=0.0, store=str(tmp_path / "store"), **kw)
    sim.lock_dir = sim.lock_dir or str(tmp_path / "locks")
    return SimulatedSession(device_id, str(onnx.with_suffix(".om")), simulation=sim)


def test_replays_the_reference_outputs_and_counts_inputs_never_seen(tmp_path):
    sim = session(tmp_path)
    ref = InferSession(0, str(tmp_path / "m" / "inference.om"))
    before = simulated.stats()
    first = sim.infer(feeds(0), mode="dymshape", custom_sizes=[10000, 1000])
    again = sim.infer(feeds(0), mode="dymshape", custom_sizes=[10000, 1000])
    other = sim.infer(feeds(1), mode="dymshape", custom_sizes=[10000, 1000])
    after = simulated.stats()
    for got, f in ((first, feeds(0)), (again, feeds(0)), (other, feeds(1))):
        want = ref.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    assert after["calls"] - before["calls"] == 3
    assert after["computed"] - before["computed"] == 2 and after["replayed"] - before["replayed"] == 1
    # a new session (another process, a later run) replays from the store
    fresh = session(tmp_path)
    before = simulated.stats()
    fresh.infer(feeds(1), mode="dymshape", custom_sizes=[10000, 1000])
    assert simulated.stats()["replayed"] - before["replayed"] == 1


def test_contract_checks_still_apply(tmp_path, capsys):
    sim = session(tmp_path)
    with pytest.raises(RuntimeError):
        sim.infer(feeds(), mode="dymshape", custom_sizes=[8, 8])  # output larger than reserved
    assert "larger than" in capsys.readouterr().out


def test_device_time_follows_the_cost_model(tmp_path):
    sim = session(tmp_path, base_ms=40.0)
    t0 = monotonic()
    sim.infer(feeds(), mode="dymshape", custom_sizes=[10000, 1000])
    waited = monotonic() - t0
    ((start, end),) = sim.device_intervals
    assert end - start == pytest.approx(0.040)  # the device slot is the modelled time
    assert waited >= 0.040  # and the call returns after it
    assert default_cost("TextDetPredictor").ms_per_melem < default_cost("TextRecPredictor").ms_per_melem
    assert default_cost(None) == default_cost("TextRecPredictor")


def test_transfers_are_charged_per_byte(tmp_path):
    """Input bytes host to device and output bytes back at pcie_gbps: 1 MB/s here, so 1 kB is 1 ms."""
    sim = session(tmp_path, base_ms=0.0, pcie_gbps=0.001)
    before = simulated.model_stats().get("m", {})
    outs = sim.infer(feeds(), mode="dymshape", custom_sizes=[10000, 1000])
    moved_in, moved_out = sum(f.nbytes for f in feeds()), sum(o.nbytes for o in outs)
    ((start, end),) = sim.device_intervals
    assert end - start == pytest.approx((moved_in + moved_out) / 1e6)
    after = simulated.model_stats()["m"]
    assert after["bytes_in"] - before.get("bytes_in", 0) == moved_in == 3088
    assert after["bytes_out"] - before.get("bytes_out", 0) == moved_out > 0
    assert after["transfer_ms"] - before.get("transfer_ms", 0) == pytest.approx((moved_in + moved_out) / 1e3)
    assert default_cost().pcie_gbps == simulated.PCIE_GBPS == 16.0


def _ticker(stop: threading.Event, ticks: list) -> None:
    while not stop.is_set():
        ticks.append(monotonic())
        time.sleep(0.0005)


def test_the_gil_is_held_for_the_device_time(tmp_path):
    """A Python thread records a timestamp every 0.5 ms; none falls inside a 150 ms simulated call (away from
    its edges), while the same thread records many during a 150 ms ``time.sleep`` (which releases the GIL)."""
    sim = session(tmp_path, base_ms=150.0)
    sim.infer(feeds(), mode="dymshape", custom_sizes=[10000, 1000])  # record once: the next call replays
    stop, ticks = threading.Event(), []
    t = threading.Thread(target=_ticker, args=(stop, ticks), daemon=True)
    t.start()
    time.sleep(0.05)
    sim.infer(feeds(), mode="dymshape", custom_sizes=[10000, 1000])
    c0 = monotonic()
    time.sleep(0.15)
    c1 = monotonic()
    stop.set()
    t.join()
    start, end = sim.device_intervals[-1]
    assert end - start >= 0.15 - 1e-9  # end = start + 0.15 in floats: the difference may round just below
    # (the recorded interval includes a few bytecodes before and after the C call, where the thread may get one
    # tick in: 10 ms margins, two switch intervals)
    assert [(x - start, end - x) for x in ticks if start + 0.01 < x < end - 0.01] == []
    assert len([x for x in ticks if c0 < x < c1]) >= 10  # the control: the thread does run when it may


@pytest.fixture
def no_timed_switches():
    """The interpreter takes the GIL from a thread only after the switch interval: at 30 s it never does in a
    test, so another thread runs only where the holder releases the GIL itself (blocking calls, I/O, hashlib)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    yield
    sys.setswitchinterval(old)


def test_a_replayed_call_on_a_large_input_holds_the_gil_from_entry_to_return(tmp_path, no_timed_switches):
    """A 15.7 MB input (a large recognition batch is ~4 MB): a thread recording timestamps records none between
    the call's entry and return, digest and mapped outputs included. The same thread does record during
    hashlib's SHA-1 of that input (which releases the GIL), so the check can see a release."""
    sim = session(tmp_path, base_ms=5.0)
    big = [np.random.default_rng(3).random((8, 3, 256, 640), dtype=np.float32), np.zeros((8, 2), np.int32)]
    sizes = [big[0].nbytes, 64]
    first = sim.infer(big, mode="dymshape", custom_sizes=sizes)  # recording: ONNX Runtime, which releases it
    stop, ticks = threading.Event(), []
    t = threading.Thread(target=_ticker, args=(stop, ticks), daemon=True)
    t.start()
    calls, sha = [], []
    try:
        for _ in range(3):
            time.sleep(0.01)  # the ticker gets the GIL, and wants it back while the call runs
            t0 = monotonic()
            out = sim.infer(big, mode="dymshape", custom_sizes=sizes)
            calls.append((t0, monotonic()))
        time.sleep(0.01)
        t0 = monotonic()
        hashlib.sha1(memoryview(big[0]).cast("B")).hexdigest()
        sha.append((t0, monotonic()))
        time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    np.testing.assert_array_equal(out[0], first[0])
    inside = [x for x in ticks for t0, t1 in calls if t0 < x < t1]
    assert inside == [], f"a thread ran during a simulated call: {inside}, calls {calls}"
    assert any(t0 < x < t1 for x in ticks for t0, t1 in sha)  # the control: a release is seen


def test_replayed_outputs_are_private_copies_on_write(tmp_path):
    """A replay maps the stored outputs copy-on-write: a pipeline that writes into one changes nothing for the
    next replay, and a mapping freed unwritten serves the next replay of the same input again."""
    import gc

    sim = session(tmp_path)
    f = feeds(5)
    first = [o.copy() for o in sim.infer(f, mode="dymshape", custom_sizes=[10000, 1000])]
    again = sim.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    assert again[0].flags.writeable
    again[0][...] = -1.0  # the pipeline may write into an output
    del again
    gc.collect()
    reused = sim.store.reused
    third = sim.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    np.testing.assert_array_equal(third[0], first[0])
    assert sim.store.reused == reused  # the written mapping was not given back
    np.testing.assert_array_equal(third[1], first[1])  # read only
    del third
    gc.collect()
    fourth = sim.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    assert sim.store.reused == reused + 1  # the untouched one was
    for g, w in zip(fourth, first):
        np.testing.assert_array_equal(g, w)


CHILD = textwrap.dedent(
    """
    import json, sys, time
    from paddlex_npu.config import SimulationConfig
    from paddlex_npu.run.simulated import SimulatedSession
    import numpy as np
    model, store, locks, device, calls = sys.argv[1:6]
    sim = SimulationConfig(base_ms=25.0, ms_per_melem=0.0, store=store, lock_dir=locks)
    s = SimulatedSession(int(device), model, simulation=sim)
    f = [np.ones((1, 3, 4, 4), np.float32), np.zeros((1, 2), np.int32)]
    s.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    s.device_intervals.clear()
    print("ready", flush=True)
    go = float(sys.stdin.readline())
    while time.clock_gettime(time.CLOCK_MONOTONIC) < go:
        time.sleep(0.001)
    for _ in range(int(calls)):
        s.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    print(json.dumps(list(s.device_intervals)), flush=True)
    """
)


def _run_two(tmp_path, devices):
    """Two processes make 12 simulated calls of 25 ms each from the same instant; their device intervals."""
    onnx = two_input_model(tmp_path / "m" / "inference.onnx")
    args = [str(onnx.with_suffix(".om")), str(tmp_path / "store"), str(tmp_path / "locks")]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, *args, str(d), "12"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for d in devices
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go = monotonic() + 0.3
    for p in procs:
        p.stdin.write(f"{go}\n")
        p.stdin.flush()
    out = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        assert p.wait(timeout=60) == 0
    return out


def _overlap(a, b) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def test_two_processes_on_one_device_never_overlap(tmp_path):
    a, b = _run_two(tmp_path, [0, 0])
    assert _overlap(a, b) == 0.0
    # and they did contend: each process's calls lie between the other's first and last
    assert a[0][0] < b[-1][1] and b[0][0] < a[-1][1]
    merged = sorted(a + b)
    assert all(merged[i][1] <= merged[i + 1][0] for i in range(len(merged) - 1))


def test_two_processes_on_two_devices_overlap(tmp_path):
    a, b = _run_two(tmp_path, [0, 1])
    busy = sum(e - s for s, e in a)
    assert _overlap(a, b) > 0.5 * busy  # mostly simultaneous (generous: a busy machine may delay one)


def test_the_store_keeps_a_bounded_number_of_files_open(tmp_path):
    store = simulated.ReplayStore(tmp_path / "store", keep_open=2)
    outs = {f"{k:032x}": [np.full((2, 3), k, np.float32), np.arange(k + 1, dtype=np.int64)] for k in range(4)}
    for digest, o in outs.items():
        store.put(digest, o)
    for _ in range(2):
        for digest, o in outs.items():
            got = store.get(digest, 2)
            assert [g.dtype for g in got] == [np.float32, np.int64]
            for g, w in zip(got, o):
                np.testing.assert_array_equal(g, w)
    assert len(store._open) == 2
    assert store.get("f" * 32, 2) is None
    with pytest.raises(OSError, match="holds 2 outputs, the model has 3: delete it"):
        simulated.ReplayStore(tmp_path / "store").get(next(iter(outs)), 3)
    store.close()
    assert not store._open


def test_the_digest_is_xxh3_128_of_names_dtypes_shapes_and_bytes():
    """The GIL-holding C path computes the same XXH3-128 as the xxhash package's own API."""
    import xxhash

    feed = {"x": np.random.default_rng(7).random((2, 3, 64, 96), dtype=np.float32), "a": np.arange(4, dtype=np.int32)}
    h = xxhash.xxh3_128()
    for name, arr in feed.items():
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(memoryview(arr).cast("B"))
    assert simulated.feed_digest(feed) == h.hexdigest()
    assert simulated.feed_digest({"x": feed["x"][:, :, ::2]}) != simulated.feed_digest({"x": feed["x"]})


def test_device_memory_is_held_and_freed_as_ais_bench_allocates_it(tmp_path, monkeypatch):
    """Weights for the session's life; per call inputs + reserved outputs (PyInferenceSession.cpp:398-420,
    ModelInferenceProcessor.cpp:148-175 @8da7f645), freed after it; a failed call's inputs never (:414-420)."""
    monkeypatch.setattr(simulated, "MEMORY", simulated.DeviceMemory())
    monkeypatch.setattr(simulated, "ACL", simulated.SimulatedAcl())  # the loss below stays in this one
    sim = session(tmp_path)
    weights = (tmp_path / "m" / "inference.onnx").stat().st_size
    assert simulated.stats()["device_bytes"] == weights
    x = feeds(0)
    for _ in range(3):
        sim.infer(x, mode="dymshape", custom_sizes=[10000, 1000])
    got = simulated.stats()
    assert got["device_bytes"] == weights  # flat between calls
    assert got["device_peak_bytes"] == weights + sum(a.nbytes for a in x) + 11000
    monkeypatch.setenv("PADDLEX_NPU_SIM_DEVICE_LOST", "1")
    with pytest.raises(RuntimeError, match=r"^\[-1\]\[ACL: general failure\] $"):
        sim.infer(x, mode="dymshape", custom_sizes=[10000, 1000])
    lost = simulated.stats()
    assert lost["device_leaked_bytes"] == sum(a.nbytes for a in x) and lost["device_bytes"] == weights + sum(
        a.nbytes for a in x
    )
    assert simulated.ACL.rt.get_last_error(0) == simulated.LOST_CODE  # the code only through the query
    sim.free_resource()
    assert simulated.stats()["device_bytes"] == sum(a.nbytes for a in x)  # the weights went, the leak stays
    published = simulated.device_memory_of([os.getpid()], tmp_path / "locks")[os.getpid()]  # as npu-smi lists it
    assert published["bytes"] == sum(a.nbytes for a in x) and published["leaked_bytes"] == published["bytes"]
