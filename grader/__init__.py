"""Kernel Lab autograder: lab specs, a sandboxed runner, checks and reports.

``kernellab grade LAB SUBMISSION`` -> :func:`grader.runner.grade`.
"""

import sys as _sys

# nbformat validates notebooks with jsonschema, which registers "iri" format checks when the
# optional package rfc3987_syntax is installed (it is: jupyter-events asks for jsonschema's
# format-nongpl extra). That package compiles its dozens of lark grammars at import time, which
# costs seconds of CPU in every process that reads a notebook (each `kernellab grade`), for
# checks that nbformat's schema never asks for (it has no "iri" formats). Without it jsonschema
# simply leaves those formats unchecked. Only when jsonschema has not been imported yet, so an
# importer that already uses those checks keeps them.
if "jsonschema" not in _sys.modules:
    _sys.modules.setdefault("rfc3987_syntax", None)
