"""kvfabric where the serving and RL frameworks load a backend of their own.

- ``kvfabric.integrations.sglang``: an SGLang HiCache storage backend over
  ``kvfabric.Store`` (importable only where SGLang is installed).
- ``kvfabric.integrations.hicache_layout``: its pure policies (the key of a
  page, the buffers of a page, the configuration), with no SGLang import.
- ``kvfabric.integrations.verl``: a verl checkpoint-engine backend
  (``kvfabric``) over ``kvfabric.weights`` (importable only where verl is
  installed).
"""
