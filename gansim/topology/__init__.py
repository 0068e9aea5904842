"""Topologies: YAML files and registered generators -> a networkx graph of full-duplex
links, with routes and directed-link tables."""
