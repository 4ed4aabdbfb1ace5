"""What the Python side adds to the environment record: the interpreter and installed packages."""

from __future__ import annotations

import platform
import sys
from typing import Any, Dict

from trainlog._trainlog import redact_command_line


def python_info() -> Dict[str, Any]:
    argv, argv_redactions = redact_command_line(list(sys.argv))
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "argv": argv,
        "argv_redactions": argv_redactions,
    }


def installed_packages() -> Dict[str, str]:
    try:
        from importlib.metadata import distributions
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    packages: Dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            packages[name] = dist.version
    return dict(sorted(packages.items(), key=lambda kv: kv[0].lower()))
