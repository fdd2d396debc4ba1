"""The pydantic base of every spec model: strict types, camelCase names, no unknown keys, and
the rules of ``rules`` (the same ones the CRD's CEL mirrors) on each field and object."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ascend_pd_operator.api.rules import violations


class SpecModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )

    @field_validator("*")
    @classmethod
    def _field_rules(cls, value: Any, info: ValidationInfo) -> Any:
        problems = violations(cls.__name__, value, to_camel(info.field_name or ""))
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _rules(self) -> Any:
        problems = violations(type(self).__name__, self)
        if problems:
            raise ValueError("; ".join(problems))
        return self
