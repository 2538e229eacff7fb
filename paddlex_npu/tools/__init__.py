"""Build tools and reports (convert, gear planner, inspect, doctor, coverage, fork patch). They return values and
never print: :mod:`paddlex_npu.cli` prints."""
