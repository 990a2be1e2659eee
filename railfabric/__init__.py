"""railfabric: shared code of the controller, agent and softswitch.

`railfabric.v1` holds the generated controller<->agent API (proto/railfabric/v1).
"""

__version__ = "0.1.0"
