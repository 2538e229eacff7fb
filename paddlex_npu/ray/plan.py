"""A job's plan checked against the cluster before any work, and the settings every task of it gets.

Ray waits without end for resources no node has: NPU actors that hold every CPU leave none for the read and
decode tasks, and an actor pinned to a chip no node carries is never placed. :func:`check_plan` places the plan
on the cluster's nodes first (the NPU actors, then one CPU task beside them) and raises a :class:`ConfigError`
naming what is missing and what to change. :func:`chip_of` reads the chip the OM packages were built for (their
manifests' ``soc_version``), which is Ray's ``accelerator_type`` of an Ascend node (``acl.get_soc_name()``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError

FORWARDED_PREFIXES = ("PADDLEX_NPU_", "PADDLE_PDX_")
ACCELERATOR_PREFIX = "accelerator_type:"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def forwarded_env(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The variables of this process that configure paddlex-npu and PaddleX (``PADDLEX_NPU_*``, ``PADDLE_PDX_*``),
    for every task and actor of a job (which otherwise have their node's ``ray start`` environment)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES)}


def thread_env(threads: Optional[int]) -> Dict[str, str]:
    """The thread-count variables for ``threads`` threads (Ray sets ``OMP_NUM_THREADS`` to a task's ``num_cpus``
    when it is unset)."""
    return {name: str(threads) for name in THREAD_VARIABLES} if threads else {}


def chip_of(config: Dict[str, Any]) -> Optional[str]:
    """The ``soc_version`` the pipeline's OM packages were built for (None when their manifests do not say); a
    :class:`ConfigError` when they name different chips."""
    from ..om.manifest import MANIFEST_NAME, load
    from ..paddlex.pipelines import model_dirs

    chips = {}
    for folder in model_dirs(config):
        path = Path(folder).expanduser() / MANIFEST_NAME
        if path.is_file() and load(path).soc_version:
            chips[str(folder)] = load(path).soc_version
    if len(set(chips.values())) > 1:
        shown = ", ".join(f"{k}: {v}" for k, v in chips.items())
        raise ConfigError(
            f"the pipeline's OM packages were built for different chips ({shown}): build them all "
            "for the chip of the hosts that run them (paddlex-npu convert --soc-version)"
        )
    return next(iter(chips.values()), None)


@dataclass(frozen=True)
class Plan:
    """What a job asks of the cluster: ``actors`` NPU actors of ``actor_cpus`` CPUs and one NPU each (on nodes
    carrying ``chip`` when set), and CPU tasks (read, decode) of ``task_cpus`` each beside them."""

    actors: int
    actor_cpus: float
    task_cpus: float
    chip: Optional[str] = None
    what: str = "the job"


def _node_line(node: Dict[str, Any]) -> str:
    res = node["Resources"]
    chips = [k[len(ACCELERATOR_PREFIX) :] for k in res if k.startswith(ACCELERATOR_PREFIX)]
    chip = f", chip {'/'.join(chips)}" if chips else ""
    return f"{node['NodeManagerAddress']} ({res.get('CPU', 0):g} CPU, {res.get('NPU', 0):g} NPU{chip})"


def _place_actors(plan: Plan, nodes: List[Dict[str, Any]]) -> Tuple[List[float], int]:
    """(the CPUs left on each node, the actors placed) after placing as many of the plan's actors as fit, each on
    the node with the most CPUs left."""
    cpus = [n["Resources"].get("CPU", 0.0) for n in nodes]
    npus = [n["Resources"].get("NPU", 0.0) for n in nodes]
    ok = [plan.chip is None or f"{ACCELERATOR_PREFIX}{plan.chip}" in n["Resources"] for n in nodes]
    placed = 0
    while placed < plan.actors:
        fits = [i for i in range(len(nodes)) if ok[i] and npus[i] >= 1 and cpus[i] >= plan.actor_cpus]
        if not fits:
            break
        i = max(fits, key=lambda k: cpus[k])
        cpus[i] -= plan.actor_cpus
        npus[i] -= 1
        placed += 1
    return cpus, placed


def check_plan(plan: Plan, nodes: Optional[List[Dict[str, Any]]] = None) -> None:
    """A :class:`ConfigError` naming the missing resource and the change to make, unless the cluster's nodes
    (``ray.nodes()``, alive ones) can hold the plan's actors and one CPU task beside them."""
    if nodes is None:
        import ray

        nodes = [n for n in ray.nodes() if n.get("Alive")]
    shown = "; ".join(map(_node_line, nodes)) or "no node"
    if plan.chip and not any(f"{ACCELERATOR_PREFIX}{plan.chip}" in n["Resources"] for n in nodes):
        raise ConfigError(
            f"{plan.what}: the OM packages were built for {plan.chip} (their manifests' soc_version), and no node "
            f"of the cluster has that chip (nodes: {shown}): run on hosts with {plan.chip} (Ray detects the chip; "
            f"or ray start --resources '{{\"{ACCELERATOR_PREFIX}{plan.chip}\": 1}}'), or rebuild the packages for "
            "the nodes' chip (paddlex-npu convert --soc-version)"
        )
    left, placed = _place_actors(plan, nodes)
    if placed < plan.actors:
        npus = sum(n["Resources"].get("NPU", 0) for n in nodes)
        raise ConfigError(
            f"{plan.what} needs {plan.actors} NPU actor(s) of 1 NPU and {plan.actor_cpus:g} CPU each, and the "
            f"cluster can hold {placed} (it declares {npus:g} NPU; nodes: {shown}): ask for fewer (--npus), lower "
            "--actor-cpus, or start Ray on each host with its NPUs detected or declared (ray start --resources "
            "'{\"NPU\": 8}'; without an NPU, declare them and run --runtime reference)"
        )
    if max(left, default=0.0) < plan.task_cpus:
        raise ConfigError(
            f"{plan.what}: the {plan.actors} NPU actor(s) of {plan.actor_cpus:g} CPU each leave no node with the "
            f"{plan.task_cpus:g} CPU a read or decode task needs (nodes: {shown}), so those tasks would wait for "
            "ever: lower --actor-cpus or --decode-cpus, ask for fewer NPU actors, or add CPUs to the cluster"
        )
