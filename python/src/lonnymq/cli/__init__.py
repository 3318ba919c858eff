"""The ``lonnymq`` command-line tool (entry point: ``lonnymq.cli.main:main``)."""
