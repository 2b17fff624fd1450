"""A trained agent outside its run directory: export it (`export`, `gguf`) and talk to it (`chat`)."""

from grpolab.agent.chat import ChatEvent, ChatSession, ChatSettings
from grpolab.agent.export import ExportResult, HeldoutCheck, export_run, load_exported, merged_model

__all__ = [
    "ChatEvent",
    "ChatSession",
    "ChatSettings",
    "ExportResult",
    "HeldoutCheck",
    "export_run",
    "load_exported",
    "merged_model",
]
