"""The gate: who may send what, through which endpoint, and when.

Callers see :class:`~scrapy_polite.gate.base.Gate`. :mod:`~scrapy_polite.gate.core`
holds what both backends decide alike; :mod:`~scrapy_polite.gate.local` keeps the
state in this process, :mod:`scrapy_polite.gate.redis` in a Redis shared by a fleet.
"""
