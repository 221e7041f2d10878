"""`service`: external services a run uses (Trinity-RFT's Data-Juicer server)."""

from __future__ import annotations

from posttrain.config.fields import param, section

_TODO = "Data-Juicer service; data processing issue"


@section
class DataJuicerConfig:
    """A Data-Juicer server that filters and scores tasks and experiences."""

    server_url: str | None = param(None, doc="URL of a running Data-Juicer server; null uses none.", todo=_TODO, refs=["trinity:service.data_juicer.server_url"])
    auto_start: bool = param(False, doc="Start a local Data-Juicer server for the run.", todo=_TODO, refs=["trinity:service.data_juicer.auto_start"])
    port: int = param(5005, doc="Port of the auto-started server.", ge=1, le=65535, todo=_TODO, refs=["trinity:service.data_juicer.port"])


@section
class ServiceConfig:
    """External services."""

    data_juicer: DataJuicerConfig = param(factory=DataJuicerConfig, doc="Data-Juicer server.")


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
