"""Where the NPU route's host CPU goes per page: cProfile over the serial route (simulated device), packages as
``convert`` builds them, rendered document pages; the top functions by own time and the route's steps by
cumulative time, as shares of the profiled CPU. The simulated device's own work (digest, replay) is listed too:
a real device does not spend it.

    PYTHONPATH=$PWD python benchmarks/profile_host.py [--det PP-OCRv6_small_det --rec PP-OCRv6_small_rec]
        [--pages 4] [--pages-kind dense] [--repeat 2] [--no-reduce] [--engine onnxruntime]

``--engine onnxruntime``: profile PaddleX's own CPU pipeline on the source models instead (its model time is
then most of it; its pre- and post-processing are what the route shares with it).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

from paddlex_npu.samples import assets, env

# the route's steps by the function that does them (file fragment, function name), as PaddleX 3.7 names them
STEPS = {
    "image read/decode (cv2.imdecode)": ("io/readers.py", "read_file"),
    "det resize": ("text_detection/processors.py", "resize_image_type0"),
    "det normalise (per channel, cv2.split/merge)": ("text_detection/processors.py", "_norm"),
    "det batch (np.stack of the CHW view)": ("core/shape_base.py", "stack"),
    "DB post-processing (contours, scores, unclip)": ("text_detection/processors.py", "boxes_from_bitmap"),
    "rotated crops (warpPerspective)": ("common/crop_image_regions.py", "get_rotate_crop_image"),
    "rec resize + normalise": ("text_recognition/processors.py", "resize_norm_img"),
    "rec padding to the batch's width": ("text_recognition/processors.py", "__pad_imgs"),
    "the route's host steps (rec resize, batches, crops)": ("paddlex/host_steps.py", "__call__"),
    "CTC decode, PaddleX's (full scores)": ("text_recognition/processors.py", "decode"),
    "CTC decode, the route's (reduced outputs)": ("paddlex/ctc_decode.py", "decode_reduced"),
    "result objects": ("result/base_cv_result.py", "__init__"),
    "OM runner call (input copy, shape policy, session)": ("run/runner.py", "__call__"),
    "of it: the simulated device (not on a real device)": ("run/simulated.py", "_compute"),
    "of it: the simulator's input digest": ("run/simulated.py", "feed_digest"),
    "onnxruntime's run (PaddleX's engine)": ("~", "<built-in method onnxruntime.capi.onnxruntime_pybind11_state.run>"),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--det", default=assets.DET_V6_SMALL)
    p.add_argument("--rec", default=assets.REC_V6_SMALL)
    p.add_argument("--pages", type=int, default=4)
    p.add_argument("--pages-kind", choices=tuple(assets.PAGE_KINDS), default="sparse")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--no-reduce", action="store_true")
    p.add_argument("--no-device-normalise", action="store_true")
    p.add_argument("--engine", choices=("om", "onnxruntime"), default="om")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, help="write the raw profile (pstats) here")
    args = p.parse_args()

    env.prepare(default_runtime=False)
    os.environ["PADDLEX_NPU_RUNTIME"] = "simulated"
    os.environ.setdefault("PADDLEX_NPU_SIM_LOCKS", tempfile.mkdtemp())
    from paddlex_npu.paddlex.pipelines import cpu_route, create_on_device
    from paddlex_npu.perf.serve_load import ocr_packages

    work = Path(tempfile.mkdtemp(prefix="paddlex-npu-profile-"))
    root = assets.build_model_folders()
    if args.engine == "om":
        on_device = (not args.no_reduce, not args.no_device_normalise)
        packages = ocr_packages(root, work / "packages", args.det, args.rec, *on_device)
        pipeline = create_on_device(assets.ocr_pipeline_config(packages, det=args.det, rec=args.rec), 0, None)
    else:
        pipeline = cpu_route(assets.ocr_pipeline_config(root / "om", det=args.det, rec=args.rec), "onnxruntime")
    pages = [str(x) for x in assets.render_pages_of(args.pages_kind, work, args.pages)]
    for page in pages:  # warm-up (and the simulated device's recording pass)
        list(pipeline.predict(page))
    profile = cProfile.Profile(time.process_time)
    n = 0
    c0 = time.process_time()
    profile.enable()
    for _ in range(args.repeat):
        for page in pages:
            list(pipeline.predict(page))
            n += 1
    profile.disable()
    cpu_ms = (time.process_time() - c0) * 1000 / n
    _report(profile, n, cpu_ms, args)
    return 0


def _report(profile: cProfile.Profile, n: int, cpu_ms: float, args: argparse.Namespace) -> None:
    stats = pstats.Stats(profile)
    if args.out:
        stats.dump_stats(str(args.out))
    total = sum(v[2] for v in stats.stats.values())  # own time, all functions
    print(
        f"{args.engine} route, {args.det} + {args.rec}, {n} pages: {cpu_ms:.1f} ms CPU per page "
        f"(profiled {1000 * total / n:.1f} ms; load {os.getloadavg()[0]:.1f})"
    )
    print("steps (cumulative, ms per page, share of the profiled CPU):")
    for step, (file, func) in STEPS.items():
        cum = sum(v[3] for (f, _, name), v in stats.stats.items() if f.endswith(file) and name == func)
        if cum:
            print(f"  {step:<42} {1000 * cum / n:7.2f}  {100 * cum / total:5.1f}%")
    print(f"top {args.top} functions by own time:")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[: args.top]
    for (f, line, name), v in rows:
        where = "/".join(Path(f).parts[-2:])
        print(f"  {1000 * v[2] / n:7.2f} ms {100 * v[2] / total:5.1f}%  {v[1]:>7} calls  {name} ({where}:{line})")


if __name__ == "__main__":
    raise SystemExit(main())
