"""One real Ray cluster for the Ray tests: two local nodes (``ray.cluster_utils.Cluster``) on loopback, each
declaring 2 NPUs, the simulated runtime in the actors. The nodes stand for two hosts: their raylets see
different chips (``ASCEND_RT_VISIBLE_DEVICES`` 0,1 and 2,3), so the simulated device's per-chip locks of one
node never serialise the other's."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from tests.helpers import REPO, page_lines

# head, nodes and driver on 127.0.0.1 (Ray 2.60 on Linux; read when ray is first imported)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
pytest.importorskip("ray", reason="the Ray tests need requirements/ray.txt (installed into .venv by setup.sh)")
pytest.importorskip("ray.data", reason="the Ray tests need ray[data,serve] (requirements/ray.txt)")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

from tests.paddlex.conftest import npu_pipeline  # noqa: E402, F401  (the in-process reference)

VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
# 3 CPUs (logical) per node: 2 for its NPU actors (actor_cpus=1), 1 left for CPU tasks. The one left matters: after
# a node is lost, the blocks it held are rebuilt by CPU tasks, and with every CPU held by NPU actors waiting for
# those blocks the job would wait for ever.
NODE = {"num_cpus": 3, "object_store_memory": 256 * 1024 * 1024}
CHIPS = ("0,1", "2,3")  # the NPUs of the head and of the second node
# The chip type each node carries, as Ray names an Ascend node's (acl.get_soc_name(): resource accelerator_type:X).
CHIP_TYPE = "Ascend310P3"
NPU_NODE = {"accelerator_type:" + CHIP_TYPE: 1}


@contextlib.contextmanager
def bounded(seconds: float, what: str) -> Iterator[None]:
    """Fail (``TimeoutError``) instead of hanging if the block takes longer than ``seconds`` (a job that waits
    for resources that never come, an actor that never restarts)."""

    def expired(signum, frame):
        raise TimeoutError(f"{what} took more than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def add_npu_node(cluster, chips: str):
    resources = {"NPU": len(chips.split(",")), **NPU_NODE}
    return cluster.add_node(**NODE, resources=resources, env_vars={VISIBLE: chips})


@pytest.fixture(scope="session")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    from tests.serve.conftest import free_ports

    (dashboard,) = free_ports(1)  # the head's dashboard: `serve deploy` talks to it
    head = {**NODE, "resources": {"NPU": 2, **NPU_NODE}, "env_vars": {VISIBLE: CHIPS[0]}, "include_dashboard": True}
    head.update(dashboard_host="127.0.0.1", dashboard_port=dashboard)
    c = Cluster(initialize_head=True, head_node_args=head)
    c.dashboard_url = f"http://127.0.0.1:{dashboard}"
    try:
        add_npu_node(c, CHIPS[1])
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}  # loopback only
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="session")
def sim_env(tmp_path_factory) -> Dict[str, str]:
    """The actors' environment: the simulated runtime, the shared replay store, this session's device locks."""
    return {
        "PADDLEX_NPU_RUNTIME": "simulated",
        "PADDLEX_NPU_SIM_STORE": str(REPO / ".cache" / "simulated"),
        "PADDLEX_NPU_SIM_LOCKS": str(tmp_path_factory.mktemp("locks")),
    }


@pytest.fixture(scope="session")
def ocr_config(asset_root):
    from paddlex_npu.samples import assets

    return assets.ocr_pipeline_config(asset_root / "om")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> List[Path]:
    """Eight rendered pages, each with other text: enough for a job that is still running after its first row
    (the fault tests) and for the slices the tests take (``corpus[6:8]`` the PDF's pages); each page more costs
    every whole-corpus job and the in-process reference (``expected``) a pipeline run."""
    from paddlex_npu.samples import assets

    d = tmp_path_factory.mktemp("corpus")
    return [assets.render_text_image(page_lines(k), d / f"page{k:02d}.png", size=28, width=900) for k in range(8)]


@pytest.fixture(scope="session")
def expected(npu_pipeline, corpus) -> Dict[str, List[str]]:  # noqa: F811
    """The in-process pipeline's texts (reference runtime) for each page."""
    return {str(p): list(next(iter(npu_pipeline.predict(str(p))))["rec_texts"]) for p in corpus}
