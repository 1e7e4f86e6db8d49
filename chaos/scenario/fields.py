"""What every table of a scenario is built from: strict models and the millisecond types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveMs = Annotated[int, Field(gt=0, le=86_400_000)]
NonNegativeMs = Annotated[int, Field(ge=0, le=86_400_000)]


class Strict(BaseModel):
    """No unknown keys, no coercion ("5" is not 5), immutable once loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
