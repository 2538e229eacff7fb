"""The list of skipped doc blocks and why, at the end of the docs-as-tests run."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.docs.test_pages import SKIPPED

    if not SKIPPED:
        return
    terminalreporter.section(f"doc blocks not run ({len(SKIPPED)}), each with its mark's reason")
    for block in SKIPPED:
        terminalreporter.write_line(f"{block.where:<34} {block.skip}")
