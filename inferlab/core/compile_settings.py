"""The compile-time settings of one engine call, applied for the duration of each compile it causes.

Dynamo reads the global torch._inductor.config.freezing when it traces, and inductor reads it and
the post-grad pass (the weights key of core/graph_cache.py) when it compiles; a call that finds
its graph compiled reads neither. So a call only names the settings its compile would need
(`engine_call_settings`), and dynamo's compile callbacks apply them for the compile's duration and
restore the caller's values. Setting the two flags around every call instead was a measurable share
of a small model's step (docs/engines.md): inductor's config setter is Python with dirty tracking.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from inferlab.core.graph_cache import WeightsKey

_call_settings: list[tuple[bool, WeightsKey | None]] = []  # the calls in progress, innermost last
_settings_saved: list[tuple | None] = []  # per compile in progress: the caller's values, or None


def _apply_call_settings(_args) -> None:
    inductor_config = torch._inductor.config
    if not _call_settings:  # a compile that is not the engine's (the uncached baseline, a user's)
        _settings_saved.append(None)
        return
    _settings_saved.append((inductor_config.freezing, inductor_config.post_grad_custom_post_pass))
    inductor_config.freezing, inductor_config.post_grad_custom_post_pass = _call_settings[-1]


def _restore_caller_settings(_args) -> None:
    saved = _settings_saved.pop() if _settings_saved else None
    if saved is not None:
        torch._inductor.config.freezing, torch._inductor.config.post_grad_custom_post_pass = saved


def _register_compile_callbacks() -> None:
    """Dynamo applies the innermost engine call's settings to each compile (registered once)."""
    handler = torch._dynamo.callback_handler
    if _apply_call_settings not in handler.start_callbacks:
        handler.register_start_callback(_apply_call_settings)
        handler.register_end_callback(_restore_caller_settings)


@contextmanager
def engine_call_settings(freeze_weights: bool, weights_key: WeightsKey | None):
    """Within: any compile applies this freezing and weights key (see the module's docstring)."""
    _register_compile_callbacks()  # again each time: torch._dynamo.reset() drops every callback
    _call_settings.append((freeze_weights, weights_key))
    try:
        yield
    finally:
        _call_settings.pop()
