"""Validation of the chart's documents of kinds whose CRDs belong to other projects — cert-manager's
Issuer and Certificate, the Prometheus Operator's ServiceMonitor and PrometheusRule — which
kubernetes-validate does not know and a bare kube-apiserver does not serve.

The schemas are those of the projects' CRDs as the PyPI packages cloudcoil-models-cert-manager and
cloudcoil-models-prometheus-operator generate them into pydantic models (types, enums, required
fields). pydantic ignores unknown fields, so `validate` also walks each document along the model
and fails on any field the CRD does not have, as the API server's strict field validation does."""

from __future__ import annotations

import types
import typing

import pydantic
from cloudcoil.models.cert_manager import v1 as cert_manager
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator

MODELS: dict[tuple[str, str], type[pydantic.BaseModel]] = {
    ("cert-manager.io/v1", "Issuer"): cert_manager.Issuer,
    ("cert-manager.io/v1", "Certificate"): cert_manager.Certificate,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): prometheus_operator.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): prometheus_operator.PrometheusRule,
}


class UnknownField(ValueError):
    pass


def _models_in(annotation) -> list:
    """The annotation's alternatives: model classes, and list/dict annotations, unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    if annotation is type(None):
        return []
    return [annotation]


def _walk(annotation, value, path: str) -> None:
    for candidate in _models_in(annotation):
        origin = typing.get_origin(candidate)
        if origin in (list, typing.List) and isinstance(value, list):
            (item,) = typing.get_args(candidate) or (typing.Any,)
            for i, v in enumerate(value):
                _walk(item, v, f"{path}[{i}]")
            return
        if origin in (dict, typing.Dict) and isinstance(value, dict):
            args = typing.get_args(candidate)
            for k, v in value.items():
                _walk(args[1] if len(args) == 2 else typing.Any, v, f"{path}.{k}")
            return
        if isinstance(candidate, type) and issubclass(candidate, pydantic.RootModel):
            _walk(candidate.model_fields["root"].annotation, value, path)
            return
        if isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel) and isinstance(value, dict):
            fields = {(f.alias or name): f for name, f in candidate.model_fields.items()}
            for key, v in value.items():
                if key not in fields:
                    raise UnknownField(f"{path}.{key}: unknown field (the CRD's {candidate.__name__} has "
                                       f"{sorted(fields)})")
                _walk(fields[key].annotation, v, f"{path}.{key}")
            return


def validate(doc: dict) -> None:
    """Raises pydantic.ValidationError or UnknownField unless `doc` is valid for its CRD."""
    model = MODELS[(doc["apiVersion"], doc["kind"])]
    model.model_validate(doc)
    _walk(model, doc, doc["kind"])
