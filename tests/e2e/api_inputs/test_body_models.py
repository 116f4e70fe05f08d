"""Every request body model of the app, read from its routes: every string refuses a NUL and every integer is
strict, so a field added later is covered without a test of its own."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from api.app import create_app


def _nul_sample(annotation):
    """A value of ``annotation`` with a NUL in its string, or None when it holds no string."""
    if annotation is str:
        return "\x00"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _nul_sample(args[0])
    if origin is list:
        inner = _nul_sample(args[0])
        return None if inner is None else [inner]
    for arg in args:  # a union such as `str | None`
        if (inner := _nul_sample(arg)) is not None:
            return inner
    return None


def _models_in(annotation):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _routes(routes):
    for route in routes:
        # FastAPI keeps an included router's routes behind it.
        if hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)
        else:
            yield route


def _body_models(container):
    todo = [model for route in _routes(create_app(container).routes)
            for param in getattr(getattr(route, "dependant", None), "body_params", [])
            for model in _models_in(param.field_info.annotation)]
    seen = set()
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            todo.extend(m for info in model.model_fields.values() for m in _models_in(info.annotation))
    return seen


def test_every_string_in_every_request_body_refuses_a_nul(container):
    """New body fields (comments, reasons...) are covered too: a NUL never reaches PostgreSQL from a body."""
    checked = []
    for model in _body_models(container):
        for name, info in model.model_fields.items():
            sample = _nul_sample(info.annotation)
            if sample is not None:
                with pytest.raises(ValidationError):
                    TypeAdapter(typing.Annotated[info.annotation, info]).validate_python(sample)
                checked.append(f"{model.__name__}.{name}")
    assert {"VersionCreate.revision", "VersionCreate.include", "UploadedFile.path", "RoleGrant.tenant",
            "TokenCreate.description"} <= set(checked)


def _int_annotation(annotation) -> bool:
    if annotation is int:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _int_annotation(args[0])
    return any(_int_annotation(arg) for arg in args if arg is not type(None)) if origin is not list else False


def test_every_integer_in_every_request_body_is_strict(container):
    """New body fields are covered too: true, "1" and 1.0 are never an integer of a body (issue 18)."""
    checked = []
    for model in _body_models(container):
        for name, info in model.model_fields.items():
            if _int_annotation(info.annotation):
                for value in (True, "1", 1.0):
                    with pytest.raises(ValidationError):
                        TypeAdapter(typing.Annotated[info.annotation, info]).validate_python(value)
                checked.append(f"{model.__name__}.{name}")
    assert {"AliasUpdate.version", "CanaryCreate.version", "UploadedFile.size", "TokenCreate.expires_in_days",
            "QuotaUpdate.bytes", "RetentionUpdate.keep_last"} <= set(checked)
