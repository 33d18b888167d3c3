"""A Kubernetes scheduler extender's `prioritize` request read defensively: the candidate node names of an
ExtenderArgs (`NodeNames`, or `Nodes.items[].metadata.name`) and the application its pod names.

Go's encoding/json matches field names without regard to case, so `NodeNames` and `nodenames` both come.
"""

from __future__ import annotations

from causewatch.errors import InputError

APP_KEY = "causewatch/app"     # the pod label (or annotation) that names its application


def _field(obj: dict, name: str):
    """`obj`'s field `name`, matched without regard to case, as the scheduler's Go decoder does."""
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == name.lower():
            return value
    return None


def _object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def candidate_hosts(body) -> list[str]:
    """The node names to score, in the request's order; an ExtenderArgs without either list, or a name that
    is not a string, is an InputError naming the field."""
    body = _object(body, "body (ExtenderArgs)")
    names = _field(body, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            bad = next((i for i, n in enumerate(names) if not isinstance(n, str)), None) \
                if isinstance(names, list) else None
            raise InputError(f"NodeNames{'' if bad is None else f'[{bad}]'}: expected a list of node names")
        return names
    nodes = _field(body, "Nodes")
    if nodes is None:
        raise InputError("ExtenderArgs: needs NodeNames (nodeCacheCapable: true) or Nodes.items")
    items = _field(_object(nodes, "Nodes"), "items")
    if not isinstance(items, list):
        raise InputError("Nodes.items: expected a list of nodes")
    hosts = []
    for i, node in enumerate(items):
        name = _field(_object(_field(_object(node, f"Nodes.items[{i}]"), "metadata") or {},
                              f"Nodes.items[{i}].metadata"), "name")
        if not isinstance(name, str) or not name:
            raise InputError(f"Nodes.items[{i}].metadata.name: expected a node name")
        hosts.append(name)
    return hosts


def pod_app(body) -> str | None:
    """The application the pod names by its `causewatch/app` label (or annotation); None without one."""
    pod = _field(body, "Pod")
    meta = _field(pod, "metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return None
    for kind in ("labels", "annotations"):
        found = _field(meta, kind)
        if isinstance(found, dict) and isinstance(found.get(APP_KEY), str) and found[APP_KEY]:
            return found[APP_KEY]
    return None
