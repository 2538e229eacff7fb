"""``paddlex-npu serve`` on PaddleX's document pipelines, ``table_recognition`` (SLANet_plus, real weights, split
around its decoder loop, with PP-OCRv6 det/rec) and ``layout_parsing`` (with the PicoDet layout model): PaddleX's
own endpoints and schemas, through the same worker pool, guard and replies as OCR; tables and pages read as the
in-process route reads them."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from paddlex_npu.samples import assets
from paddlex_npu.samples.documents import layout_parsing_config
from paddlex_npu.samples.table_model import table_pipeline_config
from paddlex_npu.samples.tables import render_page, sample_tables
from tests.helpers import NPU_HPI
from tests.http_client import call, ocr_body
from tests.serve.conftest import free_ports, server_env, stop, wait_until

pytest.importorskip("fastapi", reason="the serving extra (requirements/serving.txt): the 3.7 environment only")


def _config(table_models, asset_root) -> dict:
    return table_pipeline_config(table_models[0], asset_root / "om", assets.DET_V6_SMALL, assets.REC_V6_SMALL)


def _serve(config: dict, folder):
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({**config, "Serving": {"visualize": False}}))
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    log = folder / "serve.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(path), "--port", str(port), "--workers", "1"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    why = wait_until(lambda: call(url + "/ready", timeout=5)[0] == 200, proc, 240, log)
    assert why is None, why
    return {"url": url, "log": log, "proc": proc}


@pytest.fixture(scope="module")
def server(table_models, asset_root, tmp_path_factory):
    server = _serve(_config(table_models, asset_root), tmp_path_factory.mktemp("serve-tables"))
    try:
        yield server
    finally:
        assert stop(server["proc"]) == 0, server["log"].read_text()[-3000:]


def test_tables_are_served_with_paddlexs_schema_as_the_route_reads_them(server, table_models, asset_root, tmp_path):
    from paddlex import create_pipeline

    tables = sample_tables(tmp_path)
    route = create_pipeline(config=_config(table_models, asset_root), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        for name in ("wired", "merged"):
            # PaddleX's table app answers a logId of its own (its OCR app echoes the request's)
            status, ans = call(server["url"] + "/table-recognition", ocr_body(tables[name]))
            assert status == 200 and ans["errorCode"] == 0 and ans["logId"], ans
            (served,) = ans["result"]["tableRecResults"][0]["prunedResult"]["table_res_list"]
            (want,) = list(route.predict(str(tables[name])))[0]["table_res_list"]
            assert served["pred_html"] == want["pred_html"], name
            assert served["table_ocr_pred"]["rec_texts"] == list(want["table_ocr_pred"]["rec_texts"]), name
            assert not ans["result"]["tableRecResults"][0].get("outputImages")  # Serving.visualize: False
    finally:
        route.close()
    assert '<td colspan="2">Fruit</td>' in served["pred_html"]  # the merged header, as drawn


def test_a_bad_table_request_is_answered_from_the_reply_table(server):
    status, ans = call(server["url"] + "/table-recognition", b'{"file": 3}')
    assert status == 422 and ans["errorCode"] == 422, ans
    status, ans = call(server["url"] + "/table-recognition", ocr_body(b"not an image"))
    assert status == 422 and ans["errorMsg"], ans  # an undecodable file: the client's mistake, not a 5xx
    assert call(server["url"] + "/ready")[0] == 200  # still serving


def test_triton_refuses_a_table_pipeline_naming_what_serves_it(table_models, asset_root, tmp_path):
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.triton.repo import TritonOptions, build_triton_repo

    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(_config(table_models, asset_root)))
    with pytest.raises(ConfigError, match="triton-repo serves PaddleX's OCR pipeline .* with `paddlex-npu serve`"):
        build_triton_repo(path, tmp_path / "repo", TritonOptions())
    assert not (tmp_path / "repo").exists()


def test_a_page_is_served_by_the_layout_parsing_endpoint_as_the_route_reads_it(table_models, asset_root, tmp_path):
    from paddlex import create_pipeline

    config = layout_parsing_config(asset_root / "om", assets.DET_V6_SMALL, assets.REC_V6_SMALL)
    png, _ = render_page(tmp_path)
    server = _serve(config, tmp_path)
    try:
        status, ans = call(server["url"] + "/layout-parsing", ocr_body(png))
    finally:
        assert stop(server["proc"]) == 0, server["log"].read_text()[-3000:]
    assert status == 200 and ans["errorCode"] == 0, ans
    (served,) = ans["result"]["layoutParsingResults"]
    route = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        (want,) = list(route.predict(str(png)))
    finally:
        route.close()
    blocks = [(b["block_label"], b["block_content"]) for b in served["prunedResult"]["parsing_res_list"]]
    assert blocks == [(b["block_label"], b["block_content"]) for b in want["parsing_res_list"]]
    assert [label for label, _ in blocks] == ["title", "text", "table", "text"]
