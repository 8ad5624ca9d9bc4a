"""OpenAPI schemas of the node agent's bodies, derived from the wire dataclasses the server
validates them with (fleet.agent.payloads), so the schema cannot say other than the parser:
the same fields, which are required, their types, nullability, integer bounds and UUID prefixes."""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any

from fleet.agent import payloads
from health.services.kernel_log import MAX_LINE

INTEGER_MAX = 2**63 - 1


def body_schema(cls: type) -> dict[str, Any]:
    """The JSON schema of dataclass `cls` as payloads._from_dict reads it (unknown keys ignored)."""
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    for item in dataclasses.fields(cls):
        properties[item.name] = _field_schema(cls.__name__, item.name, hints[item.name])
        if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            required.append(item.name)
    if "schema" in properties:
        properties["schema"] = {"type": "integer", "enum": [payloads.SCHEMA_VERSION]}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _field_schema(owner: str, name: str, hint: Any) -> dict[str, Any]:
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        nullable, hint = len(options) < len(typing.get_args(hint)), options[0]
    if typing.get_origin(hint) is list:
        (inner,) = typing.get_args(hint)
        schema = {"type": "array", "items": _field_schema(owner, name, inner)}
    elif dataclasses.is_dataclass(hint):
        schema = body_schema(hint)
    elif hint is bool:
        schema = {"type": "boolean"}
    elif hint is int:
        least, most = payloads.INT_BOUNDS.get((owner, name), (0, INTEGER_MAX))
        schema = {"type": "integer", "minimum": least, "maximum": most}
    elif hint is float:
        schema = {"type": "number"}
    else:
        schema = {"type": "string"}
        prefixes = payloads.UUID_PREFIXES.get((owner, name))
        if prefixes:
            schema["pattern"] = "^(?:" + "|".join(re.escape(p) for p in prefixes) + ")"
            schema["maxLength"] = payloads.MAX_UUID
        if (owner, name) == ("XidEvent", "kind"):
            schema["enum"] = list(payloads.EVENT_KINDS)
        if (owner, name) == ("BurnInReport", "details"):
            schema["maxLength"] = payloads.MAX_BURN_IN_DETAILS
    if nullable:
        schema["nullable"] = True
    return schema


REGISTER_BODY = {"application/json": body_schema(payloads.RegisterPayload)}
HEARTBEAT_BODY = {"application/json": body_schema(payloads.HeartbeatPayload)}
KERNEL_LOG_BODY = {"application/json": {
    "type": "object", "required": ["node", "lines"],
    "properties": {"node": {"type": "string", "minLength": 1},
                   "lines": {"type": "array", "minItems": 1, "items": {"type": "string", "maxLength": MAX_LINE}}},
}}
# dcgm-exporter's text as it is (with ?node=NAME), or JSON naming the node.
DCGM_BODY = {
    "text/plain": {"type": "string", "minLength": 1},
    "application/json": {"type": "object", "required": ["node", "text"],
                         "properties": {"node": {"type": "string", "minLength": 1},
                                        "text": {"type": "string", "minLength": 1}}},
}
