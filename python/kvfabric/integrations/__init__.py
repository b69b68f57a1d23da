"""kvfabric where the serving frameworks load a backend of their own.

- ``kvfabric.integrations.sglang``: an SGLang HiCache storage backend over
  ``kvfabric.Store`` (importable only where SGLang is installed).
- ``kvfabric.integrations.hicache_layout``: its pure policies (the key of a
  page, the buffers of a page, the configuration), with no SGLang import.
"""
