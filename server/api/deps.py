"""Dependencies: routes get the store, settings and telemetry through Depends, so tests can override them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from parallax.server.config import Settings
from parallax.server.store import Store
from parallax.server.telemetry import Telemetry


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_telemetry(request: Request) -> Telemetry:
    return request.app.state.telemetry


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
TelemetryDep = Annotated[Telemetry, Depends(get_telemetry)]
RunId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The run's id")]
