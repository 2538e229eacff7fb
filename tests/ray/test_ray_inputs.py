"""Ray Data's inputs on the real two-node local cluster (simulated NPUs): bad inputs bounded as ``serve`` bounds
them (pixel bombs refused from their headers, a broken file, an input that kills its worker every time), each
answered once by a row; and a corpus read from and written to a second pyarrow file system, with the
settings exported in the driver's environment reaching every task."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import zlib
from pathlib import Path

import pytest

from paddlex_npu.ray.batch import PipelineBatch
from tests.ray.conftest import bounded

pytestmark = [pytest.mark.ray, pytest.mark.slow]

POISON = "poison"
GIB = 1 << 30


class DiesOnPoison(PipelineBatch):
    """The pipeline actor, whose process dies on any input named *poison* (a page that crashes the device
    driver, say), every time."""

    def predict(self, item_id, image):
        if POISON in Path(item_id).name:
            os._exit(1)
        return super().predict(item_id, image)


def _png_bomb(path: Path, side: int) -> Path:
    """A real PNG of side x side grey pixels, all zero: a few hundred KB that decode to side**2 * 3 bytes."""
    row = b"\0" * (1 + side)  # filter byte + one grey byte per pixel
    deflate = zlib.compressobj(9)
    data = b"".join(deflate.compress(row) for _ in range(side)) + deflate.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b""))
    return path


def _pdf_of_huge_pages(path: Path, pages: int) -> Path:
    """A PDF of ``pages`` pages of 14400 x 14400 points (PDF's largest): each over the image limit at PaddleX's
    render scale, refused before anything is rendered."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(14400, 14400)
    doc.save(str(path))
    return path


def _tree_rss() -> int:
    """Resident bytes of this process and every process under it (the local cluster's raylets and workers)."""
    import psutil

    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


class PeakRss:
    """The largest :func:`_tree_rss` seen while the block runs (sampled every 0.2 s). A job's growth includes its
    new actors' processes (PaddleX and a pipeline each), so a job's is compared with the same job's over the good
    inputs only."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = _tree_rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _tree_rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_bombs_a_broken_file_and_an_input_that_kills_its_worker_each_get_one_error_row(
    cluster, ocr_config, sim_env, corpus, expected, tmp_path
):
    from paddlex_npu.ray import ocr

    good = [str(p) for p in corpus[:4]]
    bomb = str(_png_bomb(tmp_path / "bomb.png", 20000))  # 400 Mpx: 1.2 GB decoded
    assert os.path.getsize(bomb) < 2 << 20
    pdf = str(_pdf_of_huge_pages(tmp_path / "huge-pages.pdf", 3))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    poison = tmp_path / f"{POISON}.png"
    shutil.copy(corpus[5], poison)
    inputs = good + [bomb, pdf, str(broken), str(poison)]
    options = {"npus": 2, "batch_size": 2, "env": sim_env, "actor_class": DiesOnPoison, "input_retries": 1}
    with PeakRss() as reference, bounded(300, "the job of the good inputs"):  # what the actors' start costs
        assert len(ocr(good, ocr_config, **options).take_all()) == len(good)
    with PeakRss() as rss, bounded(420, "the job with bombs and a poison input"):
        rows = ocr(inputs, ocr_config, **options).take_all()
    assert sorted(r["id"] for r in rows) == sorted(inputs)  # every input answered once
    by_id = {r["id"]: r for r in rows}
    assert by_id[bomb]["error"].startswith("ImageTooLargeError: Image pixel count 400000000"), by_id[bomb]
    assert "ray-ocr --max-image-pixels" in by_id[bomb]["error"] and "refused before decoding" in by_id[bomb]["error"]
    # a page over the image limit at PaddleX's render scale is refused from the PDF's structure, never scaled down
    assert by_id[pdf]["error"].startswith("ImageTooLargeError: Page 1 of the PDF is 14400 x 14400 pt"), by_id[pdf]
    assert "ray-ocr --max-image-pixels" in by_id[pdf]["error"], by_id[pdf]
    assert "not an image OpenCV can decode" in by_id[str(broken)]["error"]
    died = by_id[str(poison)]["error"]
    assert died.startswith("WorkerCrashedError: the pipeline worker died 2 times") and "input_retries=1" in died
    for p in good:
        assert by_id[p]["error"] is None and by_id[p]["texts"] == expected[p], by_id[p]
    growth, base = rss.peak - rss.start, reference.peak - reference.start
    assert growth - base < GIB, f"the processes grew by {growth / GIB:.2f} GiB, {base / GIB:.2f} GiB without them"


def test_a_corpus_read_from_and_written_to_another_pyarrow_file_system(
    cluster, ocr_config, sim_env, corpus, expected, tmp_path, monkeypatch
):
    """A ``SubTreeFileSystem`` (paths relative to its root, as on a bucket): Ray lists and reads the inputs and its
    writers write the rows there. The runtime comes from the exported environment, as a user sets it."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from paddlex_npu.ray import ocr_job, write_rows
    from paddlex_npu.ray.batch import OcrOptions

    for k, v in sim_env.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "bucket" / "corpus" / "scans").mkdir(parents=True)
    for p in corpus[:3]:
        shutil.copy(p, tmp_path / "bucket" / "corpus" / p.name)
    shutil.copy(corpus[3], tmp_path / "bucket" / "corpus" / "scans" / corpus[3].name)  # listed recursively
    (tmp_path / "bucket" / "corpus" / "notes.txt").write_text("not a page")  # not an image or PDF: not listed
    fs = pafs.SubTreeFileSystem(str(tmp_path / "bucket"), pafs.LocalFileSystem())
    job = ocr_job("corpus", ocr_config, OcrOptions(npus=1, filesystem=fs))
    with bounded(300, "the job"):
        write_rows(job, "results", "parquet", filesystem=fs)
    rows = pq.read_table("results", filesystem=fs).to_pylist()
    names = {f"corpus/{p.name}": str(p) for p in corpus[:3]} | {f"corpus/scans/{corpus[3].name}": str(corpus[3])}
    assert sorted(r["id"] for r in rows) == sorted(names)
    for r in rows:
        assert r["error"] is None and r["texts"] == expected[names[r["id"]]], r
    assert job.progress()[:2] == (4, 0)  # the ledger counted the rows; the driver held none
