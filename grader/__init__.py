"""Kernel Lab autograder: lab specs, a sandboxed runner, checks and reports.

``kernellab grade LAB SUBMISSION`` -> :func:`grader.runner.grade`.
"""
