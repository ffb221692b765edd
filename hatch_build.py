"""Ship the Julia package inside the wheel, where juliapkg finds it.

A built wheel carries ``julia/PySpectral`` as ``pyspectral/jl/PySpectral`` and
``julia/wheel-juliapkg.json`` (which points there) as ``pyspectral/juliapkg.json``.
Editable installs get neither: there the checkout's top-level ``juliapkg.json``
points at ``julia/PySpectral`` itself, and a second copy would conflict.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class JuliaPackageHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"]["julia/PySpectral"] = "pyspectral/jl/PySpectral"
            build_data["force_include"]["julia/wheel-juliapkg.json"] = (
                "pyspectral/juliapkg.json"
            )
