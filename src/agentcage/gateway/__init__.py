"""Everything that runs in the gateway namespace: firewall rules, resolver, proxy addon, audit.

This package imports nothing from the CLI; the CLI talks to it through files in the cage's state
directory (gateway.json settings, domains.json policy, control/ requests) and reads what it
writes (audit.jsonl, capture.jsonl, grants.json).

The map, by role:

- the process: `main` (serve: assembles the rest), `__main__`, `zygote` (forks gateways from a
  process that imported this code once), `obituary` (its end recorded), `settings`
  (gateway.json), `ca` (the cage's CA), `proxy` (mitmproxy with only our addons), `mitmpatch`
  (every change to mitmproxy itself).
- the network: `firewall` (the namespace's nftables), `resolver` (the cage's DNS: never
  forwards), `uplink` (the namespace upstream sockets are made in), `upstream` (the one place
  connections are made, after the address is checked), `destination` (the name a flow is for,
  and the gate on dialling it), `connections` (closing a flow's transports).
- a flow, in the order `addon` runs its steps: `flowstate` (what is known of it), `ratelimit`,
  `decoding` (the one bounded decoder), `armour` (inspectors, injector, redactor of one version
  of the secrets), `injection`, `redaction` and `streaming` (responses), `pacing` (uploads),
  `websocket`, `timeouts`, `faults` (fail closed), `reclaim` (memory given back), `messages`.
- the records: `audit` and `auditmask` (audit.jsonl, credentials fingerprinted), `flowaudit`
  and `outcome` (a flow's records), `capture`, `recorder` and `snapshots` (capture.jsonl).
- beside the proxy: `published` (a service of the cage reached from the host's loopback) and
  `relays/` (the mail relays: IMAP and SMTP to the hosts cage.yaml's `relays` names, the
  login's credential swapped in; see its `__init__`).
- the policy: `policyholder` (domains.json, reloaded live; invalid: deny all) and `control/`
  (at run time: the policy API at agentcage.local, the grants and their ceiling, the deciders,
  the operator's channel, the cage's recent refusals; see its `__init__`).
"""
