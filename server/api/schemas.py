"""Request and response bodies, named by role (RunCreate, RunPublic, ...)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import json

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parallax.server.store import Event, Run

Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]
Tag = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    project: Name
    name: Name
    config: dict[str, Any] = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=100)

    @field_validator("config")
    @classmethod
    def _config_is_strict_json(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            encoded = json.dumps(v, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("config must be valid Unicode text: it holds a lone surrogate (a \\ud800-\\udfff escape)") from None
        except ValueError:
            raise ValueError("config must not contain NaN or Infinity") from None
        if len(encoded) > 1_000_000:
            raise ValueError("config is larger than 1 MB once encoded")
        if _depth(v) > MAX_CONFIG_DEPTH:
            raise ValueError(f"config is nested more than {MAX_CONFIG_DEPTH} levels deep")
        return v


#: Deeper configs are refused: the JSON answers that carry a run cannot be written past about 250 levels.
MAX_CONFIG_DEPTH = 64


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (1 for a flat one), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in v)
    return deepest


class RunUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["running", "finished", "failed"] | None = None
    tags: list[Tag] | None = Field(None, max_length=100)
    notes: str | None = Field(None, max_length=100_000, pattern=r"^[^\x00]*$")


class RunPublic(BaseModel):
    id: int
    project: str
    name: str
    config: dict[str, Any]
    tags: list[str]
    notes: str
    status: str
    created_at: float
    last_seen_at: float | None
    last_step: int | None
    heartbeat_at: float | None = Field(None, description="when the trainer's process last said it is alive")
    verdict: dict[str, Any] | None = Field(
        None, description="healthy, or the faults the run's pages found (cause, severity, step range), kept after it ends")

    @classmethod
    def of(cls, run: Run, verdict: dict[str, Any] | None = None) -> "RunPublic":
        return cls(**{f: getattr(run, f) for f in cls.model_fields if f != "verdict"}, verdict=verdict)


class RunsPublic(BaseModel):
    runs: list[RunPublic]
    count: int


class IngestPublic(BaseModel):
    accepted: int = Field(description="Points stored by this batch (a batch is stored whole or not at all)")
    replaced: int = Field(description="Points that overwrote a different value at the same (metric, step)")
    non_finite: int = Field(description="Points whose value was NaN or infinite, stored as such")


class EventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int = Field(ge=0, le=2**63 - 1)
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$", description="resume, checkpoint, weight_sync, eval, note, ...")
    message: str = Field("", max_length=10_000, pattern=r"^[^\x00]*$")
    time: float | None = Field(None, ge=0, lt=1e11)


class EventsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events: list[EventIn] = Field(max_length=10_000)


class EventPublic(BaseModel):
    id: int
    step: int
    kind: str
    message: str
    time: float

    @classmethod
    def of(cls, e: Event) -> "EventPublic":
        return cls(id=e.id, step=e.step, kind=e.kind, message=e.message, time=e.time)


class EventsPublic(BaseModel):
    events: list[EventPublic]


class LatestPublic(BaseModel):
    name: str
    step: int
    value: float | None
    non_finite: Literal["NaN", "Infinity", "-Infinity"] | None
    time: float


class LatestsPublic(BaseModel):
    metrics: list[LatestPublic]


class PointPublic(BaseModel):
    metric: str
    step: int
    value: float | None = Field(description="null when the value is non-finite")
    time: float
    non_finite: Literal["NaN", "Infinity", "-Infinity"] | None = Field(None, description="present only for a non-finite value")


class PointsPublic(BaseModel):
    run_id: int
    points: list[PointPublic]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")
