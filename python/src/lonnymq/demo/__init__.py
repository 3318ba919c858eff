"""The lonnymq demo: tenants with different limits share one queue and a pool of workers.

Run it with ``scripts/demo-python`` (or ``python -m lonnymq.demo --dsn ...``). A live view
shows per-tenant progress, waits and in-flight counts; the closing summary checks, from
measurements, that everything finished, the poison job was archived and no limit was broken.
"""
