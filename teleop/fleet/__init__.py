"""The fleet view: robot hosts report to one fleet server, a floor operator watches them all
in a browser (docs/fleet.md, docs/decisions/0091-fleet-web-stack.md)."""
