# The framework's pytest hooks (failure diagnostics, report header).
from sluice_test.plugin import pytest_report_header, pytest_runtest_makereport  # noqa: F401
