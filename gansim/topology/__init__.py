"""Topologies: YAML files and registered generators -> nodes and full-duplex links, with
routes and directed-link tables."""
