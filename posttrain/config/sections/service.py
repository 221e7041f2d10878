"""`service`: external services of a Trinity-RFT run (its Data-Juicer server), which posttrain does not use.

posttrain has no `service` section: Trinity-RFT's Data-Juicer server runs data-juicer operators over
tasks and experiences, and posttrain runs no data-juicer operators. Its plain experience operators
(filters, reward shaping, deduplication) run in-process in data_processor.experience_pipeline; task
files are prepared before the run. The keys are refused with that reason (`UNSUPPORTED`).
"""

from __future__ import annotations

_DJ = ("a Data-Juicer server for data-juicer operators, which posttrain does not run: its experience operators (filters, "
       "reward shaping, dedup) run in-process in data_processor.experience_pipeline, and task files are prepared before the run")

#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    f"trinity:service.data_juicer.{name}": _DJ for name in ("server_url", "auto_start", "port")
}
