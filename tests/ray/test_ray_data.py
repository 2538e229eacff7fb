"""Batch OCR on Ray Data on a real two-node local cluster (simulated NPUs): the same texts as the in-process
pipeline, every input exactly once (failing ones with their error), bytes datasets, the ``ray-ocr`` command, and
the faults: an NPU actor's process killed mid-job, a whole node removed mid-job.

What makes the faults harmless is Ray's own fault tolerance, as :func:`paddlex_npu.ray.ocr` sets it: the NPU
actors have ``max_restarts=-1`` (a dead actor is started again, on any node with a free NPU) and
``max_task_retries=-1`` (the batches it held run again on it); Ray Data's CPU tasks have ``max_retries=-1``, and
the blocks a lost node held are rebuilt from their lineage. A batch's rows come from its one successful run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.ray.conftest import CHIP_TYPE, CHIPS, add_npu_node, bounded

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_ray_data_restarts_npu_actors_and_retries_their_batches_by_default():
    """What the fault tests rely on, pinned: a Ray upgrade that changes these defaults fails here first."""
    from ray.data import DataContext
    from ray.data._internal.execution.operators.actor_pool_map_operator import ActorPoolMapOperator

    from paddlex_npu.ray import ACTOR_FAULT_TOLERANCE

    applied = ActorPoolMapOperator._apply_default_remote_args({}, DataContext.get_current())
    assert {k: applied[k] for k in ACTOR_FAULT_TOLERANCE} == ACTOR_FAULT_TOLERANCE


def test_too_few_npus_a_missing_pipeline_or_input_fail_at_once(cluster, tmp_path):
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.ray import ocr

    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"ocr\(npus=5\) needs 5 NPU actor\(s\).* can hold 4 \(it declares 4 NPU"):
        ocr([str(tmp_path)], "OCR", npus=5)
    with pytest.raises(ConfigError, match="pipeline config .*missing.yaml does not exist"):
        ocr([str(tmp_path)], str(tmp_path / "missing.yaml"))
    table = tmp_path / "table.yaml"
    table.write_text("pipeline_name: table_recognition\n")
    with pytest.raises(ConfigError, match="'table_recognition': Ray Data's OCR job .* with `paddlex-npu serve`"):
        ocr([str(tmp_path)], str(table), npus=1)
    with pytest.raises(ConfigError, match="'layout_parsing': Ray Data's OCR job"):
        ocr([str(tmp_path)], "layout_parsing", npus=1)
    with pytest.raises(ConfigError, match="cannot read the inputs .*missing.png: FileNotFoundError"):
        ocr([str(tmp_path / "missing.png")], "OCR", npus=1)


def test_a_plan_without_a_cpu_for_the_decode_tasks_fails_within_seconds_naming_it(cluster, ocr_config, tmp_path):
    """The NPU actors holding every CPU (3 per node here) would leave the read and decode tasks waiting for ever."""
    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(ocr_config), encoding="utf-8")
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", str(tmp_path), str(tmp_path / "out")]
    cmd += ["--address", cluster.address, "--pipeline", str(pipeline), "--npus", "2", "--actor-cpus", "3"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1 and took < 30, (took, proc.stderr[-2000:])
    last = proc.stderr.strip().splitlines()[-1]
    assert "leave no node with the 1 CPU a read or decode task needs" in last, last
    assert "lower --actor-cpus or --decode-cpus" in last and "3 CPU, 2 NPU, chip Ascend310P3" in last, last


def _packages_for(chip: str, config: dict, folder: Path) -> dict:
    """The pipeline's packages again, their manifests saying they were built for ``chip``."""
    config = json.loads(json.dumps(config))
    for holder in (config["SubModules"][k] for k in ("TextDetection", "TextRecognition")):
        src = Path(holder["model_dir"])
        dst = folder / chip / src.name
        dst.mkdir(parents=True)
        for f in src.iterdir():
            shutil.copy(f, dst / f.name)
        manifest = json.loads((src / "inference.om.json").read_text(encoding="utf-8"))
        (dst / "inference.om.json").write_text(json.dumps({**manifest, "soc_version": chip}), encoding="utf-8")
        holder["model_dir"] = str(dst)
    return config


def test_work_is_pinned_to_the_packages_chip(cluster, ocr_config, sim_env, corpus, expected, tmp_path):
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.ray import ocr

    other = _packages_for("Ascend910B3", ocr_config, tmp_path)
    with pytest.raises(ConfigError, match="built for Ascend910B3 .* no node of the cluster has that chip"):
        ocr([str(corpus[0])], other, npus=1, env=sim_env)
    ours = _packages_for(CHIP_TYPE, ocr_config, tmp_path)
    ds = ocr([str(corpus[0])], ours, npus=1, env=sim_env)
    with bounded(300, "the job"):
        _check(ds.take_all(), [str(corpus[0])], expected)


def test_an_actor_that_cannot_build_its_pipeline_fails_the_command_with_the_reason(cluster, corpus, tmp_path):
    from paddlex_npu.samples import assets

    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(assets.ocr_pipeline_config(tmp_path / "no-models")), encoding="utf-8")
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", str(corpus[0]), str(tmp_path / "out.jsonl")]
    cmd += ["--address", cluster.address, "--pipeline", str(pipeline), "--runtime", "simulated"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    # the reason is the command's own line; Ray's exit hooks may print after it (seen once: "TypeError: 'Handlers'
    # object is not callable" from its logging at interpreter shutdown), so it need not be the last
    # (its progress lines, printed every few seconds while the job runs, are not the reason)
    ours = [
        line
        for line in proc.stderr.splitlines()
        if line.startswith("paddlex-npu ray-ocr: ") and " row(s) done " not in line
    ]
    assert len(ours) == 1, proc.stderr
    assert "no-models" in ours[0] and "raised on the cluster" in ours[0], ours[0]


def _check(rows, inputs, expected):
    """Every input exactly once; its texts equal the in-process pipeline's."""
    assert sorted(r["id"] for r in rows) == sorted(inputs)
    for r in rows:
        assert r["error"] is None, r["error"]
        assert r["texts"] == expected[r["id"]], r["id"]
        assert len(r["scores"]) == len(r["texts"]) == len(r["boxes"]) and all(len(b) == 4 for b in r["boxes"])


def test_texts_equal_the_in_process_pipeline_and_failing_inputs_keep_their_row(
    cluster, ocr_config, sim_env, corpus, expected, npu_pipeline, tmp_path
):
    from PIL import Image

    from paddlex_npu.ray import ocr

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    pdf = tmp_path / "two-pages.pdf"  # decoded in the CPU tasks with PaddleX's own PDF rendering
    first, *rest = [Image.open(p).convert("RGB") for p in corpus[6:8]]
    first.save(pdf, save_all=True, append_images=rest)
    good = [str(p) for p in corpus[:6]]
    inputs = good + [str(pdf), str(broken)]
    with bounded(300, "the job"):
        rows = ocr(inputs, ocr_config, npus=2, batch_size=2, env=sim_env).take_all()
    assert sorted((r["id"], r["page"]) for r in rows) == sorted([(p, 0) for p in inputs] + [(str(pdf), 1)])
    pages = sorted((r for r in rows if r["id"] == str(pdf)), key=lambda r: r["page"])
    assert [r["texts"] for r in pages] == [list(r["rec_texts"]) for r in npu_pipeline.predict(str(pdf))]
    by_id = {r["id"]: r for r in rows}
    assert "not an image OpenCV can decode" in by_id[str(broken)]["error"]
    _check([by_id[p] for p in good], good, expected)
    assert {by_id[p]["npu"] for p in good} <= {"0", "1", "2", "3"}  # the chips Ray assigned
    assert json.loads(by_id[good[0]]["result"])["rec_texts"] == expected[good[0]]


def test_a_bytes_dataset_decoded_in_the_actor(cluster, ocr_config, sim_env, corpus, expected):
    import ray

    from paddlex_npu.ray import ocr

    paths = [str(p) for p in corpus[:3]]
    ds = ray.data.read_binary_files(paths, include_paths=True)  # columns bytes, path (the id)
    with bounded(300, "the job"):
        rows = ocr(ds, ocr_config, npus=1, decode="actor", env=sim_env, keep_result=False).take_all()
    _check(rows, paths, expected)
    assert all(r["result"] is None for r in rows)


def test_the_ray_ocr_command_writes_one_local_parquet_file(cluster, ocr_config, sim_env, corpus, expected, tmp_path):
    """The small-job option: the rows through the driver into one file (three files given by path)."""
    import pyarrow.parquet as pq

    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(ocr_config), encoding="utf-8")
    out, inputs = tmp_path / "out.parquet", [str(p) for p in corpus[:3]]
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", *inputs, str(out)]
    cmd += ["--address", cluster.address, "--pipeline", str(pipeline), "--npus", "2", "--batch-size", "2"]
    proc = subprocess.run(cmd, env={**os.environ, **sim_env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{len(inputs)} row(s) (0 with an error) to {out} (parquet)" in proc.stdout
    assert "MapBatches(PipelineBatch)" in proc.stderr  # Ray Data's progress
    _check(pq.read_table(out).to_pylist(), inputs, expected)


def test_json_lines_hold_the_same_rows(tmp_path):
    import pyarrow as pa

    from paddlex_npu.cli.cluster import _Writer
    from paddlex_npu.ray.batch import _schema

    row = {"id": "a.png", "page": 0, "texts": ["Total 12"], "scores": [0.9], "boxes": [[1, 2, 3, 4]], "error": None}
    row.update({"npu": "2", "node": "n", "pid": 7, "seconds": 0.1, "result": "{}"})
    failed = {**row, "id": "b.png", "texts": [], "scores": [], "boxes": [], "error": "ValueError: not an image"}
    writer = _Writer(tmp_path / "out.jsonl", "jsonl")
    writer.write(pa.Table.from_pylist([row], schema=_schema()))
    writer.write(pa.Table.from_pylist([failed], schema=_schema()))
    writer.close(_schema())
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [row, failed]


def test_the_ray_ocr_command_names_a_bad_output(tmp_path):
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", str(tmp_path), str(tmp_path / "out.csv")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "cannot tell the format of" in proc.stderr and "name it .parquet or .jsonl" in proc.stderr


def test_the_ray_ocr_command_fills_a_folder_with_ray_writers_and_shows_progress(
    cluster, ocr_config, sim_env, corpus, expected, tmp_path
):
    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(ocr_config), encoding="utf-8")
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", str(corpus[0].parent), str(out), "--format", "jsonl"]
    cmd += ["--address", cluster.address, "--pipeline", str(pipeline), "--npus", "2", "--progress-every", "1"]
    cmd += ["--actor-threads", "1", "--decode-threads", "1"]
    proc = subprocess.run(cmd, env={**os.environ, **sim_env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{len(corpus)} row(s) (0 with an error) to {out} (jsonl files, written by Ray)" in proc.stdout
    assert re.search(r"ray-ocr: \d+ row\(s\) done \(0 with an error\), [\d.]+ rows/s", proc.stderr), proc.stderr
    rows = [json.loads(line) for f in sorted(out.iterdir()) for line in f.read_text(encoding="utf-8").splitlines()]
    _check(rows, [str(p) for p in corpus], expected)


def test_a_killed_npu_actor_is_restarted_and_no_page_is_lost_or_repeated(
    cluster, ocr_config, sim_env, corpus, expected
):
    from paddlex_npu.ray import ocr

    inputs = [str(p) for p in corpus]
    rows, victim = [], None
    with bounded(300, "the job with a killed actor"):
        for row in ocr(inputs, ocr_config, npus=2, batch_size=1, env=sim_env).iter_rows():
            if victim is None:  # mid-job: the first page is out, the others are queued or running
                victim = row["pid"]
                os.kill(victim, signal.SIGKILL)
            rows.append(row)
    _check(rows, inputs, expected)
    assert {r["pid"] for r in rows} - {victim}  # the rest was done by the other actor or the restarted one


def test_a_node_removed_mid_job_loses_no_page(cluster, ocr_config, sim_env, corpus, expected):
    from paddlex_npu.ray import ocr

    inputs = [str(p) for p in corpus]
    worker = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
    rows, removed = [], False
    try:
        with bounded(300, "the job with a node removed"):
            for row in ocr(inputs, ocr_config, npus=2, batch_size=1, env=sim_env).iter_rows():
                if not removed:  # mid-job: a host dies with its actor, its tasks and the blocks it held
                    cluster.remove_node(worker, allow_graceful=False)
                    removed = True
                rows.append(row)
    finally:
        if removed:
            add_npu_node(cluster, CHIPS[1])  # a replacement host, for the tests after this one
            cluster.wait_for_nodes()
    _check(rows, inputs, expected)


def test_an_actor_whose_device_is_lost_ends_and_a_fresh_one_finishes_the_job(
    cluster, ocr_config, sim_env, corpus, expected
):
    """The simulated device loses its context at each actor process's 9th device call (and every later one): the
    actor ends at once, Ray starts it fresh, the batch runs again; every page is answered once, without an error."""
    from paddlex_npu.ray import ocr

    inputs = [str(p) for p in corpus[:6]]
    env = {**sim_env, "PADDLEX_NPU_SIM_DEVICE_LOST": "9"}
    with bounded(300, "the job with lost devices"):
        rows = ocr(inputs, ocr_config, npus=1, batch_size=1, env=env).take_all()
    _check(rows, inputs, expected)
    assert len({r["pid"] for r in rows}) >= 2  # a fresh actor answered after the loss
