"""The manifest's and the verdict's records share one rule: a key a record does not name
is refused, and in a folder of format 2 or later so is a key it names that the file
lacks, unless the field says the format that first wrote it (`since(N)`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

# Validation context: the file's format_version. From format 2 every key that format
# writes is required (a key the file lacks is refused); a key added later says so with
# since(N) and is required only from format N.
EVERY_KEY = "every_key"


def since(version: int) -> dict[str, Any]:
    """A field's json_schema_extra: the format that first writes it."""
    return {"since": version}


def required_in(field: Any, version: int) -> bool:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return version >= 2 and int(extra.get("since", 2)) <= version


class RunRecord(BaseModel):
    """A part of the manifest or the verdict: unknown keys refused; in the current format every named
    key present."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _every_key_present(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context and info.context.get(EVERY_KEY):
            version = info.context[EVERY_KEY]
            for name, field in cls.model_fields.items():
                if required_in(field, version) and (field.alias or name) not in data:
                    raise ValueError(f"key {name!r} is missing")
        return data
