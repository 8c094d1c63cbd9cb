"""The event engine: channels, memory pools, chips, the network of links, the System and its trace (layer 2).

Imports the ground floor and `simulator.hardware`; nothing above.
"""
