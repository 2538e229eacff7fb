"""The Python-backend models of a repository written by ``paddlex-npu triton-repo``. Each model instance is its
own process (Triton's Python backend stub), holding one pipeline or model on the NPU route on the device of its
instance group (groups are named ``npu<ID>``).

The wire format is PaddleX's high-stability serving (HPS): one ``input`` BYTES tensor holding the JSON request of
PaddleX's basic serving, one ``output`` BYTES tensor holding its JSON answer (``logId``, ``errorCode``,
``errorMsg``, ``result``); a request that fails answers its status in ``errorCode`` and the others of its batch
are unaffected. With dynamic batching, Triton hands ``execute`` several requests at once: the OCR model runs the
images of requests with the same options in one ``predict`` call, the recognition model runs all line images of
the batch as one batch.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from .. import envs
from ..errors import ConfigError, DeviceLostError, PaddlexNpuError, RequestRefusedError
from ..paddlex import serving as paddlex_serving
from ..serve.fetch import Fetched, fetch_all, is_url, policy_from_parameters, raw_bytes
from ..serve.images import DecodeGuard, PixelLimits
from ..serve.options import check_options
from ..serve.render import PdfRenderer
from ..serve.replies import answer, ok_body

INPUT_NAME, OUTPUT_NAME = "input", "output"  # PaddleX HPS (paddlex_hps_client.constants)


def instance_device(instance_name: str) -> int:
    """The device of an instance of group ``npu<ID>``: Triton names it ``npu1_0`` (instance 0 of group ``npu1``)
    since its core of 2023-07, and a count-1 group plain ``npu1`` before. Any other name is refused (using device 0
    for it would put every instance on one chip)."""
    m = re.fullmatch(r"npu(\d+)(?:_\d+)?", instance_name or "")
    if not m:
        raise ConfigError(
            f"Triton model instance {instance_name!r} is not of an instance group named npu<DEVICE_ID> (instances "
            "npu<ID>_<k>, or npu<ID> in Triton before 2023-07): write the repository with `paddlex-npu triton-repo`, "
            "or name each instance_group npu<ID> in config.pbtxt"
        )
    return int(m.group(1))


def _log_error(text: str, trace: bool = True) -> None:
    """To Triton's log (the stub's own logger), with the traceback of the exception being handled (``trace``)."""
    import traceback

    message = f"{text}\n{traceback.format_exc()}" if trace else text
    try:
        import triton_python_backend_utils as pb_utils

        pb_utils.Logger.log_error(message)
    except (ImportError, AttributeError):
        import sys

        print(message, file=sys.stderr, flush=True)


def _route_failure(exc: Exception, log_id: Optional[str] = None) -> Dict[str, Any]:
    """The answer's body to an error (:func:`.replies.answer`); logged with its traceback when the server's fault.
    A device-fatal error (category ``device_lost``) marks this instance for exit (:data:`_LOST`)."""
    reply = answer(exc, log_id)
    if reply.server_fault:
        _log_error(f"paddlex-npu: a request failed ({type(exc).__name__}: {exc})")
    if reply.category == "device_lost":
        _LOST.set()
    return reply.body


def _refused(message: str, log_id: Optional[str] = None) -> Dict[str, Any]:
    """The answer's body to a request refused as input (:class:`~..errors.RequestRefusedError`)."""
    return _route_failure(RequestRefusedError(message), log_id)


def _bad_file(exc: Exception, log_id: Optional[str]) -> Dict[str, Any]:
    """The answer's body to a file that cannot be fetched or decoded: a categorised error by its row, PaddleX's
    pixel bound as input, anything else as an invalid file."""
    if isinstance(exc, PaddlexNpuError):
        return _route_failure(exc, log_id)
    too_large = paddlex_serving.serving_utils().ImageTooLargeError
    why = str(exc) if isinstance(exc, too_large) else f"Invalid input file ({type(exc).__name__}: {exc})"
    return _refused(why, log_id)


# Set when an answer of this stub was device-fatal: this instance refuses every later request at once (none runs
# on the dead device), tells ``triton-serve``'s watchdog (:mod:`.watch`: it unloads the model, so that its
# readiness fails), sends the batch's answers and exits; the watchdog then loads the model on fresh stubs.
_LOST = threading.Event()
WATCHDOG_ACK_S = 30.0  # how long the instance waits for the watchdog to have made the model not ready


def _lost_answer(log_id: Optional[str] = None) -> Dict[str, Any]:
    """The answer to a request that reaches this instance after its device was lost: refused without running."""
    return _route_failure(
        DeviceLostError(
            "this Triton model instance's device context was lost by an earlier request; it is exiting and "
            "triton-serve reloads the model on a fresh instance: send the request again once "
            "/v2/models/<model>/ready answers 200"
        ),
        log_id,
    )


def python_for_children() -> str:
    """The Python interpreter that child processes run (the PDF renderers' forkserver starts it). In a Triton
    stub, ``sys.executable`` is what the embedded CPython derived from the first ``python3`` on ``PATH``: the
    venv's, as ``tritonserver_command`` puts the venv's ``bin`` first (checked on nvidia-pytriton 0.7.0's stub,
    Triton 2.51.0). Where it is no Python (empty, or the stub binary), the interpreter of ``sys.prefix`` (the venv
    the stub reads) is set for multiprocessing instead; none found is a :class:`ConfigError`."""
    import multiprocessing
    import sys

    exe = Path(sys.executable or "")
    if exe.name.startswith("python") and exe.is_file():
        return str(exe)
    names = (f"python{sys.version_info[0]}.{sys.version_info[1]}", f"python{sys.version_info[0]}", "python")
    for name in names:
        candidate = Path(sys.prefix) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            multiprocessing.set_executable(str(candidate))
            return str(candidate)
    raise ConfigError(
        f"no Python interpreter for the PDF renderer: sys.executable is {sys.executable!r} and {sys.prefix}/bin has "
        f"none of {', '.join(names)}: start tritonserver with `paddlex-npu triton-serve` (the venv's bin first on "
        "PATH)"
    )


def _log_id_of(body: bytes) -> Optional[str]:
    """The ``logId`` of a JSON request body, when it has a string one."""
    try:
        log_id = json.loads(body).get("logId")
    except (ValueError, AttributeError):
        return None
    return log_id if isinstance(log_id, str) else None


def tell_watchdog(path: Optional[str], model: str, instance: str, timeout: float = WATCHDOG_ACK_S) -> bool:
    """Tell ``triton-serve``'s watchdog listening on ``path`` that this instance of ``model`` lost its device, and
    wait until it answers that the model is not ready any more; False without a watchdog or without its answer."""
    import socket

    if not path:
        return False
    line = json.dumps({"model": model, "instance": instance, "pid": os.getpid()}) + "\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(line.encode())
            return sock.makefile("rb").readline().strip() == b"down"
    except OSError:
        return False


DEVICE_LOST_EXIT = 75  # the stub's exit status after a lost device (EX_TEMPFAIL)


def _validation_failure(exc: Exception) -> Dict[str, Any]:
    errors = [{"type": e["type"], "loc": ".".join(map(str, e["loc"])), "msg": e["msg"]} for e in exc.errors()]
    return _refused(json.dumps(errors))


def _fetch_counter() -> Any:
    """``paddlex_npu_url_fetches_total{outcome}`` on Triton's metrics port (the Python backend's custom metrics),
    as serve's; None where the backend has none."""
    try:
        import triton_python_backend_utils as pb_utils

        family = pb_utils.MetricFamily(
            name="paddlex_npu_url_fetches_total",
            description="URL inputs, by outcome (ok, or why refused)",
            kind=pb_utils.MetricFamily.COUNTER,
        )
    except Exception:  # no custom metrics in this Triton (or metrics off): URL fetches are not counted
        return None
    series: Dict[str, Any] = {}

    def count(outcome: str) -> None:
        if outcome not in series:
            series[outcome] = family.Metric(labels={"outcome": outcome})
        series[outcome].increment(1)

    return count


class _Model:
    """Shared Triton plumbing: read the config, pick the device, turn tensors into JSON bodies and back."""

    def initialize(self, args: Dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        self.version_dir = Path(args["model_repository"]) / args["model_version"]
        self.model_name, self.instance = args.get("model_name", ""), args.get("model_instance_name", "")
        self.device_id = instance_device(self.instance)
        self.runtime = self.params.get("runtime") or None
        limits = {k: int(self.params[k]) for k in ("max_image_pixels", "max_request_pixels") if self.params.get(k)}
        options = {
            "image_option": "triton-repo --max-image-pixels",
            "request_option": "triton-repo --max-request-pixels",
        }
        self.decoder = DecodeGuard(PixelLimits(**limits, **options), renderer=self._renderer())
        self.urls = policy_from_parameters(self.params, "triton-repo --allow-url-host")
        self.count_fetch = _fetch_counter()
        self.load()

    renders_pdfs = False  # PDF inputs: rendered in child processes (:mod:`..serve.render`), bounded in time

    def _renderer(self) -> Optional[PdfRenderer]:
        """The PDF renderer of a model that takes PDFs: each PDF in a child process, at most 2 at once, stopped
        after the repository's ``pdf_timeout_s`` (``triton-repo --pdf-timeout``; 0: no bound); its forkserver
        started now, beside the load, so that the first PDF does not wait for it."""
        if not self.renders_pdfs:
            return None
        python_for_children()
        timeout = float(self.params.get("pdf_timeout_s") or 0) or None
        renderer = PdfRenderer(timeout=timeout, option="triton-repo --pdf-timeout")
        threading.Thread(target=renderer.warm_up, name="paddlex-npu-pdf-warm-up", daemon=True).start()
        return renderer

    def load(self) -> None:
        raise NotImplementedError

    def answer(self, bodies: List[bytes]) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def execute(self, requests: List[Any]) -> List[Any]:
        """One answer per element of each request's ``input`` tensor (a KServe request may hold a batch of
        several JSON requests): the output has the input's batch size, in order. Once the device is lost, every
        request is refused at once (:func:`_lost_answer`) and the instance exits after answering."""
        import numpy as np
        import triton_python_backend_utils as pb_utils

        bodies: List[bytes] = []
        counts = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, INPUT_NAME)
            values = [bytes(v) for v in tensor.as_numpy().reshape(-1)] if tensor is not None else []
            bodies += values or [b""]
            counts.append(max(1, len(values)))
        if _LOST.is_set():
            answers = [_lost_answer(_log_id_of(body)) for body in bodies]
        else:
            try:
                answers = self.answer(bodies)
            except Exception as exc:  # a bug of ours: every request of the batch answered by category, and logged
                answers = [_route_failure(exc) for _ in bodies]
        responses = []
        start = 0
        for n in counts:
            mine = answers[start : start + n]
            start += n
            data = np.array([[json.dumps(a, ensure_ascii=False).encode("utf-8")] for a in mine], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(OUTPUT_NAME, data)]))
        if _LOST.is_set():
            self._answer_and_exit(requests, responses)
        return responses

    def _answer_and_exit(self, requests: List[Any], responses: List[Any]) -> None:
        """The device is lost: have the model made not ready (``triton-serve``'s watchdog unloads it), send the
        answers through each request's response sender and end this stub process at once; the watchdog then
        loads the model on fresh stubs. A backend without response senders outside decoupled mode gets the
        answers returned from ``execute`` and the process ends a second later."""
        import triton_python_backend_utils as pb_utils

        told = tell_watchdog(envs.triton_watchdog(), self.model_name, self.instance)
        _log_error(
            f"paddlex-npu: the device context of npu:{self.device_id} is lost; this model instance exits for a fresh "
            + ("one (triton-serve made the model not ready)" if told else "one (no triton-serve watchdog answered)"),
            trace=False,
        )
        try:
            senders = [request.get_response_sender() for request in requests]
        except Exception:  # TritonModelException: response senders only in decoupled mode (Triton before 23.10)
            timer = threading.Timer(1.0, os._exit, args=(DEVICE_LOST_EXIT,))
            timer.daemon = True
            timer.start()
            return
        for sender, response in zip(senders, responses):
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # back once Triton has it
        os._exit(DEVICE_LOST_EXIT)

    def finalize(self) -> None:
        close = getattr(getattr(self, "predictor", None), "close", None)
        if close:
            close()


class OCRModel(_Model):
    """PaddleX's OCR pipeline; request and answer as ``POST /ocr`` of PaddleX's basic serving."""

    renders_pdfs = True

    def load(self) -> None:
        from ..paddlex.pipelines import load_config, pipeline_on_device

        self.config = load_config(self.version_dir / "pipeline.yaml")
        serving = self.config.get("Serving") or {}
        self.visualize_default = bool(serving.get("visualize", True))
        self.max_num_imgs = int((serving.get("extra") or {}).get("max_num_input_imgs", 10))
        self.predictor = pipeline_on_device(self.config, self.device_id, self.runtime)

    def _prefetch(self, bodies: List[bytes]) -> Fetched:
        """The URL inputs of a batch, fetched at once (one total timeout for the batch)."""
        urls = []
        for body in bodies:
            try:
                file = json.loads(body).get("file")
            except (ValueError, AttributeError):
                continue
            if is_url(file):
                urls.append(file)
        limits, count = self.decoder.limits, self.count_fetch
        return fetch_all(urls, self.urls, limits, max_num_imgs=self.max_num_imgs, count=count) if urls else {}

    def _parse(self, body: bytes, fetched: Optional[Fetched] = None) -> Any:
        """(request, images, data_info) or an error answer (a URL input taken from ``fetched`` when there)."""
        import pydantic
        from fastapi import HTTPException

        infer_request, _ = paddlex_serving.ocr_schemas()
        serving_utils = paddlex_serving.serving_utils()

        if not body:
            return _refused(f"empty request: the `{INPUT_NAME}` tensor must hold one JSON request")
        try:
            request = infer_request.model_validate_json(body)
        except pydantic.ValidationError as exc:
            return _validation_failure(exc)
        try:
            file_type = paddlex_serving.ocr_file_type(request)
        except HTTPException as exc:  # PaddleX's answer (its status) to a file type it cannot tell
            return _route_failure(exc, request.logId)
        problem = check_options(self.config, dict(self._options(request)))
        if problem:
            return _refused(problem, request.logId)
        try:
            raw = raw_bytes(
                request.file,
                self.urls,
                self.decoder.limits,
                fetched,
                max_num_imgs=self.max_num_imgs,
                count=self.count_fetch,
            )
            images, data_info = self.decoder.file_to_images(
                serving_utils.file_to_images, raw, file_type, max_num_imgs=self.max_num_imgs
            )
        except Exception as exc:
            return _bad_file(exc, request.logId)
        return request, images, data_info

    @staticmethod
    def _options(request: Any) -> Tuple[Tuple[str, Any], ...]:
        return (
            ("use_doc_orientation_classify", request.useDocOrientationClassify),
            ("use_doc_unwarping", request.useDocUnwarping),
            ("use_textline_orientation", request.useTextlineOrientation),
            ("text_det_limit_side_len", request.textDetLimitSideLen),
            ("text_det_limit_type", request.textDetLimitType),
            ("text_det_thresh", request.textDetThresh),
            ("text_det_box_thresh", request.textDetBoxThresh),
            ("text_det_unclip_ratio", request.textDetUnclipRatio),
            ("text_rec_score_thresh", request.textRecScoreThresh),
            ("return_word_box", request.returnWordBox),
        )

    def _result(self, request: Any, images: list, data_info: Any, preds: list) -> Dict[str, Any]:
        from fastapi.encoders import jsonable_encoder

        _, infer_result = paddlex_serving.ocr_schemas()

        log_id = request.logId or str(uuid.uuid4())
        visualize = request.visualize if request.visualize is not None else self.visualize_default
        results = []
        for i, (img, item) in enumerate(zip(images, preds)):
            imgs: Dict[str, str] = {}
            if visualize:
                out = item.img
                todo = {"input_img": img, "ocr_img": out["ocr_res_img"]}
                if "preprocessed_img" in out:
                    todo["doc_preprocessing_img"] = out["preprocessed_img"]
                imgs = paddlex_serving.postprocess_images(
                    todo, log_id, filename_template=f"{{key}}_{i}.jpg", max_img_size=(2000, 2000)
                )
            results.append(
                {
                    "prunedResult": paddlex_serving.pruned(item),
                    "ocrImage": imgs.get("ocr_img"),
                    "docPreprocessingImage": imgs.get("doc_preprocessing_img"),
                    "inputImage": imgs.get("input_img"),
                }
            )
        result = infer_result(ocrResults=results, dataInfo=data_info)
        return ok_body(jsonable_encoder(result, exclude_none=True), log_id)

    def answer(self, bodies: List[bytes]) -> List[Dict[str, Any]]:
        answers: List[Optional[Dict[str, Any]]] = [None] * len(bodies)
        groups: Dict[Any, List[Tuple[int, Any, list, Any]]] = {}
        fetched = self._prefetch(bodies)
        for i, body in enumerate(bodies):
            parsed = self._parse(body, fetched)
            if isinstance(parsed, dict):
                answers[i] = parsed
            else:
                request, images, info = parsed
                groups.setdefault(self._options(request), []).append((i, request, images, info))
        for options, members in groups.items():
            if _LOST.is_set():  # an earlier group of this batch lost the device: none runs on it again
                for i, request, _, _ in members:
                    answers[i] = _lost_answer(request.logId)
                continue
            images = [img for _, _, imgs, _ in members for img in imgs]
            try:
                preds = list(self.predictor.predict(images, **dict(options)))
            except Exception as exc:
                for i, request, _, _ in members:
                    answers[i] = _route_failure(exc, request.logId)
                continue
            start = 0
            for i, request, imgs, info in members:
                mine = preds[start : start + len(imgs)]
                start += len(imgs)
                bad = [p for p in mine if isinstance(p, dict) and p.keys() == {"error"}]
                if bad:  # PaddleX's answer to settings the pipeline cannot take
                    answers[i] = _refused(f"PaddleX: {bad[0]['error']}", request.logId)
                    continue
                try:
                    answers[i] = self._result(request, imgs, info, mine)
                except Exception as exc:
                    answers[i] = _route_failure(exc, request.logId)
        return [a for a in answers if a is not None]


class TextRecognitionModel(_Model):
    """The text recognition model alone: request ``{"file": <base64 line image>, "logId"?}``, answer
    ``result.prunedResult`` = ``{"rec_text", "rec_score"}``; a batch of requests is one ``predict`` batch."""

    def load(self) -> None:
        self.predictor = recognition_predictor(recognition_spec(self.version_dir), self.device_id, self.runtime)

    def answer(self, bodies: List[bytes]) -> List[Dict[str, Any]]:
        serving_utils = paddlex_serving.serving_utils()
        answers: List[Optional[Dict[str, Any]]] = [None] * len(bodies)
        todo: List[Tuple[int, Optional[str], Any]] = []
        for i, body in enumerate(bodies):
            try:
                request = json.loads(body)
            except ValueError:
                answers[i] = _refused(f"the `{INPUT_NAME}` tensor must hold one JSON request")
                continue
            if not isinstance(request, dict) or not isinstance(request.get("file"), str):
                answers[i] = _refused('the request needs "file": a base64 image')
                continue
            log_id = request.get("logId")
            if log_id is not None and not isinstance(log_id, str):
                answers[i] = _refused('"logId" must be a string')
                continue
            try:
                raw = base64.b64decode(request["file"], validate=True)
                image = self.decoder.image_bytes_to_array(serving_utils.image_bytes_to_array, raw)
            except Exception as exc:
                answers[i] = _bad_file(exc, log_id)
                continue
            todo.append((i, log_id, image))
        if todo:
            try:
                preds = list(self.predictor.predict([img for _, _, img in todo]))
            except Exception as exc:
                for i, log_id, _ in todo:
                    answers[i] = _route_failure(exc, log_id)
            else:
                for (i, log_id, _), item in zip(todo, preds):
                    answers[i] = ok_body({"prunedResult": paddlex_serving.pruned(item)}, log_id)
        return [a for a in answers if a is not None]


def recognition_spec(version_dir: Path) -> Dict[str, Any]:
    """The recognition model's ``model.yaml`` of a repository version folder (``model_name``, ``model_dir``,
    ``batch_size``: the batch Triton may hand it, ``hpi_config``)."""
    return yaml.safe_load((Path(version_dir) / "model.yaml").read_text(encoding="utf-8"))


def recognition_predictor(spec: Dict[str, Any], device_id: int, runtime: Optional[str]) -> Any:
    """The recognition model of ``spec`` (:func:`recognition_spec`) on ``npu:<device_id>``."""
    from ..paddlex.pipelines import model_on_device

    return model_on_device(
        spec["model_dir"],
        spec["model_name"],
        device_id,
        runtime,
        batch_size=int(spec.get("batch_size", 1)),
        hpi=spec.get("hpi_config"),
    )
