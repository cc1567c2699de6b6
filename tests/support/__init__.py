"""Helpers shared by test suites: stand-in servers of the systems sloscope talks to."""
