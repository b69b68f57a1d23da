"""Drop-in APIs of other transfer engines, on kvfabric."""
