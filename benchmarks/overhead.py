"""Overhead of the NPU route: its throughput relative to calling ONNX Runtime directly.

Runs, on the same ONNX file and the same inputs, (a) an ``onnxruntime.InferenceSession`` called directly and
(b) the NPU route as PaddleX calls it (the OM runner, ``runner(x=[...])``, over the CPU reference
``InferSession``). The difference is what paddlex-npu adds per call: input ordering and dtype checks, the
per-call ``custom_sizes``, the session contract's checks. Target: ratio >= 0.97.

Then the runner's own cost per call with a session that answers instantly (its ``infer`` returns outputs made
beforehand): everything the route adds around a device call, with no model time to hide it. Target: < 50 µs.

    python benchmarks/overhead.py [--seconds 5] [--instant-calls 20000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.run.runner import build_om_runner  # the runner alone: PaddleX is not imported here
from paddlex_npu.samples import assets

CASES = {
    "det 1x3x640x640": (assets.DET, (1, 3, 640, 640)),
    "rec 6x3x48x320": (assets.REC, (6, 3, 48, 320)),
}


def _rate(fn, seconds: float) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def instant_cost_us(folder, x: np.ndarray, calls: int, rounds: int = 5) -> float:
    """Median over ``rounds`` of the runner's µs per call (``runner(x=[x])``) when the session answers at once."""
    runner = build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig())
    outputs = runner(x=[x])
    session = runner.session
    session.infer = lambda feeds, mode="dymshape", custom_sizes=None: outputs  # the instant session
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            runner(x=[x])
        per_call.append((time.perf_counter() - start) / calls * 1e6)
    runner.close()
    return float(np.median(per_call))


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instant-calls", type=int, default=20000, help="calls per round with the instant session")
    args = parser.parse_args()
    root = assets.build_model_folders() / "om"
    print(f"{'case':<18}{'runner µs/call, instant session':>34}")
    instant = {}
    for case, (model, shape) in CASES.items():
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        instant[case] = instant_cost_us(root / model, x, args.instant_calls)
        print(f"{case:<18}{instant[case]:>34.1f}")
    worst_us = max(instant.values())
    print(f"worst {worst_us:.1f} µs per call (target < 50 µs): {'OK' if worst_us < 50 else 'ABOVE TARGET'}\n")

    print(f"{'case':<18}{'direct ORT /s':>14}{'NPU route /s':>14}{'ratio':>8}")
    worst = float("inf")
    for case, (model, shape) in CASES.items():
        folder = root / model
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        direct = ort.InferenceSession(str(folder / "inference.onnx"), providers=["CPUExecutionProvider"])
        name = direct.get_inputs()[0].name
        runner = build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig())
        np.testing.assert_array_equal(runner(x=[x])[0], direct.run(None, {name: x})[0])
        d_rates, r_rates = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both sides alike
            d_rates.append(_rate(lambda: direct.run(None, {name: x}), args.seconds))  # noqa: B023
            r_rates.append(_rate(lambda: runner(x=[x]), args.seconds))  # noqa: B023
        d, r = float(np.median(d_rates)), float(np.median(r_rates))
        worst = min(worst, r / d)
        print(f"{case:<18}{d:>14.2f}{r:>14.2f}{r / d:>8.3f}")
        runner.close()
    print(f"worst ratio {worst:.3f} (target >= 0.97): {'OK' if worst >= 0.97 else 'BELOW TARGET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
