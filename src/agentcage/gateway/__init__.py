"""Everything that runs in the gateway namespace: firewall rules, resolver, proxy addon, audit.

This package imports nothing from the CLI; the CLI talks to it through files in the cage's state
directory (gateway.json settings, domains.json policy) and reads what it writes (audit.jsonl).
"""
